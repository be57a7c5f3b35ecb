#!/usr/bin/env bash
# The GPU figures, in one command, on a machine with a CUDA jaxlib
# (pip install -U "jax[cuda12]"; nothing here is needed on a CPU):
#
#   bash experiments/gpu_figures.sh [OUT]      # default OUT=gpu_figures
#
# 1. the training benchmark of MDPO-Robust-Lag at 1 ... 4096 vmapped seeds
#    (policy steps/s; target >= 10M at the best seed count), with the machine named;
# 2. the whole CartPole grid (14 algorithms x 10 seeds + the robustness test), cold cache;
# 3. one domain's whole short study (Inventory 1-D: 14 algorithms x 10 seeds + the test).
# Sized for one call of under 10 minutes on one GPU (device time is scarce).
# Wall times go to OUT/times.txt; the README's Performance section takes its GPU
# figures from OUT (write them with the GPU model, from `nvidia-smi -L`).
set -euo pipefail
OUT=${1:-gpu_figures}
mkdir -p "$OUT"
python -c "import jax; assert jax.default_backend() == 'gpu', jax.devices()"
nvidia-smi -L | tee "$OUT/gpu.txt"
python experiments/bench_train.py --seeds 1,10,100,1000,4096 --json "$OUT/bench_train.json" | tee "$OUT/bench_train.txt"
start=$(date +%s)
python experiments/run.py --seeds 10 --out "$OUT/grid" --compile-cache off | tail -25
echo "whole CartPole grid: $(( $(date +%s) - start )) s wall (cold compile cache)" | tee -a "$OUT/times.txt"
start=$(date +%s)
python experiments/run.py --env inventory --seeds 10 --out "$OUT/inventory" --compile-cache off | tail -20
echo "Inventory 1-D short study: $(( $(date +%s) - start )) s wall (cold compile cache)" | tee -a "$OUT/times.txt"

#!/usr/bin/env bash
# The brax velocity presets on a GPU: PPO-Lag and MDPO-Lag, plain and robust (the preset's
# default robust method, worst-of-n), 10 seeds each on brax:hopper and brax:halfcheetah at the
# presets' short budget (5M policy steps), the robustness test over every corner of the box and
# the worst-case search; each run folder gets summary.md (the tables) and the plots, and
# experiments/report.py rewrites them. First, per robot, the feasibility check of its velocity
# limit on its box (rcmdp feasibility), then experiments/brax_gpu_sweep.py chooses the
# batch shape (envs, rollout length, minibatch a seed) by its written rule from a short sweep of
# PPO-Lag (2 seeds, 1M steps a shape); the study trains at that shape. Resumable: run it again.
#
#   pip install -e ".[brax]" && bash experiments/brax_gpu.sh [OUT_DIR]    # default runs/brax_gpu
#
# Not run to the end: on one H200 ours trains brax:hopper at ~57k policy steps/s with 64 seeds
# (docs/brax_envs.md), so this is hours at the presets' small batches, not one 15-minute lease.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/brax_gpu}"
mkdir -p "$OUT"
ALGOS="PPO-Lag,MDPO-Lag,PPO-Robust-Lag,MDPO-Robust-Lag"
python -c "import jax, sys; print('devices:', jax.devices()); sys.exit(jax.default_backend() == 'cpu')" ||
  { echo "brax_gpu.sh: no accelerator found by JAX; these presets are GPU workloads" >&2; exit 1; }
for env in hopper halfcheetah; do
  dir="$OUT/$env"
  # can the velocity limit be kept on the box at all? (3 cost-minimising policies, 1M steps each)
  [ -f "$OUT/feasibility_$env/feasibility.json" ] ||
    python -m rcmdp_jax feasibility --env "brax:$env" --steps 1000000 --out "$OUT/feasibility_$env" 2>&1 | tee -a "$OUT/$env.log"
  python experiments/brax_gpu_sweep.py --env "$env" --out "$OUT/sweep_$env" 2>&1 | tee -a "$OUT/$env.log"
  read -r -a shape < <(python experiments/brax_gpu_sweep.py --env "$env" --out "$OUT/sweep_$env" --report | tail -n 1)
  # experiments/launch.py: run.py --out DIR, --resume when DIR/run.json exists, its one exit-code rule
  /usr/bin/time -v python experiments/launch.py "$dir" --env "brax:$env" --algos "$ALGOS" --seeds 10 --budget short \
    --worst-case costs "${shape[@]}" 2>&1 | tee -a "$OUT/$env.log"
  python experiments/report.py "$dir" | tee "$OUT/$env.tables.md"
done
echo "tables: $OUT/hopper.tables.md $OUT/halfcheetah.tables.md"

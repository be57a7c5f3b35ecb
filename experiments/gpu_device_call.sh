#!/usr/bin/env bash
# One call of the device tool (a GPU machine with no registry; its image has JAX, flax,
# optax, chex and orbax): install the carried wheels (experiments/fetch_gpu_wheels.sh),
# put the package on the path without building it, run experiments/gpu_figures.sh with a
# limit, and copy what it wrote into $OUT (at most 8 files come back). Where the wheels hold
# brax (`fetch_gpu_wheels.sh brax`), then experiments/brax_bench.py on brax:hopper within
# BRAX_LIMIT seconds (brax's own PPO at 2048 envs, then our PPO-Lag at 64 vmapped seeds).
#   carry: [".whl"]   command: bash experiments/gpu_device_call.sh [LIMIT_S] [BRAX_LIMIT_S]
set -uo pipefail
LIMIT=${1:-480}
BRAX_LIMIT=${2:-0}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/pkg && rm -rf /tmp/pkg/rcmdp_jax && cp -r src/rcmdp_jax /tmp/pkg/ && cp -r envs /tmp/pkg/rcmdp_jax/envs
# `python` from the same folder as the python3 that has JAX (a link elsewhere would lose its venv)
export PATH=$(dirname "$(command -v python3)"):$PATH PYTHONPATH=/tmp/pkg:/tmp/site PYTHONUNBUFFERED=1
python -c "import jax, flax, optax, gymnax, distrax, rcmdp_jax.envs; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"
timeout "$LIMIT" bash experiments/gpu_figures.sh /tmp/gf 2>&1 | tee "$OUT/log.txt"
echo "gpu_figures exit: ${PIPESTATUS[0]}" | tee -a "$OUT/log.txt"
# gpu.txt and bench_train.txt are in log.txt too: at most 8 files come back
for f in bench_train.json times.txt; do [ -f /tmp/gf/$f ] && cp /tmp/gf/$f "$OUT/"; done
g=$(find /tmp/gf/grid -name summary.md | head -1); [ -n "$g" ] && cp "$g" "$OUT/grid_summary.md"
i=$(find /tmp/gf/inventory -name summary.md | head -1); [ -n "$i" ] && cp "$i" "$OUT/inventory_summary.md"
if [ "$BRAX_LIMIT" -gt 0 ] && python -c "import brax" 2>/dev/null; then
  # brax's own PPO first (a shorter compile), then ours; each within half of BRAX_LIMIT
  timeout $((BRAX_LIMIT / 2)) python experiments/brax_bench.py --env hopper --seeds '' --brax-steps 3000000 \
    --brax-envs 2048 --json "$OUT/brax_ppo_hopper.json" 2>&1 | grep -v warp | tee "$OUT/brax_log.txt"
  echo "brax ppo exit: ${PIPESTATUS[0]}" | tee -a "$OUT/brax_log.txt"
  timeout $((BRAX_LIMIT / 2)) python experiments/brax_bench.py --env hopper --seeds 64 --steps 50000 --repeats 2 \
    --brax-envs '' --json "$OUT/ours_hopper.json" 2>&1 | grep -v warp | tee -a "$OUT/brax_log.txt"
  echo "ours exit: ${PIPESTATUS[0]}" | tee -a "$OUT/brax_log.txt"
fi
exit 0

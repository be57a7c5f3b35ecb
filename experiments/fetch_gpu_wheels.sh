#!/usr/bin/env bash
# Fetch, on a machine with PyPI, the wheels that a GPU machine without a registry lacks
# (its image has JAX, flax, optax, chex and orbax, but not gymnax or distrax and what
# they need), into .whl/ (ignored by git), for the device tool's `carry`:
#
#   bash experiments/fetch_gpu_wheels.sh        # here, once
#   # there, before experiments/gpu_figures.sh:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/src
#
# The versions are the ones `pip install -e .` takes on the CPU machines (Python 3.12 there).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
    gymnax==1.0.1 distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 gymnasium==1.3.0 \
    farama-notifications==0.0.6 dm-tree==0.1.10 gast==0.7.0 decorator==5.3.1
ls .whl

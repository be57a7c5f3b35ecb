#!/usr/bin/env bash
# Fetch, on a machine with PyPI, the wheels that a GPU machine without a registry lacks
# (its image has JAX, flax, optax, chex and orbax, but not gymnax or distrax and what
# they need), into .whl/ (ignored by git), for the device tool's `carry`:
#
#   bash experiments/fetch_gpu_wheels.sh        # here, once
#   bash experiments/fetch_gpu_wheels.sh brax   # the same and brax with MuJoCo (the [brax] extra)
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
if [ "${1:-}" = brax ]; then
  # brax 0.14.2 and what it needs that the GPU image lacks (it has scipy, etils, absl, jinja2,
  # pillow, matplotlib, seaborn, six); versions as `pip install -e ".[brax]"` takes them
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 -d .whl \
      brax==0.14.2 mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 mujoco-mjx==3.17.0 trimesh==5.2.0 \
      ml_collections==1.1.0 jaxopt==0.8.5 tensorboardX==2.6.5 glfw==2.11.0 pyopengl==3.1.10 flask==3.1.3 \
      flask-cors==6.0.5 websockets==17.4 blinker==1.9.0 itsdangerous==2.2.0
fi
ls .whl

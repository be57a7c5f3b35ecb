"""The main job (the logic is ``rcmdp_jax.study.cli``; installed, the same command is ``rcmdp``):

    python experiments/run.py --seeds 10 --vmap

Train every algorithm of the grid (all seeds in one vmapped call per family), run
the robustness test and write a run folder with tables and plots;
``python experiments/run.py --help`` lists the options.
"""

import sys

if __name__ == "__main__":
    # one XLA device per core on a CPU host before JAX starts (rcmdp_jax.study.console.split_cpu)
    from rcmdp_jax.study.console import train

    sys.exit(train())

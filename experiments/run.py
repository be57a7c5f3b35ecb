"""The main job (the logic is ``rcmdp_jax.runner``):

    python experiments/run.py --seeds 10 --vmap

Train every algorithm of the grid (all seeds in one vmapped call per family), run
the robustness test and write a run folder with tables and plots;
``python experiments/run.py --help`` lists the options.
"""

import sys

from rcmdp_jax import sharding

if __name__ == "__main__":
    # One XLA device per core on a CPU host, before anything starts JAX's backends
    # (importing gymnax does): --devices auto then shards the seeds over all cores.
    # No effect on accelerators, or where XLA_FLAGS already sets the count. (Called
    # in-process, rcmdp_jax.runner.main uses the devices JAX already has.)
    sharding.split_cpu(sharding.available_cores())
    from rcmdp_jax.runner import main

    sys.exit(main())

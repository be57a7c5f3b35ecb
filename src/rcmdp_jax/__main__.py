"""``python -m rcmdp_jax [options]`` is ``rcmdp [options]``; ``python -m rcmdp_jax report RUN_DIR``."""

import sys

from rcmdp_jax.study.console import main

if __name__ == "__main__":
    sys.exit(main())

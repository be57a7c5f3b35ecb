"""The old import path of ``rcmdp_jax.study.user_env`` (a user's environment on the command
line), kept for scripts: the same module, not a copy."""

import sys

from rcmdp_jax.study import user_env

sys.modules[__name__] = user_env

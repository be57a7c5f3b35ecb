"""Test-session settings.

Tests check numbers, not speed: XLA's backend optimisation level 0 roughly halves
compile time on the CPU, and compile time dominates this suite. It is added to any
``XLA_FLAGS`` the environment already has (unless that sets a level itself), before
JAX is imported. ``test_portability.py`` runs a smoke test at the default level, the
one users run.
"""

import os
import sys
from pathlib import Path

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_backend_optimization_level" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_backend_optimization_level=0").strip()
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from rcmdp_jax import cpu_prng  # noqa: E402  (after XLA_FLAGS; imports no JAX)

cpu_prng.apply_default()  # the lowering the runner uses (``import rcmdp_jax`` alone changes nothing)

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

"""Test-session settings.

Tests check numbers, not speed: XLA's backend optimisation level 0 roughly halves
compile time on the CPU, and compile time dominates this suite. It is added to any
``XLA_FLAGS`` the environment already has (unless that sets a level itself), before
JAX is imported. ``test_portability.py`` runs a smoke test at the default level, the
one users run.

One XLA compilation cache serves the session (both xdist workers): a fresh folder,
removed at exit by the process that made it, so
every session (CI's too) starts cold and nothing leaks between sessions or into the
user's own cache. Tests that build the same program again (the CLI tests run the
same tiny families in separate runner calls; the runner keeps a cache JAX already
has) compile it once. Subprocesses inherit it.
"""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_backend_optimization_level" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_backend_optimization_level=0").strip()
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
_CACHE = os.environ.get("RCMDP_JAX_TEST_XLA_CACHE")
if _CACHE is None:  # the first process of the session (pytest-xdist's workers inherit it)
    _CACHE = tempfile.mkdtemp(prefix="rcmdp_jax_test_xla_")
    os.environ["RCMDP_JAX_TEST_XLA_CACHE"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.5"

from rcmdp_jax import cpu_prng  # noqa: E402  (after XLA_FLAGS; imports no JAX)

cpu_prng.apply_default()  # the lowering the runner uses (``import rcmdp_jax`` alone changes nothing)

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

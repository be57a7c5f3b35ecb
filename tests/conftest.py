"""Test-session settings.

Tests check numbers, not speed: XLA's backend optimisation level 0 roughly halves
compile time on the CPU, and compile time dominates this suite. Set before JAX
is imported; an explicit XLA_FLAGS from the environment is kept.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

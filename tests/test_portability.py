"""The code users run: XLA's default optimisation level (the suite runs at level 0)."""

import os
import subprocess
import sys


def test_smoke_run_at_the_default_xla_optimisation_level():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_backend_optimization_level" not in f]
    env["XLA_FLAGS"] = " ".join(flags)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "default_opt_level_script.py")
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=400)
    assert proc.returncode == 0 and "SMOKE OK" in proc.stdout, proc.stderr[-3000:]

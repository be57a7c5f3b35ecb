"""The code users run: XLA's default flags (the suite compiles at level 0, older emitters)."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # the quick tier leaves them out (pyproject.toml's markers)


def test_smoke_run_at_the_default_xla_optimisation_level():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    from conftest import TEST_XLA_FLAGS  # the suite's compile-time flags, not the users'

    names = {f.split("=")[0] for f in TEST_XLA_FLAGS}
    flags = [f for f in env.get("XLA_FLAGS", "").split() if f.split("=")[0] not in names]
    env["XLA_FLAGS"] = " ".join(flags)
    env.pop("RCMDP_JAX_ROLLED_THREEFRY", None)  # the runner's random-bit lowering, not the suite's
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "default_opt_level_script.py")
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=400)
    assert proc.returncode == 0 and "SMOKE OK" in proc.stdout, proc.stderr[-3000:]


def test_the_install_puts_only_rcmdp_jax_on_the_path_and_import_changes_nothing_global(tmp_path):
    """From a folder with a user's own ``envs`` package: ``rcmdp_jax.envs`` is ours,
    ``envs`` is theirs, and importing rcmdp_jax leaves JAX's random lowering as it was."""
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("MINE = True\n")
    script = """
import importlib.util, os, sys
assert importlib.util.find_spec("envs") is None, importlib.util.find_spec("envs")  # nothing installed as `envs`
sys.path.insert(0, os.getcwd())
import jax
def while_loops():
    return jax.jit(lambda k: jax.random.split(k, 3)).lower(jax.random.PRNGKey(0)).as_text().count("while")
before = while_loops()
import rcmdp_jax
from rcmdp_jax import envs as ours, make_train, preset
make_train(preset("cartpole", "MDPO"))
import envs as theirs
assert theirs.MINE and ours.ENV_NAMES == ("cartpole", "inventory", "inventory3d"), (theirs, ours)
after = while_loops()
from rcmdp_jax import cpu_prng
assert cpu_prng.use_unrolled_threefry()
unrolled = while_loops()
print("LOOPS", before, after, unrolled)
"""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after, unrolled = (int(x) for x in proc.stdout.split("LOOPS")[1].split())
    assert before == after > unrolled, (before, after, unrolled)

"""Test-session settings.

Tests check numbers, not speed, and compile time dominates this suite. Two XLA
flags cut it on the CPU: backend optimisation level 0 (roughly halves it) and, where
jaxlib still has them (before 0.11), the older LLVM IR emitters for fusions instead of
the MLIR fusion emitters (another ~35% on a family's program). They are added to any ``XLA_FLAGS`` the
environment already has (unless that sets them itself), before JAX is imported.
``test_portability.py`` runs a smoke test with the flags users run (``TEST_XLA_FLAGS``
removed). Python's cyclic garbage collector runs less often (tracing a family builds
many objects; ~15% of a trace here).

One XLA compilation cache serves the session (both xdist workers): a fresh folder,
removed at exit by the process that made it, so
every session starts cold and nothing leaks between sessions or into the
user's own cache. A folder given in ``RCMDP_JAX_TEST_XLA_CACHE`` is used and kept instead:
``.ci/run`` gives its two steps (README's test command, then the checks marked ``slow``) one
folder, and one for the shared runs below, so the second reuses what the first compiled and
trained. Tests that build the same program again (the CLI tests run the same tiny families
in separate runner calls; the runner keeps a cache JAX already has) compile it once.
Subprocesses inherit it. Every program goes in, however quick to compile: each process
(the other worker, every subprocess) otherwise compiles again the same hundreds of small
eager programs (``jnp`` ops outside ``jit``); three quick test files ran in 43 s instead of
64 s from a warm cache that holds them (2-core Xeon).

The tiny studies several test files read (``full_run``, ``trained``) are trained once a
session, not once per worker: ``shared_run`` below.
"""

import atexit
import fcntl
import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest


def _jaxlib_version() -> tuple[int, ...]:
    from importlib.metadata import version  # not ``import jaxlib``: nothing of JAX starts before the flags

    return tuple(int(x) for x in version("jaxlib").split(".")[:2] if x.isdigit())


# XLA aborts the process on a flag it does not know: jaxlib 0.11 dropped the older emitters' switch
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0",) + (
    ("--xla_cpu_use_fusion_emitters=false",) if _jaxlib_version() < (0, 11) else ()
)
for _flag in TEST_XLA_FLAGS:
    _flags = os.environ.get("XLA_FLAGS", "")
    if _flag.split("=")[0] not in _flags:
        os.environ["XLA_FLAGS"] = (_flags + " " + _flag).strip()
gc.set_threshold(10_000, 50, 1_000)
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
_CACHE = os.environ.get("RCMDP_JAX_TEST_XLA_CACHE")
if _CACHE is None:  # the first process of the session (pytest-xdist's workers inherit it)
    _CACHE = tempfile.mkdtemp(prefix="rcmdp_jax_test_xla_")
    os.environ["RCMDP_JAX_TEST_XLA_CACHE"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"

# JAX's own (rolled) CPU lowering of threefry, here and in the runner the CLI tests call: the
# same bits as the runner's straight-line one (``test_cpu_prng.py``) in a smaller program, ~10 %
# less compile time; the portability smoke test trains with the runner's lowering
os.environ.setdefault("RCMDP_JAX_ROLLED_THREEFRY", "1")
# no compiled programs kept between the session's runs (rcmdp_jax/program_store.py): a test that patches the
# library and trains must trace; test_program_store.py turns it on where it checks it
os.environ.setdefault("RCMDP_JAX_PROGRAM_STORE", "off")

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
sys.path.insert(0, str(EXPERIMENTS))

if os.environ.get("RCMDP_JAX_TEST_COMPILE_LOG"):  # a profile of the suite: where compile time goes
    import bench_programs  # noqa: E402  (experiments/: one line per trace, lowering, compile and cache hit or miss)

    bench_programs.log_compiles(os.environ["RCMDP_JAX_TEST_COMPILE_LOG"])


# One folder of finished runs serves the session (both xdist workers), made and removed like the
# compilation cache above; a folder given in the environment is used as it is and kept (to look at
# the runs afterwards: give an empty one, a finished run found there is reused).
_RUNS = os.environ.get("RCMDP_JAX_TEST_SHARED_RUNS")
if _RUNS is None:
    _RUNS = tempfile.mkdtemp(prefix="rcmdp_jax_test_runs_")
    os.environ["RCMDP_JAX_TEST_SHARED_RUNS"] = _RUNS
    atexit.register(shutil.rmtree, _RUNS, ignore_errors=True)
os.makedirs(_RUNS, exist_ok=True)


def shared_run(name: str, args: list[str]) -> Path:
    """The run folder of ``cli.main(args + ["--out", ...])``, trained once a session: under
    a file lock (``flock``) the first process to ask trains it, the other waits and reuses it.
    ``NAME.done`` is written only after the run finished with exit 0; a failed run writes
    ``NAME.failed`` instead, and every test that needs it fails with that message (nothing half
    written is reused). Each call adds a line to ``NAME.log``: who trained it, who reused it.
    The folder is shared: tests read it, and copy it before changing anything
    (``cli_helpers._copy``)."""
    root = Path(_RUNS)
    out, done, failed = root / name, root / f"{name}.done", root / f"{name}.failed"
    who = f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} (PID {os.getpid()})"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes or the process ends
        if done.exists() or failed.exists():
            said = "reused" if done.exists() else "failed before"
        else:
            import traceback

            from rcmdp_jax.study import cli

            shutil.rmtree(out, ignore_errors=True)  # what a process killed while training left
            try:
                code = cli.main(args + ["--out", str(out)])
            except Exception:
                code = "an exception:\n" + traceback.format_exc()
            if code == 0:
                done.write_text(f"{who}\n")
            else:
                failed.write_text(f"the shared run {name!r}, trained by {who}, ended with {code}")
            said = "trained" if code == 0 else "failed"
        with open(root / f"{name}.log", "a") as log:
            log.write(f"{said} by {who}\n")
    if not done.exists():
        pytest.fail(failed.read_text(), pytrace=False)
    return out


@pytest.fixture(scope="session")
def full_run():
    """The command-line tests' tiny study (``tiny_configs.TINY``: two families on CartPole)."""
    from tiny_configs import TINY

    return shared_run("full", TINY)


@pytest.fixture(scope="session")
def trained():
    """A tiny MDPO-Lag run on CartPole (``tiny_configs.HOSTILE_TINY``) for the tests that edit,
    re-read or re-test a finished run folder (copy it before changing it)."""
    from tiny_configs import HOSTILE_TINY

    return shared_run("hostile", HOSTILE_TINY)


# The files' CPU seconds in one whole run (2-core Intel Xeon, 2026-11), heaviest first: pytest-xdist
# (``--dist loadfile --no-loadscope-reorder``, pyproject.toml) hands the two workers whole files in
# this order, so the long files start first and the short ones fill in at the end (by default it
# orders files by their number of tests, which started the brax file last). Files not listed
# follow in their usual order; a stale number costs only balance. The files split from test_train.py
# (330), test_cli.py (270) and test_user_env.py (90) share their old number by an estimate of their parts.
FILE_WEIGHTS = {
    "test_brax.py": 280, "test_train_families.py": 190, "test_cli_study.py": 160, "test_adversary.py": 160,
    "test_train_learning.py": 130, "test_gymnax_train.py": 130, "test_sharding.py": 100, "test_fidelity.py": 95,
    "test_gymnax.py": 80, "test_portability.py": 80, "test_cli_resume.py": 70, "test_user_env_run.py": 65,
    "test_distributed.py": 60, "test_dual_estimators.py": 50, "test_worst_case.py": 45, "test_train_mechanics.py": 40,
    "test_cli_errors.py": 40, "test_envs.py": 35, "test_feasibility.py": 30, "test_user_env_checks.py": 25,
    "test_train_config.py": 10, "test_pid_rule.py": 60, "test_policy_logs.py": 50, "test_cli_refusals.py": 50,
    "test_separate_worst_cases.py": 45, "test_episode_cost.py": 40, "test_plugin_state.py": 40,
    "test_plugin_files.py": 30, "test_figure_text.py": 20, "test_entry_points.py": 60, "test_quick_start.py": 90,
}  # fmt: skip


def pytest_collection_modifyitems(config, items):
    weight = lambda item: -FILE_WEIGHTS.get(item.path.name, 0)  # noqa: E731
    items.sort(key=weight)  # stable: the tests of a file keep their order


@pytest.fixture(autouse=True, scope="session")
def _fewer_bootstrap_resamples():
    """The reports the tests write in this process draw 50 bootstrap resamples for the IQM
    intervals, not 500 (rliable's bootstrap is Python: seconds per report at 500, and the
    suite writes dozens). The checks read the point estimates, which resampling leaves alone
    (``test_aggregate.py`` checks the interval on its own); the report says how many it drew."""
    from rcmdp_jax.study import report

    report.REPS = 50
    yield

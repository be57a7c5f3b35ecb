"""The process's runtime for a command: several processes, the device mesh, the CPU split, the compilation
caches, the command that continues a run (``resume_command``), the lines while a program compiles (``ticking``)."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import threading
import time
from pathlib import Path

import jax

from rcmdp_jax import cpu_prng, program_store, sharding, xla_cache
from rcmdp_jax.chunked import fmt
from rcmdp_jax.study.run_plan import PlanError

_SAID: list[bool] = []  # split_in_process's note, once said
INSTALL = "pip install 'rcmdp_jax[tensorboard]'"


@contextlib.contextmanager
def ticking(label: str, what: str, since: float | None = None, every: float = 15.0):
    """While the block runs, ``{label} {what}: 45.0s so far`` every ``every`` seconds counted from ``since``."""
    t0 = time.perf_counter() if since is None else since
    done = threading.Event()

    def tick():
        while not done.wait(every):
            print(f"{label} {what}: {fmt(time.perf_counter() - t0)} so far", flush=True)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def program_name() -> str:
    """The runner as messages name it: ``rcmdp`` (also ``rcmdp-report``'s), ``python -m rcmdp_jax``, ``run.py``."""
    called = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    if called.name == "__main__.py" and called.parent.name == "rcmdp_jax":
        return "python -m rcmdp_jax"
    return "rcmdp" if called.name in ("rcmdp", "rcmdp-report") else "run.py"


def start_processes(args) -> bool:
    """``--distributed``: join the other processes; whether this is the first process (the one that writes)."""
    if not args.distributed and any(x is not None for x in (args.coordinator, args.num_processes, args.process_id)):
        raise PlanError("--coordinator, --num-processes and --process-id need --distributed")
    if not args.distributed:
        return True
    try:
        sharding.init_distributed(args.coordinator, args.num_processes, args.process_id)
    except (ValueError, RuntimeError) as err:
        raise PlanError(f"--distributed: {err}") from None
    return jax.process_index() == 0


def mesh_of(args):
    """The device mesh the seeds are sharded over, or None for one device."""
    if not (args.distributed or args.devices != "1"):
        return None
    try:
        mesh = sharding.setup_devices(args.devices, args.distributed)
    except ValueError as err:
        raise PlanError(f"--devices: {err}") from None
    return None if mesh.size == 1 and not args.distributed else mesh  # one device: nothing to split


def os_error(err: OSError, where: Path | str) -> str:
    """An OS error in one line: its path (else ``where``) and its cause (``No space left on device``)."""
    path = err.filename if err.filename is not None else f"a file in {where}"
    return f"{path}: {err.strerror or err}"


def setup(args) -> str:
    """Before the plan: the CPU split (its note, or ""), ``--compile-cache`` and ``--tensorboard`` checked."""
    note = "" if args.distributed else split_in_process(args.devices, args.seeds)  # before any JAX work
    if (cache := args.compile_cache) not in (None, "off"):
        if not cache.strip():
            raise PlanError("--compile-cache is empty; name a folder, 'off', or leave it out for the default")
        try:  # the cache folder itself (not the run folder) may be made now
            Path(cache).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise PlanError(f"--compile-cache {cache}: cannot use it as a folder ({err.strerror or err}); "
                             "name a folder or 'off'") from None  # fmt: skip
    args.event_files, args.event_note = event_files(args.tensorboard)
    return note


def event_files(choice: str) -> tuple[bool, str]:
    """``--tensorboard``: whether the run writes event files, and the note why not (``on``: a refusal)."""
    if choice == "off":
        return False, ""
    try:  # installed is not enough: one that fails on import would fail after the run started
        from tensorboardX import FileWriter  # noqa: F401
    except Exception as err:
        why = f"cannot be imported ({type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:120]})"
        if isinstance(err, ModuleNotFoundError) and err.name == "tensorboardX":
            why = "is not installed"
    else:
        return True, ""
    if choice == "on":
        raise PlanError(f"--tensorboard on: tensorboardX {why} ({INSTALL}); or --tensorboard off")
    return False, (f"rcmdp_jax: note: no TensorBoard event files: tensorboardX {why} ({INSTALL}); "
                   "the training metrics are in each algorithm's train_metrics.csv")  # fmt: skip


def speed_up(cache: str | None) -> None:
    """Faster CPU random bits; the XLA cache (``cache``: a folder, ``off``, None), bounded
    (``xla_cache.evict``), with the ``program_store`` in it."""
    cpu_prng.apply_default()
    if cache == "off":  # neither cache, also where JAX_COMPILATION_CACHE_DIR names a folder
        jax.config.update("jax_enable_compilation_cache", False)
        program_store.configure(None)
        return
    if cache is not None or not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", cache or str(Path.home() / ".cache" / "rcmdp_jax" / "xla"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    if jax.config.jax_compilation_cache_max_size == -1:  # JAX's cache unbounded (its own bound: not set)
        xla_cache.evict(Path(jax.config.jax_compilation_cache_dir))
    program_store.configure(Path(jax.config.jax_compilation_cache_dir) / program_store.SUBFOLDER)


def resume_command(out: Path) -> str:
    """The command that continues the run in ``out``, called as this one: ``rcmdp --resume --out DIR``."""
    called = program_name()
    if called == "run.py":  # a script: run by Python
        called = f"python {shlex.quote(sys.argv[0]) if sys.argv and sys.argv[0] else 'experiments/run.py'}"
    return f"{called} --resume --out {shlex.quote(str(out))}"


def split_in_process(devices: str, seeds: int) -> str:
    """From a script: the CPU split into a device per core (``--devices auto``), else once the line why not (or "")."""
    cores = sharding.available_cores()
    if devices != "auto" or cores < 2 or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return ""
    late = not sharding.split_cpu(cores) and not _SAID and jax.default_backend() == "cpu" and seeds >= 2
    if not late or (have := jax.local_device_count()) >= cores:
        return ""
    _SAID.append(True)
    return (f"rcmdp_jax: note: JAX started in this process before rcmdp_jax could split the CPU, so the seeds "
            f"run on {have} device(s), not {cores}; call rcmdp_jax.study.console.split_cpu() before any JAX work "
            f"and before importing gymnax, or set XLA_FLAGS=--xla_force_host_platform_device_count={cores}")  # fmt: skip

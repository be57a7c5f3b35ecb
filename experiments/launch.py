"""What every script in experiments/ shares: one resumable launch of the runner, one exit-code
rule, one mean ± SE and one description of the machine.

``launch(out, args)`` runs ``python experiments/run.py ARGS --out OUT`` and adds ``--resume``
when ``OUT/run.json`` exists (a run was started there: the runner trains only what is missing,
and refuses in one line a plan that differs from the one written). ``command(out, args)`` is the
same command as a list, for a script that runs several at once (``job_pool.run_pool``).

The exit-code rule, one for every script (``FINISHED``; the runner's statuses are
``rcmdp_jax.study.orchestrate.Study.exit_status``):

* 0 and 3 are a finished run whose folder holds its results. 3 says some seeds diverged: the
  runner names them and leaves them out of every statistic, and a script that reads the folder
  drops the same seeds (``rcmdp_jax.study.run_folder.kept_seeds``).
* every other status stops the script, naming it (``LaunchFailed``): 2 bad input (nothing
  written), 4 an algorithm has no seed left (its rows would be empty), 5 a checkpoint missing
  or damaged (the next ``--resume`` retrains it), 130 / 143 interrupted (``--resume`` goes on),
  anything else a crash. The run folder stays as it is; running the script again resumes it.

``mean_se`` is the seeds' mean and its standard error (``std / sqrt(n)``, ``ddof=1``);
``machine`` the CPU, its cores and, when asked, JAX's backend and devices.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RUN_PY = ROOT / "experiments" / "run.py"
FINISHED = (0, 3)  # the statuses after which a script reads the run folder (the module's docstring)
MEANING = {
    0: "finished",
    2: "bad input, nothing written",
    3: "finished; some seeds diverged (named in the report, left out of every statistic)",
    4: "an algorithm has no seed left",
    5: "a checkpoint was missing or damaged (--resume retrains it)",
    130: "interrupted (Ctrl-C; --resume goes on)",
    143: "terminated (SIGTERM; --resume goes on)",
}


class LaunchFailed(SystemExit):
    """A launch that ended outside ``FINISHED``: the message names the command, the status and
    what it means, and the log when there is one. Uncaught, the script exits with status 1 and
    that message."""

    def __init__(self, cmd: list[str], status: int, log: Path | None = None):
        self.status = status
        where = f"; its output is in {log}" if log is not None else ""
        super().__init__(f"{' '.join(map(str, cmd))}\nexited with status {status} ({explain(status)}){where}")


def explain(status: int) -> str:
    """What the runner's exit status means, in words."""
    if status < 0:
        return f"killed by signal {-status}"
    return MEANING.get(status, "a crash: see its output")


def finished(status: int) -> bool:
    """The exit-code rule: whether a script reads the run folder after this status."""
    return status in FINISHED


def command(out: Path, args: list[str], program: Path = RUN_PY) -> list[str]:
    """``python PROGRAM ARGS --out OUT``, and ``--resume`` when ``OUT/run.json`` exists."""
    out = Path(out)
    cmd = [sys.executable, str(program), *map(str, args), "--out", str(out)]
    return cmd + (["--resume"] if (out / "run.json").exists() else [])


def launch(out: Path, args: list[str], log: Path | None = None, check: bool = True, program: Path = RUN_PY) -> int:
    """Run ``command(out, args)`` from the repository's root (its output appended to ``log``
    when given) and return its exit status; with ``check`` a status outside ``FINISHED``
    raises ``LaunchFailed``."""
    cmd = command(out, args, program)
    if log is None:
        status = subprocess.run(cmd, cwd=ROOT).returncode
    else:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            status = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if check and not finished(status):
        raise LaunchFailed(cmd, status, log)
    return status


def mean_se(x) -> tuple[float, float]:
    """The mean of ``x`` and its standard error, ``std(ddof=1) / sqrt(n)`` (0 for fewer than two
    values: nothing to spread; NaN for none)."""
    x = np.asarray(x, np.float64).ravel()
    if x.size == 0:
        return float("nan"), float("nan")
    se = x.std(ddof=1) / np.sqrt(x.size) if x.size > 1 else 0.0
    return float(x.mean()), float(se)


def format_mean_se(x, digits: int = 2) -> str:
    """``mean_se`` as ``+m.mm ± s.ss`` (signed mean), ``–`` for no values."""
    x = np.asarray(x, np.float64).ravel()
    if x.size == 0:
        return "–"
    m, se = mean_se(x)
    return f"{m:+.{digits}f} ± {se:.{digits}f}"


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def machine(devices: bool = False) -> dict:
    """The machine a result was measured on: ``cpu``, ``cores``, ``python``; with ``devices``
    also JAX's ``backend``, ``devices`` and version (which starts JAX's backends: a script that
    must set XLA flags first asks after setting them)."""
    out = {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version()}
    if devices:
        import jax

        out.update(backend=jax.default_backend(), devices=[str(d) for d in jax.devices()], jax=jax.__version__)
    return out


def describe(m: dict) -> str:
    """``machine()`` in words: ``2-core Intel(R) Xeon(R) CPU @ 2.20GHz`` (and ``, cpu backend,
    JAX 0.x`` when it names the backend)."""
    text = f"{m['cores']}-core {m['cpu']}"
    return text + (f", {m['backend']} backend, JAX {m['jax']}" if "backend" in m else "")


if __name__ == "__main__":  # for shell scripts: python experiments/launch.py OUT ARGS...
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: python experiments/launch.py OUT [RUNNER ARGS...]  (adds --resume when OUT/run.json exists)")
    try:
        launch(Path(sys.argv[1]), sys.argv[2:])
    except LaunchFailed as err:
        print(f"launch.py: {err.code}", file=sys.stderr)
        sys.exit(err.status if err.status > 0 else 1)

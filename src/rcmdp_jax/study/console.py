"""The one entry point: every console command ``pip install`` makes (``[project.scripts]``)
dispatches from here (``main``):

    rcmdp [run.py's options]     train and test (``rcmdp --help``; ``cli.main``)
    rcmdp report RUN_DIR         rewrite a run folder's tables and plots (``report``)
    rcmdp feasibility --env ...  whether the constraints can be kept on the box at all (``feasibility``)
    rcmdp eval RUN_DIR --algo A --seed S --kernel K   a trained policy on one kernel (``evaluate``)
    rcmdp-report RUN_DIR         the same as ``rcmdp report``
    python -m rcmdp_jax ...      the same as ``rcmdp``

``experiments/run.py`` and ``experiments/report.py`` call these functions too.

``rcmdp report RUN_DIR`` (also ``rcmdp-report`` and ``python experiments/report.py``)
rewrites a run folder's tables and plots from its saved results, in a fresh process (a user
environment is rebuilt from ``run.json``'s ``env_sources``).

``rcmdp eval RUN --algo NAME --seed S --kernel 'FIELD=+20%,...'``: one trained policy of a
run folder (``study.policy.load_policy``) on one kernel, its return and constraint values
with standard errors over the episodes. Bad input is one line and exit 2, before anything
compiles; nothing is written (``--json FILE`` writes the numbers).

``rcmdp feasibility``: can the constraints be kept on the box at all (``rcmdp_jax.feasibility``)?

    rcmdp feasibility --env gymnax:Pendulum-v1 [--uncertain g=0.2,m=0.2 --costs speed] [--seeds 3]
                      [--steps N] [--controller FILE.py:NAME] [--out DIR]

Writes ``DIR/feasibility.json`` (per constraint: ``keepable``, ``least_worst_C``, the kernels
where it is not keepable, ...; ``wall_s``, the check's wall time) and ``DIR/feasibility.png``
(the least C against the distortion level); ``DIR`` may be a run folder (default
``runs/feasibility-<timestamp>``), locked while the check runs. Bad input is one line and exit
2, before anything is trained or written (sizes as the runner's: ``study.run_plan``); an existing
``feasibility.json`` is never overwritten. Each constraint's row is kept in
``DIR/feasibility.partial.json`` as it is found: Ctrl-C (SIGTERM) is one line and exit 130
(143), and ``--resume`` continues from the next constraint, to the numbers of one call. Its
command lives in ``study.feasibility_command``.

``rcmdp report`` and ``rcmdp eval`` under Ctrl-C or SIGTERM: one line, exit 130 (143)
(``signals_exit``); the report's files all old or all new.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path


def split_cpu() -> None:
    """One XLA device per CPU core, before anything starts JAX's backends (the first
    computation does, and so does importing gymnax): ``--devices auto`` then shards the
    seeds over all cores. Called too late, it says so in one line (once per process). No
    effect on accelerators, or where ``XLA_FLAGS`` already sets the count."""
    from rcmdp_jax.study.runtime import split_in_process

    note = split_in_process("auto", 2)
    if note:
        print(note, flush=True)


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop) while the command starts: handled as Ctrl-C is."""


def _terminate(signum, frame):
    raise _Terminated()


def _started(command, argv, said: str) -> int:
    """``command(argv)``; Ctrl-C (or SIGTERM) while it starts (imports, checks, a user's
    module) is one line (``said``) and exit 130 (143), as it is once it trains
    (``runtime.ctrl_c_exits``)."""
    import signal
    import threading

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return command(argv)
    except KeyboardInterrupt as err:
        print(f"\ninterrupted while starting: {said}", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(err, _Terminated) else 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def train(argv=None) -> int:
    """The main job (``rcmdp_jax.study.cli.main``) with the CPU split into devices first."""

    def command(argv):
        split_cpu()
        from rcmdp_jax.study.cli import main

        return main(argv)

    return _started(command, argv, "nothing was trained")


def feasibility(argv=None) -> int:
    def command(argv):
        from rcmdp_jax.study.feasibility_command import run

        return run(argv)

    return _started(command, argv, "no feasibility.json was written")


def evaluate(argv=None) -> int:
    """``rcmdp eval``: Ctrl-C (SIGTERM) at any moment is one line and exit 130 (143), nothing
    written (``--json`` is written whole at the end, or not at all)."""
    with signals_exit(EVAL_PROG, "nothing was evaluated or written"):
        return _evaluate(argv)


def main(argv=None) -> int:
    """``rcmdp report RUN_DIR``, ``rcmdp feasibility ...``, ``rcmdp eval ...`` or ``rcmdp [options]`` (training)."""
    if argv is None:
        _ENTRY.append(True)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["report"]:
        return report(argv[1:])
    if argv[:1] == ["feasibility"]:
        return feasibility(argv[1:])
    if argv[:1] == ["eval"]:
        return evaluate(argv[1:])
    return train(argv)


def report_main() -> int:
    _ENTRY.append(True)
    return report(sys.argv[1:])


# --- rcmdp report RUN_DIR ---
REPORT_PROG = "rcmdp report"  # as its error lines begin, like the runner's and feasibility's


def report_error(message: str) -> None:
    """One line of the report's refusal, named as the command was called (``rcmdp report``,
    ``rcmdp-report``, ``report.py``), its advice in the matching runner's terms (``rcmdp
    --resume`` or ``run.py --resume``)."""
    from rcmdp_jax.study.runtime import program_name

    called = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    prog, runner = {"rcmdp-report": ("rcmdp-report", "rcmdp"), "report.py": ("report.py", "run.py")}.get(
        called, (REPORT_PROG, program_name()))  # fmt: skip
    print(f"{prog}: error: {message.replace('run.py --', f'{runner} --')}", file=sys.stderr)
REPORT_USAGE = "usage: rcmdp report RUN_DIR  (or: python experiments/report.py RUN_DIR)"


def report(argv=None) -> int:
    """``rcmdp report RUN_DIR``: the run folder's tables and plots rewritten (its imports
    here, so that ``rcmdp`` imports nothing before the CPU split). Ctrl-C (SIGTERM) at any
    moment is one line and exit 130 (143), the report's files all old or all new
    (``_rewrite`` writes them beside the folder's and renames them at the end)."""
    if argv is None:  # experiments/report.py
        _ENTRY.append(True)
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 1 or argv[0].startswith("-"):
        print(REPORT_USAGE, file=sys.stderr)
        return 0 if argv in (["-h"], ["--help"]) else 2
    with signals_exit(REPORT_PROG, "nothing was rewritten") as state:
        return _report(argv[0], state)


class SignalState:
    """What a signal handler of ``signals_exit`` says and undoes: ``said`` (what is kept),
    ``undo`` (functions called before the exit, in order)."""

    def __init__(self, said: str):
        self.said, self.undo = said, []


@contextlib.contextmanager
def signals_exit(prog: str, said: str):
    """Ctrl-C (SIGINT) and SIGTERM while the block runs: one line (``prog: interrupted:
    state.said``), ``state.undo`` run, exit 130 (143) at once (``os._exit``: no exception
    raised inside a library's callback, no half-written file kept by a ``finally``). The
    block gets the ``SignalState`` to change what is said and undone as it goes. In a
    console command's own process (``_ENTRY``) a signal after the block, while the process
    ends, is ignored: the work is done (not a traceback or a death by signal)."""
    import signal
    import threading

    state = SignalState(said)
    signals = (signal.SIGINT, signal.SIGTERM)

    def interrupted(signum, frame):
        signal.pthread_sigmask(signal.SIG_BLOCK, signals)  # a second Ctrl-C does not cut the undoing short
        print(f"\n{prog}: interrupted: {state.said}", file=sys.stderr, flush=True)
        for undo in state.undo:
            try:
                undo()
            except Exception:  # the exit comes whatever is left to undo
                pass
        os._exit(128 + signum)

    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, interrupted) for s in signals} if main_thread else {}
    try:
        yield state
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_IGN if _ENTRY else handler)


_ENTRY: list = []  # non-empty in a console command's own process (``main``, ``report_main`` from the command line)


@contextlib.contextmanager
def signals_held():
    """SIGINT and SIGTERM held back while the block runs (renames that must all happen), then
    delivered."""
    import signal

    held = (signal.SIGINT, signal.SIGTERM)
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def _report(run: str, state: SignalState) -> int:
    from rcmdp_jax.study.run_folder import RunFolder, holder, in_use
    from rcmdp_jax.study.run_plan import RunFolderError

    folder = RunFolder(Path(run))
    try:
        plan = folder.open("RUN_DIR")  # as --resume checks it: the results are this plan's
    except RunFolderError as err:
        report_error(str(err))
        return 2
    release = None
    try:  # not while a run writes the folder; one this user may not write: whether a run holds it
        if os.access(folder.root, os.W_OK | os.X_OK):
            release = folder.lock()
            state.undo.append(release)
        elif (pid := holder(folder.root)) is not None:
            raise RunFolderError(in_use(folder.root, pid))
    except RunFolderError as err:
        report_error(f"{err}; nothing was rewritten")
        return 2
    try:
        return _rewrite(folder, plan, state)
    finally:
        if release is not None:
            state.undo.remove(release)
            release()


STAGE = ".report-"  # the folder (in an environment's) where a report is written before it replaces the old one


def _stage(env_dir: Path) -> Path:
    """A fresh folder ``env_dir/.report-PID/<env_dir's name>`` holding links to the algorithms'
    folders: ``write_env_report`` writes a whole report there, read from the run's results
    (a stage left by a killed report goes first: the run folder's lock is held)."""
    import shutil

    for old in env_dir.glob(STAGE + "*"):
        shutil.rmtree(old, ignore_errors=True)
    stage = env_dir / f"{STAGE}{os.getpid()}" / env_dir.name
    stage.mkdir(parents=True)
    for d in env_dir.iterdir():
        if d.is_dir() and not d.is_symlink() and not d.name.startswith(STAGE):
            (stage / d.name).symlink_to(d.absolute(), target_is_directory=True)
    return stage


def _commit(stages: dict) -> None:
    """Every staged report file renamed over its old one (signals held: all or none), the stages removed."""
    import shutil

    with signals_held():
        for env_dir, stage in stages.items():
            for f in stage.iterdir():
                if f.is_file() and not f.is_symlink():
                    os.replace(f, env_dir / f.name)
        for stage in stages.values():
            shutil.rmtree(stage.parent, ignore_errors=True)


def _rewrite(folder, plan, state: SignalState | None = None) -> int:
    import shutil

    from rcmdp_jax import envs
    from rcmdp_jax.study.report import write_env_report
    from rcmdp_jax.study.run_folder import DamagedFile
    from rcmdp_jax.study.runtime import os_error

    state = state or SignalState("")
    envs_, algos = list(plan.envs), list(plan.algos)
    missing = [f"{e}/{a}" for e in envs_ for a in algos if not (folder.algo_dir(e, a) / "test_results.npz").exists()]
    if missing:
        report_error(f"no test results for {', '.join(missing)}; nothing was rewritten (run.py --resume or --eval-only "
                     "makes them)")  # fmt: skip
        return 2
    if locked := [str(folder.env_dir(e)) for e in envs_ if not os.access(folder.env_dir(e), os.W_OK | os.X_OK)]:
        report_error(f"{', '.join(locked)}: Permission denied (not writable by this user); nothing was rewritten")
        return 2
    stages: dict = {}

    def drop_stages():
        for stage in stages.values():
            shutil.rmtree(stage.parent, ignore_errors=True)

    state.undo.insert(0, drop_stages)
    tables = []
    try:
        for env_name in envs_:
            env, params = envs.make(env_name)
            env_dir = folder.env_dir(env_name)
            try:
                stages[env_dir] = _stage(env_dir)
                md = write_env_report(stages[env_dir], env_name, algos, env.lambda_max, params.xi_c, params.kappa,
                                      env=env, configs=plan.configs[env_name])  # fmt: skip
            except DamagedFile as err:  # named by the folder's own path, not the stage's link to it
                report_error(f"{str(err).replace(str(stages.get(env_dir, env_dir)), str(env_dir))}; nothing was "
                             "rewritten")  # fmt: skip
                return 2
            except OSError as err:  # a full disk: one line naming the file
                said = os_error(err, env_dir).replace(str(stages.get(env_dir, env_dir)), str(env_dir))
                report_error(f"{said}; nothing was rewritten")
                return 2
            tables.append(f"## {env_name}\n\n{md}")
        _commit(stages)
        state.said = "the report was rewritten"
    finally:
        drop_stages()
        state.undo.remove(drop_stages)
    for table in tables:
        print(table)
    return 0


# --- rcmdp eval RUN_DIR --algo NAME --seed S --kernel K ---
EVAL_PROG = "rcmdp eval"
# load_policy's and evaluate's argument names, as this command's options
EVAL_OPTIONS = {"algorithm": "--algo", "seed must": "--episode-seed must", "seed": "--seed", "kernel": "--kernel",
           "n_episodes": "--n-episodes", "env": "--env", "load_policy: ": ""}


def as_options(message: str) -> str:
    """A message of ``load_policy`` / ``evaluate`` in this command's terms (``--algo``)."""
    for name, option in EVAL_OPTIONS.items():
        if message.startswith(name):
            return option + message[len(name):]
    return message


class _EvalParser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(f"{message} (see --help)")


def eval_args(argv):
    p = _EvalParser(prog=EVAL_PROG, description="A trained policy of a run folder on one kernel named by its fields: the "
                "deterministic policy's discounted return and constraint values, mean and standard error over "
                "the episodes.")  # fmt: skip
    p.add_argument("run", metavar="RUN_DIR", help="a run folder (rcmdp --out)")
    p.add_argument("--algo", required=True, help="the algorithm, as run.json names it (e.g. MDPO-Lag)")
    p.add_argument("--seed", type=int, required=True, help="which trained seed: 0 .. seeds-1")
    p.add_argument("--kernel", default="nominal", metavar="FIELD=VALUE,...",
                   help="the kernel: each named field at a change in percent from its nominal value (masspole=+50%%) "
                        "or at an absolute value (m=11.0), the others nominal; the fields are the run's report's "
                        "(cartpole: xi[0] .. xi[3]); default nominal")  # fmt: skip
    p.add_argument("--n-episodes", type=int, default=None, help="episodes (default the run's test episodes per kernel)")
    p.add_argument("--episode-seed", type=int, default=None,
                   help="draw the episodes from PRNGKey(N) (default: the robustness test's key of this seed, so "
                        "a grid kernel gives test_results.npz's episodes)")  # fmt: skip
    p.add_argument("--env", default=None, help="the environment, when the run holds several")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the numbers to FILE (JSON)")
    return p.parse_args(argv)


def _evaluate(argv=None) -> int:
    """``rcmdp eval``'s work (``evaluate`` runs it with Ctrl-C said in one line)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = eval_args(argv)
        from rcmdp_jax.study.compiled import ticking
        from rcmdp_jax.study.policy import load_policy

        check_json_path(args.json)  # before anything is evaluated
        with ticking(f"{EVAL_PROG}:", f"reading {args.algo}'s checkpoint"):
            policy = load_policy(Path(args.run).absolute(), args.algo, args.seed, args.env)
        with ticking(f"{EVAL_PROG}:", "compiling and running the episodes"):
            result = policy.evaluate(args.kernel, args.n_episodes, args.episode_seed)
    except (ValueError, TypeError) as err:  # RunFolderError is a ValueError
        print(f"{EVAL_PROG}: error: {as_options(str(err))}", file=sys.stderr)
        return 2
    print("\n".join(result.lines()))
    if args.json is not None:
        from rcmdp_jax.study.run_folder import write_text
        from rcmdp_jax.study.runtime import os_error

        try:
            write_text(Path(args.json), json.dumps(result.to_dict(), indent=1, allow_nan=False))
        except OSError as err:
            print(f"{EVAL_PROG}: error: --json {os_error(err, args.json)}", file=sys.stderr)
            return 2
    return 0


def check_json_path(path: str | None) -> None:
    """``--json FILE``: a file that can be written (its folder exists and is writable; not a
    folder), else ``ValueError`` in one line."""
    if path is None:
        return
    if not path.strip():
        raise ValueError("--json is empty; name a file (or leave --json out)")
    try:
        target = Path(path)
        if target.is_dir():
            raise ValueError(f"--json {path} is a folder; name a file")
        parent = target.absolute().parent
        if not parent.is_dir():
            raise ValueError(f"--json {path}: its folder {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
            raise ValueError(f"--json {path}: Permission denied (not writable by this user)")
    except OSError as err:  # a name too long
        raise ValueError(f"--json {path}: {err.strerror or err}") from None

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
(143), and ``--resume`` continues from the next constraint, to the numbers of one call.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import sys
import time
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
        return _feasibility(argv)

    return _started(command, argv, "no feasibility.json was written")


def evaluate(argv=None) -> int:
    def command(argv):
        return _evaluate(argv)

    return _started(command, argv, "nothing was evaluated")


def main(argv=None) -> int:
    """``rcmdp report RUN_DIR``, ``rcmdp feasibility ...``, ``rcmdp eval ...`` or ``rcmdp [options]`` (training)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["report"]:
        return report(argv[1:])
    if argv[:1] == ["feasibility"]:
        return feasibility(argv[1:])
    if argv[:1] == ["eval"]:
        return evaluate(argv[1:])
    return train(argv)


def report_main() -> int:
    return report(sys.argv[1:])


# --- rcmdp report RUN_DIR ---
REPORT_PROG = "rcmdp report"  # as its error lines begin, like the runner's and feasibility's
REPORT_USAGE = "usage: rcmdp report RUN_DIR  (or: python experiments/report.py RUN_DIR)"


def report(argv=None) -> int:
    """``rcmdp report RUN_DIR``: the run folder's tables and plots rewritten (its imports
    here, so that ``rcmdp`` imports nothing before the CPU split)."""
    from rcmdp_jax.study.run_folder import RunFolder, holder, in_use
    from rcmdp_jax.study.run_plan import RunFolderError

    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 1 or argv[0].startswith("-"):
        print(REPORT_USAGE, file=sys.stderr)
        return 0 if argv in (["-h"], ["--help"]) else 2
    folder = RunFolder(Path(argv[0]))
    try:
        plan = folder.read_plan("RUN_DIR")
        folder.check_seeds(plan, "RUN_DIR")  # as --eval-only checks it: the results are this plan's
    except RunFolderError as err:
        print(f"{REPORT_PROG}: error: {err}", file=sys.stderr)
        return 2
    release = None
    try:  # not while a run writes the folder; one this user may not write: whether a run holds it
        if os.access(folder.root, os.W_OK | os.X_OK):
            release = folder.lock()
        elif (pid := holder(folder.root)) is not None:
            raise RunFolderError(in_use(folder.root, pid))
    except RunFolderError as err:
        print(f"{REPORT_PROG}: error: {err}; nothing was rewritten", file=sys.stderr)
        return 2
    try:
        return _rewrite(folder, plan)
    finally:
        if release is not None:
            release()


def _rewrite(folder, plan) -> int:
    from rcmdp_jax import envs
    from rcmdp_jax.study.report import write_env_report
    from rcmdp_jax.study.run_folder import DamagedFile
    from rcmdp_jax.study.runtime import os_error

    envs_, algos = list(plan.envs), list(plan.algos)
    missing = [f"{e}/{a}" for e in envs_ for a in algos if not (folder.algo_dir(e, a) / "test_results.npz").exists()]
    if missing:
        print(f"{REPORT_PROG}: error: no test results for {', '.join(missing)}; nothing was rewritten "
              "(run.py --resume or --eval-only makes them)", file=sys.stderr)  # fmt: skip
        return 2
    if locked := [str(folder.env_dir(e)) for e in envs_ if not os.access(folder.env_dir(e), os.W_OK | os.X_OK)]:
        print(f"{REPORT_PROG}: error: {', '.join(locked)}: Permission denied (not writable by this user); nothing was "
              "rewritten", file=sys.stderr)  # fmt: skip
        return 2
    for env_name in envs_:
        env, params = envs.make(env_name)
        try:
            md = write_env_report(folder.env_dir(env_name), env_name, algos, env.lambda_max, params.xi_c, params.kappa,
                                  env=env, configs=plan.configs[env_name])  # fmt: skip
        except DamagedFile as err:
            print(f"{REPORT_PROG}: error: {err}", file=sys.stderr)
            return 2
        except OSError as err:  # a full disk: one line naming the file
            print(f"{REPORT_PROG}: error: {os_error(err, folder.env_dir(env_name))}", file=sys.stderr)
            return 2
        print(f"## {env_name}\n\n{md}")
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

        if args.json is not None and Path(args.json).is_dir():
            raise ValueError(f"--json {args.json} is a folder; name a file")
        with ticking(f"{EVAL_PROG}:", f"reading {args.algo}'s checkpoint"):
            policy = load_policy(Path(args.run).absolute(), args.algo, args.seed, args.env)
        with ticking(f"{EVAL_PROG}:", "compiling and running the episodes"):
            result = policy.evaluate(args.kernel, args.n_episodes, args.episode_seed)
    except (ValueError, TypeError) as err:  # RunFolderError is a ValueError
        print(f"{EVAL_PROG}: error: {as_options(str(err))}", file=sys.stderr)
        return 2
    print("\n".join(result.lines()))
    if args.json is not None:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=1))
    return 0


# --- rcmdp feasibility --env NAME ---
FEASIBILITY_PROG = "rcmdp feasibility"
PARTIAL = "feasibility.partial.json"  # the rows found so far, and the inputs they were found with


class _FeasibilityParser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(f"{message} (see --help)")


def feasibility_args(argv):
    from rcmdp_jax.feasibility import LEARNERS

    p = _FeasibilityParser(prog=FEASIBILITY_PROG, description="Whether each constraint can be kept on the whole uncertainty box: "
                "cost-minimising policies trained robust to the box, the least C found on every test kernel.")  # fmt: skip
    p.add_argument("--env", default="cartpole", help="as rcmdp's --env (one environment)")
    p.add_argument("--uncertain", default=None, metavar="FIELD=WIDTH,...", help="gymnax:ID: the box, as rcmdp's")
    p.add_argument("--costs", default=None, metavar="NAME,...", help="gymnax:ID: the costs, as rcmdp's")
    p.add_argument("--noise", default=None, metavar="STD,...", help="gymnax:ID: the kernel's noise, as rcmdp's")
    p.add_argument("--seeds", type=int, default=3, help="cost-minimising policies per constraint (default 3)")
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    p.add_argument("--steps", type=int, default=None, help="policy steps per policy (default: 3 x the short budget)")
    p.add_argument("--learner", default="ppo", choices=LEARNERS, help="the learner (default ppo)")
    p.add_argument("--method", default=None, help="the robust method (default corners; worst-of-n above 8 parameters)")
    p.add_argument("--n-test", type=int, default=None, help="episodes per test kernel (default the environment's)")
    p.add_argument("--margin", type=float, default=0.0, help="keepable when the least C <= -MARGIN (default 0)")
    p.add_argument("--no-search", action="store_true", help="the grid only (no gradient search of the box)")
    p.add_argument("--controller", default=None, metavar="FILE.py:NAME|MODULE:NAME",
                   help="a function of the observation returning an action: a second witness")  # fmt: skip
    p.add_argument("--out", default=None, help="folder for feasibility.json/.png (default runs/feasibility-<time>)")
    p.add_argument("--resume", action="store_true", help="continue the interrupted check in --out (same options)")
    p.add_argument("--plugins", action="append", default=[], metavar="FILE.py|MODULE,...",
                   help="as rcmdp's: files or modules registering your robust methods or environments")  # fmt: skip
    return p.parse_args(argv)


def _env_name(args) -> str:
    from rcmdp_jax.study.plan import plan_envs

    if args.env == "all":
        raise ValueError("--env: name one environment (not all)")
    return plan_envs(args)[0]


def _inputs(name: str, cfg, args) -> dict:
    """What a ``--resume`` must match: the environment, the settings and the controller."""
    return json.loads(json.dumps({"env": name, "config": dataclasses.asdict(cfg), "controller": args.controller}))


def _prepare(args):
    """Every input checked: ``(env name, FeasibilityConfig, controller, output folder, the
    rows of an interrupted check to resume)``."""
    from rcmdp_jax.feasibility import FeasibilityConfig, check_sizes, has_costs
    from rcmdp_jax.plugin import check_seed
    from rcmdp_jax.study import user_code

    # the folder first: a user's module may change the working directory when it loads
    if args.out is not None and not args.out.strip():
        raise ValueError("--out is empty; name a folder (or leave --out out for runs/feasibility-<time>)")
    if args.resume and args.out is None:
        raise ValueError("--resume continues the check in --out; name it")
    out = Path(args.out) if args.out else Path("runs") / _dt.datetime.now().strftime("feasibility-%Y%m%d-%H%M%S")
    out = out.resolve()
    check_seed("--seed", args.seed)
    user_code.load_plugin_specs(args.plugins)  # before the environment and the method are read
    name = _env_name(args)
    if not has_costs(name):
        raise ValueError(f"--env {args.env}: it has no constraint costs (name them with --costs)")
    cfg = FeasibilityConfig(seeds=args.seeds, steps=args.steps, learner=args.learner, method=args.method,
                            n_test=args.n_test, margin=args.margin, seed=args.seed,
                            **({"search": None} if args.no_search else {})).validate()  # fmt: skip
    check_sizes(name, cfg)  # the runner's memory and int32 checks: nothing trains that cannot fit
    controller = user_code.load_object(args.controller) if args.controller else None
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    if (out / "feasibility.json").exists():
        raise ValueError(f"{out / 'feasibility.json'} already exists; choose another --out")
    return name, cfg, controller, out, _resumed(out, _inputs(name, cfg, args), args.resume)


def _resumed(out: Path, inputs: dict, resume: bool) -> list:
    """The rows an interrupted check in ``out`` found (``--resume``), checked against ``inputs``."""
    path = out / PARTIAL
    if not resume:
        if path.exists():
            raise ValueError(f"{out} holds an interrupted feasibility check ({PARTIAL}); continue it with --resume "
                             "or choose another --out")  # fmt: skip
        return []
    if not out.is_dir():
        raise ValueError(f"--resume: {out} holds no feasibility check; drop --resume to start one there")
    if not path.exists():
        return []  # interrupted before its first constraint: it starts again
    try:
        saved = json.loads(path.read_text())
        rows, before = saved["rows"], saved["inputs"]
        assert isinstance(rows, list) and isinstance(before, dict)
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        raise ValueError(f"--resume: {path} is not readable as an interrupted check; remove it to start "
                         "again") from None
    if differ := sorted({*before, *inputs} - {k for k in inputs if before.get(k) == inputs[k]}):
        raise ValueError(f"--resume: the options differ from the check in {out} ({', '.join(differ)}); use the same "
                         "options")  # fmt: skip
    return rows


def _open(out: Path):
    """Make ``out`` and take its lock (a run folder in use by a training run is refused)."""
    from rcmdp_jax.study.run_folder import take
    from rcmdp_jax.study.runtime import os_error

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out {out}: cannot create the folder ({os_error(err, out)})") from None
    return take(out)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _feasibility(argv=None) -> int:
    """``rcmdp feasibility``'s work (``feasibility`` runs it with Ctrl-C said in one line)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = feasibility_args(argv)
        name, cfg, controller, out, done = _prepare(args)
        release = _open(out)
    except (ValueError, TypeError) as err:
        print(f"{FEASIBILITY_PROG}: error: {err}", file=sys.stderr)
        return 2
    try:
        return _run(name, cfg, controller, out, done, _inputs(name, cfg, args), release)
    finally:
        release()


def _run(name, cfg, controller, out: Path, done: list, inputs: dict, release) -> int:
    from rcmdp_jax.feasibility import check_feasibility
    from rcmdp_jax.feasibility_report import lines, plot
    from rcmdp_jax.study.runtime import ctrl_c_exits, os_error

    t0 = time.perf_counter()
    say = lambda msg: print(f"[feasibility {time.perf_counter() - t0:7.1f}s] {msg}", flush=True)  # noqa: E731
    say(f"{name}: {cfg.seeds} seed(s) per constraint -> {out}" + (f" ({len(done)} found before)" if done else ""))
    rows = list(done)

    def keep(j: int, row: dict) -> None:  # each constraint's row kept as it is found: --resume starts after it
        rows.append(row)
        _write(out / PARTIAL, json.dumps({"inputs": inputs, "rows": rows}))
        say(f"constraint {j + 1} done")

    try:
        with ctrl_c_exits(out, release, saved=f"no feasibility.json; the constraints found are kept in {PARTIAL}"):
            report = check_feasibility(name, cfg, controller, progress=say, done=tuple(done), on_row=keep)
    except (ValueError, TypeError, FloatingPointError) as err:
        print(f"{FEASIBILITY_PROG}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"{FEASIBILITY_PROG}: error: {os_error(err, out)}; the constraints found are kept, continue with --resume --out "
              f"{out}", file=sys.stderr)  # fmt: skip
        return 2
    report["wall_s"] = round(time.perf_counter() - t0, 1)  # this call's (a resumed check: since the resume)
    try:
        _write(out / "feasibility.json", json.dumps(report, indent=1))
        (out / PARTIAL).unlink(missing_ok=True)
        plot(report, out / "feasibility.png")
    except ImportError:
        say("matplotlib is not installed: no feasibility.png (pip install matplotlib)")
    except OSError as err:
        print(f"{FEASIBILITY_PROG}: error: {os_error(err, out)}", file=sys.stderr)
        return 2
    print("\n".join(lines(report)))
    print(f"results in {out / 'feasibility.json'}")
    return 0

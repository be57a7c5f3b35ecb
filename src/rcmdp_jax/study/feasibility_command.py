"""``rcmdp feasibility``: the library's ``rcmdp_jax.feasibility`` with its inputs checked first,
each constraint's row kept in ``feasibility.partial.json`` (with a digest) for ``--resume``."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import json
import time
from pathlib import Path

from rcmdp_jax.atomic import write_text
from rcmdp_jax.study.commands import Parser, refuse, signals_exit
from rcmdp_jax.study.run_folder import take
from rcmdp_jax.study.run_plan import looked_up
from rcmdp_jax.study.runtime import os_error

PROG = "rcmdp feasibility"
PARTIAL = "feasibility.partial.json"  # the rows found so far, and the inputs they were found with


def feasibility_args(argv):
    from rcmdp_jax.feasibility import LEARNERS
    from rcmdp_jax.study.cli import environment_options

    p = Parser(prog=PROG, description="Whether each constraint can be kept on the whole uncertainty box.")
    environment_options(p)
    add = p.add_argument
    add("--seeds", type=int, default=3, help="cost-minimising policies per constraint (default 3)")
    add("--steps", type=int, help="policy steps per policy (default: 3 x the short budget)")
    add("--learner", default="ppo", choices=LEARNERS, help="the learner (default ppo)")
    add("--method", help="the robust method (default corners; worst-of-n above 8 parameters)")
    add("--n-test", type=int, help="episodes per test kernel (default the environment's)")
    add("--margin", type=float, default=0.0, help="keepable when the least C <= -MARGIN (default 0)")
    add("--no-search", action="store_true", help="the grid only (no gradient search of the box)")
    add("--controller", metavar="FILE.py:NAME|MODULE:NAME", help="a policy function: a second witness")
    add("--out", help="folder for feasibility.json/.png (default runs/feasibility-<time>)")
    add("--resume", action="store_true", help="continue the interrupted check in --out (same options)")
    return p.parse_args(argv)


def _prepare(args):
    """Every input checked: ``(env name, FeasibilityConfig, controller, out, inputs --resume compares, rows)``."""
    from rcmdp_jax import envs
    from rcmdp_jax.feasibility import FeasibilityConfig, check_controller, check_sizes, has_costs
    from rcmdp_jax.study import user_code
    from rcmdp_jax.study.plan import plan_envs

    # the folder first: a user's module may change the working directory when it loads
    if args.out is not None and not args.out.strip():
        raise ValueError("--out is empty; name a folder (or leave --out out for runs/feasibility-<time>)")
    if args.resume and args.out is None:
        raise ValueError("--resume continues the check in --out; name it")
    if args.controller is not None and not args.controller.strip():
        raise ValueError("--controller is empty; name FILE.py:NAME or MODULE:NAME (or leave --controller out)")
    out = Path(args.out) if args.out else Path("runs") / _dt.datetime.now().strftime("feasibility-%Y%m%d-%H%M%S")
    out = looked_up(out)[0]
    user_code.load_plugin_specs(args.plugins)  # before the environment and the method are read
    if args.env == "all":
        raise ValueError("--env: name one environment (not all)")
    name = plan_envs(args)[0]
    if not has_costs(name):
        raise ValueError(f"--env {args.env}: it has no constraint costs (name them with --costs)")
    cfg = FeasibilityConfig(seeds=args.seeds, steps=args.steps, learner=args.learner, method=args.method,
                            n_test=args.n_test, margin=args.margin, seed=args.seed,
                            **({"search": None} if args.no_search else {})).validate()  # fmt: skip
    check_sizes(name, cfg)  # the runner's memory and int32 checks: nothing trains that cannot fit
    controller = user_code.load_object(args.controller) if args.controller else None
    if controller is not None:  # its shape and its errors on an observation: before anything is made
        check_controller(controller, envs.make(name)[0])
    if looked_up(out)[1] and not out.is_dir():  # a user's module may have changed what the path names
        raise ValueError(f"--out {out} is a file, not a folder")
    if (out / "feasibility.json").exists():
        raise ValueError(f"{out / 'feasibility.json'} already exists; choose another --out")
    inputs = json.loads(json.dumps({**dataclasses.asdict(cfg), "env": name, "controller": args.controller}))
    return name, cfg, controller, out, inputs, _resumed(out, inputs, args.resume)


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
        print(f"{PROG}: note: --resume: {out} holds no constraint found before (interrupted before the "
              "first was done): it starts from the first", flush=True)  # fmt: skip
        return []
    try:
        saved = json.loads(path.read_text())
        rows, before = saved["rows"], saved["inputs"]
        assert isinstance(rows, list) and isinstance(before, dict)
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        raise ValueError(f"--resume: {path} is not readable as an interrupted check; remove it to start "
                         "again") from None  # fmt: skip
    if differ := sorted(k for k in {*before, *inputs} if before.get(k) != inputs.get(k)):
        named = {"env": "--env (or --uncertain, --costs, --noise)", "search": "--no-search"}
        options = dict.fromkeys(named.get(k, "--" + k.replace("_", "-")) for k in differ)
        raise ValueError(f"--resume: the options differ from the check in {out} ({', '.join(options)}); use the same "
                         "options")  # fmt: skip
    if saved.get("digest") != _digest(before, rows) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"--resume: {path} was edited or damaged (its rows do not match their digest); remove it to "
                         "start again")  # fmt: skip
    return rows


def _digest(inputs: dict, rows: list) -> str:
    """SHA-256 of what ``feasibility.partial.json`` holds: ``--resume`` refuses an edited file."""
    return hashlib.sha256(json.dumps({"inputs": inputs, "rows": rows}, sort_keys=True).encode()).hexdigest()


def run(argv: list) -> int:
    try:
        name, cfg, controller, out, inputs, done = _prepare(feasibility_args(argv))
        made = not out.exists()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"--out {out}: cannot create the folder ({os_error(err, out)})") from None
        release = take(out)  # a folder in use by a training run is refused
    except (ValueError, TypeError) as err:
        return refuse(PROG, str(err))
    try:
        return _run(name, cfg, controller, out, done, inputs, release)
    finally:
        release()
        with contextlib.suppress(OSError):  # (a folder removed or made unreadable meanwhile: left to its remover)
            if made and not any(out.iterdir()):  # refused while it started (done, it holds feasibility.json)
                out.rmdir()


def _run(name, cfg, controller, out: Path, done: list, inputs: dict, release) -> int:
    from rcmdp_jax.feasibility import check_feasibility
    from rcmdp_jax.feasibility_report import lines, plot

    t0 = time.perf_counter()
    say = lambda msg: print(f"[feasibility {time.perf_counter() - t0:7.1f}s] {msg}", flush=True)  # noqa: E731
    say(f"{name}: {cfg.seeds} seed(s) per constraint -> {out}" + (f" ({len(done)} found before)" if done else ""))
    rows, again = list(done), f"; continue with --resume --out {out}"
    kept = f"no feasibility.json; the constraints found are kept in {PARTIAL}{again}"

    def keep(j: int, row: dict) -> None:  # each constraint's row kept as it is found: --resume starts after it
        rows.append(json.loads(json.dumps(row)))  # as the file holds it: its digest is of that
        write_text(out / PARTIAL, json.dumps({"inputs": inputs, "rows": rows, "digest": _digest(inputs, rows)}))
        state.said = kept
        say(f"constraint {j + 1} done")

    try:
        with signals_exit(PROG, kept if done else f"no feasibility.json; no constraint was found yet{again}") as state:
            state.undo.append(release)
            report = check_feasibility(name, cfg, controller, progress=say, done=tuple(done), on_row=keep)
    except (ValueError, TypeError, FloatingPointError) as err:
        return refuse(PROG, str(err))
    except OSError as err:
        return refuse(PROG, f"{os_error(err, out)}; the constraints found are kept{again}")
    report["wall_s"] = round(time.perf_counter() - t0, 1)  # this call's (a resumed check: since the resume)
    try:
        write_text(out / "feasibility.json", json.dumps(report, indent=1))
        (out / PARTIAL).unlink(missing_ok=True)
        plot(report, out / "feasibility.png")
    except ImportError:
        say("matplotlib is not installed: no feasibility.png (pip install matplotlib)")
    except OSError as err:
        return refuse(PROG, os_error(err, out))
    print("\n".join(lines(report)))
    print(f"results in {out / 'feasibility.json'}")
    return 0

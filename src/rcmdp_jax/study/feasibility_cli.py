"""``rcmdp feasibility``: can the constraints be kept on the box at all (``rcmdp_jax.feasibility``)?

    rcmdp feasibility --env gymnax:Pendulum-v1 [--uncertain g=0.2,m=0.2 --costs speed] [--seeds 3]
                      [--steps N] [--controller FILE.py:NAME] [--out DIR]

Writes ``DIR/feasibility.json`` (per constraint: ``keepable``, ``least_worst_C``, the kernels
where it is not keepable, ...) and ``DIR/feasibility.png`` (the least C against the distortion
level); ``DIR`` may be a run folder (default ``runs/feasibility-<timestamp>``). Bad input is one
line and exit 2, before anything is trained or written; an existing ``feasibility.json`` is
never overwritten.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

PROG = "rcmdp feasibility"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(f"{message} (see --help)")


def parse_args(argv):
    from rcmdp_jax.feasibility import LEARNERS

    p = _Parser(prog=PROG, description="Whether each constraint can be kept on the whole uncertainty box: "
                "cost-minimising policies trained robust to the box, the least C found on every test kernel.")  # fmt: skip
    p.add_argument("--env", default="cartpole", help="as rcmdp's --env (one environment)")
    p.add_argument("--uncertain", default=None, metavar="FIELD=WIDTH,...", help="gymnax:ID: the box, as rcmdp's")
    p.add_argument("--costs", default=None, metavar="NAME,...", help="gymnax:ID: the costs, as rcmdp's")
    p.add_argument("--noise", default=None, metavar="STD,...", help="gymnax:ID: the kernel's noise, as rcmdp's")
    p.add_argument("--seeds", type=int, default=3, help="cost-minimising policies per constraint (default 3)")
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    p.add_argument("--steps", type=int, default=None, help="policy steps per policy (default: the short budget)")
    p.add_argument("--learner", default="ppo", choices=LEARNERS, help="the learner (default ppo)")
    p.add_argument("--method", default=None, help="the robust method (default corners; worst-of-n above 8 parameters)")
    p.add_argument("--n-test", type=int, default=None, help="episodes per test kernel (default the environment's)")
    p.add_argument("--margin", type=float, default=0.0, help="keepable when the least C <= -MARGIN (default 0)")
    p.add_argument("--no-search", action="store_true", help="the grid only (no gradient search of the box)")
    p.add_argument("--controller", default=None, metavar="FILE.py:NAME|MODULE:NAME",
                   help="a function of the observation returning an action: a second witness")  # fmt: skip
    p.add_argument("--out", default=None, help="folder for feasibility.json/.png (default runs/feasibility-<time>)")
    p.add_argument("--plugins", action="append", default=[], metavar="FILE.py|MODULE,...",
                   help="as rcmdp's: files or modules registering your robust methods or environments")  # fmt: skip
    return p.parse_args(argv)


def _env_name(args) -> str:
    from rcmdp_jax.study.plan import plan_envs

    if args.env == "all":
        raise ValueError("--env: name one environment (not all)")
    return plan_envs(args)[0]


def _prepare(args):
    """Every input checked: ``(env name, FeasibilityConfig, controller, output folder)``."""
    from rcmdp_jax.feasibility import FeasibilityConfig, has_costs
    from rcmdp_jax.study import plugin_files, user_env

    # the folder first: a user's module may change the working directory when it loads
    out = Path(args.out) if args.out else Path("runs") / _dt.datetime.now().strftime("feasibility-%Y%m%d-%H%M%S")
    out = out.resolve()
    plugin_files.load_specs(args.plugins)  # before the environment and the method are read
    name = _env_name(args)
    if not has_costs(name):
        raise ValueError(f"--env {args.env}: it has no constraint costs (name them with --costs)")
    cfg = FeasibilityConfig(seeds=args.seeds, steps=args.steps, learner=args.learner, method=args.method,
                            n_test=args.n_test, margin=args.margin, seed=args.seed,
                            **({"search": None} if args.no_search else {})).validate()  # fmt: skip
    controller = user_env.load_object(args.controller) if args.controller else None
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    if (out / "feasibility.json").exists():
        raise ValueError(f"{out / 'feasibility.json'} already exists; choose another --out")
    return name, cfg, controller, out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parse_args(argv)
        name, cfg, controller, out = _prepare(args)
    except (ValueError, TypeError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    from rcmdp_jax.feasibility import check_feasibility
    from rcmdp_jax.feasibility_report import lines, plot

    say = lambda msg: print(f"[feasibility] {msg}", flush=True)
    say(f"{name}: {cfg.seeds} seed(s) per constraint -> {out}")
    try:
        report = check_feasibility(name, cfg, controller, progress=say)
    except (ValueError, TypeError, FloatingPointError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "feasibility.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(out / "feasibility.json")
    try:
        plot(report, out / "feasibility.png")
    except ImportError:
        say("matplotlib is not installed: no feasibility.png (pip install matplotlib)")
    print("\n".join(lines(report)))
    print(f"results in {out / 'feasibility.json'}")
    return 0

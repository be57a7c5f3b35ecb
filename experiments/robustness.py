"""Which robust training method keeps the constraint on the worst kernel?

    python experiments/robustness.py --out DIR            # train, test, search, report (resumable)
    python experiments/robustness.py --out DIR --report   # the report from what DIR holds
    python experiments/robustness.py --out DIR --settings gymnax:CartPole-v1 \
        --methods none,worst-of-n,corners --learners PPO-Lag,MDPO-Lag --no-timing   # a cheaper run

For each setting (the study's CartPole and Inventory 1-D at a cost threshold of 0.13, gymnax
CartPole-v1, Pendulum-v1 and Acrobot-v1), at its converged budget (the preset's ``short``, or
``STEPS``: the budget rule's, docs/budgets.md), it trains PPO-Lag, MDPO-Lag and PPO-PID-Lag under
every robust method (``none``, ``ltma``, ``ltma-norm``, ``dr``, ``worst-of-n``, ``corners``,
``search``; the PID rule under the candidate methods only; one family program per learner) with
``experiments/run.py --worst-case costs``, then reads each seed's constraint value at the nominal
kernel, on its worst kernel of the test grid and on the worst kernel the gradient search finds,
and writes ``docs/robustness.md`` and ``docs/robustness.json``: the rows, each (setting, learner)
pair's calibration verdict, the goal written before the run, and the default's rule.
Each setting's feasibility check (``rcmdp feasibility``, into the setting's run folder) gives
the feasible bound, each row's share of the gap closed, and whether the setting passes
the calibration rule (``robustness_report.CALIBRATION``).
A second pass times each method trained alone (PPO-Lag, compile excluded; ``--no-timing`` skips it).

Two cores are kept busy: the settings run two at a time, longest first, and the timing pass's
programs are compiled in the same pool (into an XLA cache in ``--out``), so that the pass itself,
which needs the machine alone, only loads and times them. On 2 cores a setting of every method at
800,000 steps takes over an hour (Pendulum-v1: 81 min, shared); a cheaper run of fewer methods
and learners, under half an hour (CartPole-v1, three methods and two learners: 27 min).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from launch import command, describe  # experiments/launch.py
from robustness_report import poi_vs_none, seed_table  # noqa: F401  (the rows' reading, with the report)

ROOT = Path(__file__).resolve().parents[1]
# Inventory 1-D with a cost threshold: at the study's 0 no policy keeps its constraint (least worst C
# +2.15); at 0.13 the learners keep it at the nominal kernel (docs/robustness_findings.md)
SETTINGS = ("cartpole", "inventory@cost_threshold=0.13", "gymnax:CartPole-v1", "gymnax:Pendulum-v1", "gymnax:Acrobot-v1")
# the pool's order, longest first (walls measured on a 2-core CPU: Acrobot ~25 min, Pendulum and
# CartPole-v1 ~22, the study's CartPole ~12, the timing programs' compile ~8 each, Inventory ~5)
LONGEST_FIRST = ("gymnax:Acrobot-v1", "gymnax:Pendulum-v1", "gymnax:CartPole-v1", "cartpole")
OUTSIDE = SETTINGS[2:]  # the environments outside the study: where the default is chosen
LEARNERS = ("PPO-Lag", "MDPO-Lag", "PPO-PID-Lag")
RANKED = LEARNERS[:2]  # the learners the default's rule and the calibrated summary read (fixed before the results)
METHODS = ("none", "ltma", "ltma-norm", "dr", "worst-of-n", "corners", "search")
# the PID rule as lanes under the candidate methods only (its own worst-kernel question, at a third of the cost)
METHODS_OF = {"PPO-PID-Lag": ("none", "worst-of-n", "corners", "search")}


def methods_of(learner: str) -> tuple[str, ...]:
    return METHODS_OF.get(learner, METHODS)
# settings whose benchmark budget is not their preset's `short` (the study's domains keep the study's
# budgets there): the budget the written rule picked (experiments/budget_rule.py, docs/budgets.md)
STEPS: dict[str, int] = {"inventory@cost_threshold=0.13": 400_000}
STEPS_WHY: dict[str, str] = {"inventory@cost_threshold=0.13": "the budget rule's, docs/budgets.md; the study's 16,000 "
                             "stays the study's"}
# settings that set a plug-in's option (``--set``): Inventory is a study domain, whose ltma reads C^ where
# the study does; at the threshold 0.13 (not the study's) the benchmark judges the product's reading
SETS: dict[str, tuple[str, ...]] = {"inventory@cost_threshold=0.13": ("ltma_dual_reading=guarded",)}
TIMED = ("gymnax:CartPole-v1", "gymnax:Pendulum-v1")  # the timing pass: PPO-Lag under each method alone


def default_method(env: str) -> str:
    """The robust method ``ALGO-Robust-Lag`` names on ``env`` (its preset's ``adversary``)."""
    from rcmdp_jax import preset

    return preset(env, "PPO-Robust-Lag").adversary


def algo_name(learner: str, method: str) -> str:
    return learner if method == "none" else f"{learner}+{method}"


def slug(env: str) -> str:
    return env.replace("gymnax:", "gymnax-")


def setting_command(out: Path, env: str, seeds: int, jobs: int, only=None, learners=LEARNERS, part=None) -> list[str]:
    """The runner's command for one setting (``--resume`` when its folder is there); with
    ``jobs > 1`` on one XLA device, so that the settings share the cores instead of each
    sharding over all of them. ``part``: the run folder of a later part (``run_dirs``)."""
    algos = ",".join(algo_name(learner, m) for learner in learners for m in methods_of(learner)
                     if only is None or m in only)  # fmt: skip
    args = ["--env", env, "--algos", algos, "--seeds", str(seeds), "--worst-case", "costs"]
    args += ["--steps", str(STEPS[env])] if env in STEPS else ["--budget", "short"]
    args += [a for kv in SETS.get(env, ()) for a in ("--set", kv)]
    return command(run_dir(out, env, part), args + (["--devices", "1"] if jobs > 1 else []))


def run_dir(out: Path, env: str, part: str | None = None) -> Path:
    """A setting's run folder: ``runs/<setting>``, or ``runs/<setting>.<part>`` for a part."""
    return out / "runs" / (slug(env) + ("" if part is None else f".{part}"))


def run_dirs(out: Path, env: str) -> list[Path]:
    """A setting's run folders, the first run then its parts by name: a part adds methods to a
    benchmark (or trains some anew, after a method changed) without training the rest again;
    its rows replace those of the same algorithm in the folders before it."""
    parts = sorted(p for p in (out / "runs").glob(slug(env) + ".*") if (p / "run.json").exists())
    first = run_dir(out, env)
    return ([first] if (first / "run.json").exists() else []) + parts


def pool_order(names: list[str]) -> list[str]:
    """Longest first (``LONGEST_FIRST``, then the timing programs' compiles, then the rest)."""

    def rank(name):
        if name in LONGEST_FIRST:
            return LONGEST_FIRST.index(name)
        return len(LONGEST_FIRST) + (0 if name.startswith(COMPILE) else 1)

    return sorted(names, key=rank)


COMPILE = "compile:"  # a pool job that compiles one environment's timing programs into the cache


def timing_programs(env: str, seeds: int, out: Path, threads: int) -> tuple[dict, object]:
    """PPO-Lag under each method alone on ``env``, compiled (through the XLA cache in
    ``out``: the pool's compile job fills it, the timing pass reads it), and their keys."""
    import jax

    from rcmdp_jax import make_train, preset

    jax.config.update("jax_compilation_cache_dir", str(out / "xla_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)

    def compile_one(method):
        return jax.jit(jax.vmap(make_train(preset(env, algo_name("PPO-Lag", method))))).lower(keys).compile()

    with ThreadPoolExecutor(threads) as pool:
        return dict(zip(METHODS, pool.map(compile_one, METHODS))), keys


def time_methods(env: str, seeds: int, out: Path) -> dict:
    """PPO-Lag under each method alone on ``env``: seconds to train ``seeds`` seeds (the
    compiled program, compile excluded; the best of two calls)."""
    import jax

    programs, keys = timing_programs(env, seeds, out, threads=2)
    jax.block_until_ready(programs[METHODS[0]](keys))  # a first call pays for the process's warm-up
    out = {}
    for method in METHODS:  # one at a time, with nothing else running
        compiled = programs[method]
        best = np.inf
        for _ in range(2):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(keys))
            best = min(best, time.perf_counter() - t0)
        out[method] = best
        print(f"  {env} PPO-Lag+{method}: {best:.2f} s", flush=True)
    return out


def code_version() -> str:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()  # fmt: skip
    return rev.strip() + ("+uncommitted" if dirty else "")


def machine() -> str:
    """The machine in words, ``experiments/launch.py``'s: ``2-core <the CPU's model name>``."""
    from launch import machine as measured_on

    return describe(measured_on())


# ------------------------------------------------------------------ the evidence
FEASIBILITY = "feasibility:"  # the pool's names of the feasibility jobs


def feasibility_command(out: Path, env: str) -> list[str]:
    """``rcmdp feasibility`` for one setting (its defaults), into ``out/feasibility/<setting>``."""
    where = out / "feasibility" / slug(env)
    cmd = [sys.executable, "-m", "rcmdp_jax", "feasibility", "--env", env, "--out", str(where)]
    return cmd + (["--resume"] if where.is_dir() else [])  # an interrupted check continues


def feasible_bound(out: Path, env: str) -> dict | None:
    """The setting's feasibility verdict: ``{"least_worst_C", "keepable"}`` (the worst of its
    constraints), or None before its check ran."""
    path = out / "feasibility" / slug(env) / "feasibility.json"
    if not path.exists():
        return None
    rows = json.loads(path.read_text())["constraints"]
    return {"least_worst_C": max(r["least_worst_C"] for r in rows), "keepable": all(r["keepable"] for r in rows)}


def evidence(out: Path) -> dict:
    table = {}
    for env in SETTINGS:
        rows, parts, steps = {}, {}, set()
        for folder in run_dirs(out, env):
            ran = json.loads((folder / "run.json").read_text())["configs"][env]  # a --methods run holds fewer
            steps |= {c["total_timesteps"] for c in ran.values()}
            for a in (algo_name(lr, m) for lr in LEARNERS for m in methods_of(lr)):
                if a in ran:
                    rows[a] = seed_table(folder, env, a)
                    parts[a] = folder.name
        if not rows:
            continue
        if len(steps) > 1:
            raise SystemExit(f"{env}: its run folders trained different budgets {sorted(steps)}: one setting, one budget")
        poi = {lr: poi_vs_none(rows, lr, methods_of(lr), algo_name) for lr in LEARNERS if algo_name(lr, "none") in rows}
        later = {a: f for a, f in parts.items() if f != slug(env)}  # rows from a part
        table[env] = {"rows": rows, "poi": poi, "feasible": feasible_bound(out, env), "default": default_method(env),
                      "steps": steps.pop(), "parts": later, "sets": SETS.get(env, ()),
                      "budget_why": STEPS_WHY.get(env, "the preset's `short`: docs/budgets.md")}
    return table


HELDOUT = ("<!-- held-out: experiments/heldout.py --report writes this section -->", "<!-- /held-out -->")


def kept_block(path: Path) -> str:
    """The held-out benchmark's section of ``path`` (``HELDOUT``'s markers), kept when the rest is
    written anew; "" when there is none."""
    text = path.read_text() if path.exists() else ""
    start, end = text.find(HELDOUT[0]), text.find(HELDOUT[1])
    return "" if start < 0 or end < start else "\n" + text[start : end + len(HELDOUT[1])] + "\n"


def write_report(out: Path, table: dict, meta: dict) -> None:
    from robustness_report import render  # experiments/robustness_report.py

    md, js = render(table, meta, LEARNERS, METHODS, algo_name, OUTSIDE, methods_of=methods_of, ranked=RANKED)
    (ROOT / "docs" / "robustness.md").write_text(md + kept_block(ROOT / "docs" / "robustness.md"))
    (ROOT / "docs" / "robustness.json").write_text(json.dumps(js, indent=1))
    print(f"wrote docs/robustness.md and docs/robustness.json from {out}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the benchmark's folder (resumable)")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated subset of " + ",".join(SETTINGS))
    p.add_argument("--jobs", type=int, default=2, help="settings trained at once (default 2: one per core)")
    p.add_argument("--report", action="store_true", help="only write the report from what --out holds")
    p.add_argument("--methods", default=None, help="comma-separated subset of the methods to train (with none; "
                   "default all): a cheaper run, its report holding those rows")
    p.add_argument("--learners", default=None, help="comma-separated subset of " + ",".join(LEARNERS))
    p.add_argument("--part", default=None, help="train into the settings' run folders of this part "
                   "(runs/<setting>.<part>): more methods, or some anew, their rows replacing the earlier ones")
    p.add_argument("--no-timing", action="store_true", help="skip the timing pass (another run of the benchmark "
                   "times the methods)")
    p.add_argument("--time-only", default=None, help=argparse.SUPPRESS)  # one timing pass (a subprocess)
    p.add_argument("--compile-only", default=None, help=argparse.SUPPRESS)  # a pool job: fill the XLA cache
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.compile_only:
        timing_programs(args.compile_only, args.seeds, out, threads=1)
        return
    if args.time_only:
        timing = time_methods(args.time_only, args.seeds, out)
        (out / f"timing-{slug(args.time_only)}.json").write_text(json.dumps(timing))
        return
    meta_path = out / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"wall_s": {}, "timing": {}}
    if not args.report:
        meta.setdefault("code_version", code_version())
        meta.setdefault("machine", machine())
    log = lambda s: print(f"[robustness] {s}", flush=True)  # noqa: E731
    if not args.report:
        for env in args.settings.split(","):
            if env not in SETTINGS:
                raise SystemExit(f"--settings: {env!r} is not one of {', '.join(SETTINGS)}")
        if args.jobs < 1:
            raise SystemExit(f"--jobs: {args.jobs} must be at least 1")
        me = [sys.executable, __file__, "--out", str(out), "--seeds", str(args.seeds)]
        only = None if args.methods is None else tuple(args.methods.split(","))
        if only is not None and (("none" not in only and args.part is None) or not set(only) <= set(METHODS)):
            raise SystemExit(f"--methods: {args.methods!r} must be a subset of {','.join(METHODS)}"
                             + ("" if args.part else " holding none (a --part need not)"))
        if args.part is not None and (not args.part or not args.part.replace("-", "").isalnum()):
            raise SystemExit(f"--part: {args.part!r} must be letters, digits and dashes")
        learners = LEARNERS if args.learners is None else tuple(args.learners.split(","))
        if not set(learners) <= set(LEARNERS):
            raise SystemExit(f"--learners: {args.learners!r} must be a subset of {','.join(LEARNERS)}")
        key = lambda env: env if args.part is None else f"{env}.{args.part}"  # noqa: E731  (meta's wall_s)
        jobs = {key(env): setting_command(out, env, args.seeds, args.jobs, only, learners, args.part)
                for env in args.settings.split(",") if key(env) not in meta["wall_s"]}  # fmt: skip
        timed = () if args.no_timing or args.part else TIMED
        jobs.update({COMPILE + env: me + ["--compile-only", env] for env in timed if env not in meta["timing"]})
        jobs.update({FEASIBILITY + env: feasibility_command(out, env) for env in args.settings.split(",")
                     if feasible_bound(out, env) is None})  # fmt: skip

        def done(name, seconds):
            if name.startswith(COMPILE):
                meta.setdefault("timing_compile_s", {})[name[len(COMPILE) :]] = seconds
            elif name.startswith(FEASIBILITY):
                meta.setdefault("feasibility_wall_s", {})[name[len(FEASIBILITY) :]] = seconds
            else:
                meta.setdefault("code_versions", {})[name] = code_version()
                meta["wall_s"][name] = seconds
            meta_path.write_text(json.dumps(meta, indent=1))

        if jobs:
            meta["jobs"] = args.jobs
            order = pool_order(list(jobs))
            from job_pool import run_pool  # experiments/job_pool.py

            meta["settings_wall_s"] = meta.get("settings_wall_s", 0.0) + run_pool(
                [(name, jobs[name]) for name in order], args.jobs, log, done
            )
            meta_path.write_text(json.dumps(meta, indent=1))
        for env in timed:
            if env in meta["timing"]:
                continue
            t0 = time.time()
            subprocess.run(me + ["--time-only", env], check=True)
            meta["timing"][env] = json.loads((out / f"timing-{slug(env)}.json").read_text())
            meta["timing_wall_s"] = meta.get("timing_wall_s", 0.0) + time.time() - t0
            meta_path.write_text(json.dumps(meta, indent=1))
    meta["seeds"] = args.seeds
    write_report(out, evidence(out), meta)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()

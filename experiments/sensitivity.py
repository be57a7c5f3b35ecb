"""What the study leaves open: how the dual phase reads C^, lambda_init, the adversary's
step. Trains every affected algorithm under each choice on the settings where the plan
(``SETTINGS``, sized to run in < 45 min on a 2-core CPU) runs it (10 seeds, the runner's sweep),
splices each choice's rows into the start_value runs' table, judges every claim of
``experiments/claims.py`` per choice, and writes ``docs/sensitivity.md`` with a plot of
the lambda and C^ trajectories on CartPole at 200k steps.

    python experiments/sensitivity.py --out ~/rcmdp-sens            # the runs (resumable), then the report
    python experiments/sensitivity.py --out ~/rcmdp-sens --report   # only rewrite the report

Every run is one ``run.py`` run in ``OUT/<choice>/<setting>/``; lambda_init = 0 and
eta_xi x 0.1 are lanes of the start_value runs' programs (``ALGO@lam_init=0``: the same compiled
family, vmapped over the hyperparameters). The runs share one XLA compilation cache,
``OUT/xla``, empty when the first run starts: its stated wall time is a cold start's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from claims import CLAIMS, CONSTRAINED, UNCONSTRAINED, judge  # noqa: E402
from launch import explain, finished, launch  # noqa: E402

ROBUST = ["RMCPMD", "PPO-Robust", "MDPO-Robust", "RMCPMD-Lag", "PPO-Robust-Lag", "MDPO-Robust-Lag",
          "MDPO-Robust-Augmented-Lag"]  # fmt: skip
ALL = UNCONSTRAINED[:3] + UNCONSTRAINED[3:] + CONSTRAINED
MCPMD_LAG = ["MCPMD-Lag", "RMCPMD-Lag"]
# the readings of C^ (rcmdp_jax.dual.DUAL_ESTIMATORS) and the dropout switch: (--set values, algorithms)
READINGS = {
    # the start state's value: the runs hold every algorithm and the hyperparameter lanes
    "start_value": (["dual_estimator=start_value"], None),
    "step_cost": (["dual_estimator=step_cost"], CONSTRAINED),
    "cost_to_go": (["dual_estimator=cost_to_go"], CONSTRAINED),
    "gae": (["dual_estimator=gae"], [a for a in CONSTRAINED if a not in MCPMD_LAG]),  # MCPMD trains no critic
    "start_value+dropout": (["dual_estimator=start_value", "dual_dropout=True"], CONSTRAINED),
}
CP, IM, IM3 = ("cartpole", "short"), ("inventory", "short"), ("inventory3d", "short")
CP_LONG, IM_LONG = ("cartpole", "long"), ("inventory", "long")
SHORT = [CP, IM, IM3]
# which settings each choice runs: the whole run must stay under 45 min on a 2-core CPU, so
# each reading runs where it is evidence (the CartPole-200k collapse, Inventory 1-D at 16k,
# where a reading may leave the constraint loose, and the defaults' candidates everywhere)
SETTINGS = {
    "start_value": [CP, IM, IM3, CP_LONG, IM_LONG],
    "cost_to_go": [CP, IM, IM3, CP_LONG, IM_LONG],
    "gae": [CP, IM, IM3],
    "step_cost": [IM],
    "start_value+dropout": [CP_LONG],
}
# where the hyperparameter lanes run (in the start_value runs): lambda_init = 0 where the short
# budget may be too short for lambda to grow, eta_xi x 0.1 where the adversary's step is the question
LAM_LANES_AT = {"cartpole-short", "inventory-short", "inventory3d-short"}
ETA_LANES_AT = {"cartpole-short", "inventory-short"}
COLUMNS = ["start_value", "lam_init=0", "eta_xi x 0.1", "step_cost", "cost_to_go", "gae", "start_value+dropout"]
METRICS = ("Return", "R_pen±", "R_pen")


def eta_xi(env: str) -> float:
    from rcmdp_jax import preset

    return float(preset(env, "MDPO-Robust").hparams.eta_xi) * 0.1


def algos_of(reading: str, env: str, budget: str) -> list[str]:
    algos = READINGS[reading][1]
    if algos is not None:
        return list(algos)
    out = list(ALL)
    if f"{env}-{budget}" in LAM_LANES_AT:
        out += [f"{a}@lam_init=0" for a in CONSTRAINED]
    if f"{env}-{budget}" in ETA_LANES_AT:
        out += [f"{a}@eta_xi={eta_xi(env):g}" for a in ROBUST]
    return out


def runs() -> list[tuple[str, str, str]]:
    """``(reading, env, budget)`` in the order they run: short budgets first."""
    out = [(r, e, b) for e, b in SHORT for r in READINGS if (e, b) in SETTINGS[r]]
    return out + [(r, e, b) for e, b in [("cartpole", "long"), ("inventory", "long")] for r in READINGS
                  if (e, b) in SETTINGS[r]]  # fmt: skip


def run_all(out: Path, seeds: int) -> int:
    timings_path = out / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    todo = runs()
    t0 = time.perf_counter()
    for i, (reading, env, budget) in enumerate(todo):
        name = f"{reading}/{env}-{budget}"
        run_dir = out / reading / f"{env}-{budget}"
        if (run_dir / env / "summary.json").exists():
            print(f"[{i + 1}/{len(todo)}] {name}: finished before, skipped", flush=True)
            continue
        sets = [x for s in READINGS[reading][0] for x in ("--set", s)]
        args = ["--env", env, "--budget", budget, "--seeds", str(seeds), "--algos", ",".join(algos_of(reading, env, budget)),
                *sets, "--compile-cache", str(out / "xla")]  # fmt: skip
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        print(f"[{i + 1}/{len(todo)}] {name}: starting ({(time.perf_counter() - t0) / 60:.1f} min so far)", flush=True)
        start = time.perf_counter()
        log = out / f"{reading}-{env}-{budget}.log"
        status = launch(run_dir, args, log=log, check=False)
        if not finished(status):  # the one exit-code rule (experiments/launch.py)
            print(f"{name}: run.py exited {status} ({explain(status)}); see {log}", flush=True)
            return status
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
        timings_path.write_text(json.dumps(timings, indent=2))
        print(f"[{i + 1}/{len(todo)}] {name}: done in {timings[name] / 60:.1f} min", flush=True)
    return 0


# ------------------------------------------------------------------ the report
def _summary(out: Path, reading: str, env: str, budget: str) -> dict | None:
    """A planned run's summary (None when it is not in the plan or not finished)."""
    path = out / reading / f"{env}-{budget}" / env / "summary.json"
    return json.loads(path.read_text()) if (env, budget) in SETTINGS[reading] and path.exists() else None


def _marked(table: dict) -> dict:
    """Re-mark a spliced table: best mean or within one pooled SE of it (docs/method.md §4)."""
    from rcmdp_jax import stats

    for m in METRICS:
        s = {a: stats.Summary(mean=r[m]["mean"], se=r[m]["se"], min=r[m]["min"]) for a, r in table.items()}
        for a, ok in stats.within_one_pooled_se(s).items():
            table[a][m] = {**table[a][m], "marked": ok}
    return table


def column(out: Path, col: str, env: str, budget: str) -> tuple[dict | None, str]:
    """The start_value runs' 14 rows with the rows ``col`` changes replaced: ``(summary, where from)``."""
    base = _summary(out, "start_value", env, budget)
    if base is None:
        return None, "not run"
    table = {a: dict(base[a]) for a in ALL}
    if col == "start_value":
        return table, "run"
    if col in ("lam_init=0", "eta_xi x 0.1"):
        if f"{env}-{budget}" not in (LAM_LANES_AT if col == "lam_init=0" else ETA_LANES_AT):
            return None, "not run"
        lanes = ({a: f"{a}@lam_init=0" for a in CONSTRAINED} if col == "lam_init=0"
                 else {a: f"{a}@eta_xi={eta_xi(env):g}" for a in ROBUST})  # fmt: skip
        table.update({a: base[lane] for a, lane in lanes.items()})
        return _marked(table), "run"
    other = _summary(out, col, env, budget)
    if other is None:
        return None, "not run"
    table.update({a: other[a] for a in READINGS[col][1]})
    return _marked(table), "run"


def trajectories(out: Path, readings: list[str], algos: list[str], path: Path) -> None:
    """lambda and C^ (seed mean) per iteration on CartPole 200k, one line per reading."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(algos), figsize=(5 * len(algos), 6), sharex=True, squeeze=False)
    for j, algo in enumerate(algos):
        for reading in readings:
            f = out / reading / "cartpole-long" / "cartpole" / algo / "train_metrics.npz"
            if CP_LONG not in SETTINGS[reading] or not f.exists():  # planned runs only
                continue
            d = np.load(f)
            axes[0, j].plot(d["lam"][..., 0].mean(0), label=reading)
            axes[1, j].plot(d["c_hat"][..., 0].mean(0), label=reading)
        axes[0, j].set_title(f"{algo}, CartPole 200k")
        axes[0, j].set_ylabel("lambda (seed mean)")
        axes[1, j].set_ylabel("C^ of the dual phase (seed mean)")
        axes[1, j].axhline(0.0, color="k", lw=0.5)
        axes[1, j].set_xlabel("iteration")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(out: Path, docs: Path) -> Path:
    settings = [("cartpole", "short"), ("cartpole", "long"), ("inventory", "short"), ("inventory", "long"),
                ("inventory3d", "short"), ("inventory3d", "long")]  # fmt: skip
    tables = {(c, e, b): column(out, c, e, b)[0] for c in COLUMNS for e, b in settings}
    lines = ["| setting | sub-claim | " + " | ".join(COLUMNS) + " |", "|---|---|" + "---|" * len(COLUMNS)]
    held, judged, base_held = dict.fromkeys(COLUMNS, 0), dict.fromkeys(COLUMNS, 0), dict.fromkeys(COLUMNS, 0)
    for setting, _, parts in CLAIMS:
        if setting.startswith("schedules"):
            continue
        env, budget = setting.split("-")
        for k, (part, _) in enumerate(parts):
            cells = []
            base = tables[("start_value", env, budget)]
            base_ok = base is not None and judge(base, [parts[k]])[0] == "holds"
            for c in COLUMNS:
                s = tables[(c, env, budget)]
                if s is None:
                    cells.append("–")
                    continue
                ok = judge(s, [parts[k]])[0] == "holds"
                held[c] += ok
                judged[c] += 1
                base_held[c] += base_ok
                cells.append("✓" if ok else "✗")
            lines.append(f"| {setting} | {part} | " + " | ".join(cells) + " |")
    lines.append("| | **sub-claims that hold / judged** | " + " | ".join(f"{held[c]} / {judged[c]}" for c in COLUMNS)
                 + " |")  # fmt: skip
    lines.append("| | start_value on the same sub-claims | " + " | ".join(str(base_held[c]) for c in COLUMNS) + " |")
    numbers = []
    for env, budget in settings:
        if tables[("start_value", env, budget)] is None:
            continue
        numbers += [f"\n#### {env}, {budget} budget: mean R_pen± / mean R_pen (min R_pen)\n",
                    "| algorithm | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]  # fmt: skip
        for a in CONSTRAINED + ROBUST[:3]:
            cells = []
            for c in COLUMNS:
                s = tables[(c, env, budget)]
                cells.append("–" if s is None else
                             f"{s[a]['R_pen±']['mean']:.1f} / {s[a]['R_pen']['mean']:.1f} ({s[a]['R_pen']['min']:.1f})")  # fmt: skip
            numbers.append(f"| {a} | " + " | ".join(cells) + " |")
    fig_dir = docs / "sensitivity"
    fig_dir.mkdir(parents=True, exist_ok=True)
    trajectories(out, ["start_value", "step_cost", "cost_to_go", "gae", "start_value+dropout"],
                 ["MDPO-Lag", "MDPO-Robust-Lag", "PPO-Lag"], fig_dir / "cartpole_long_dual.png")  # fmt: skip
    timings = json.loads((out / "timings.json").read_text()) if (out / "timings.json").exists() else {}
    timings = {n: timings[n] for n in (f"{r}/{e}-{b}" for r, e, b in runs()) if n in timings}  # the plan's runs
    verdicts = {c: {f"{e}-{b}": tables[(c, e, b)] for e, b in settings if tables[(c, e, b)] is not None}
                for c in COLUMNS}  # fmt: skip
    (fig_dir / "verdicts.json").write_text(json.dumps({"held": held, "judged": judged, "tables": verdicts}, indent=1))
    findings = docs / "sensitivity_findings.md"
    text = [
        "# What the study leaves open: a sensitivity report\n",
        "Generated by `python experiments/sensitivity.py` (tables, verdicts and the plot come from its runs; the "
        "findings in the next section are written by hand from the same runs). 10 seeds per algorithm, the "
        "runner's robustness sweep; each column is the start_value runs' table (all 14 algorithms) with the rows the choice changes replaced by "
        "their runs under that choice, re-marked ([method.md §4](method.md)), and judged by `experiments/claims.py`.\n",
        f"Wall time of the runs: {sum(timings.values()) / 60:.1f} min on the machine named in the findings.\n",
    ]
    if findings.exists():
        text.append(findings.read_text())
    text += ["## Every sub-claim under every choice\n", "\n".join(lines), "\n## The numbers\n", "\n".join(numbers),
             "\n## The dual phase on CartPole at 200k steps\n",
             "![lambda and C^ per iteration](sensitivity/cartpole_long_dual.png)\n",
             "## Wall time of each run\n", "| run | min |", "|---|---|"]  # fmt: skip
    text += [f"| {k} | {v / 60:.1f} |" for k, v in timings.items()]
    path = docs / "sensitivity.md"
    path.write_text("\n".join(text) + "\n")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder of the runs (resumable)")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--report", action="store_true", help="only (re)write docs/sensitivity.md from --out")
    p.add_argument("--docs", default=str(ROOT / "docs"))
    args = p.parse_args(argv)
    out = Path(args.out).expanduser()
    if args.seeds < 1:
        print("sensitivity.py: error: --seeds must be a positive integer", file=sys.stderr)
        return 2
    if not args.report:
        out.mkdir(parents=True, exist_ok=True)
        rc = run_all(out, args.seeds)
        if rc:
            return rc
    print(f"wrote {write_report(out, Path(args.docs))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

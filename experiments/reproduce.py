"""Reproduce the study: 3 domains x 2 budgets x 14 algorithms x 10 seeds, each with its
robustness sweep, plus the schedules study on one domain; then write
``docs/reproduction.md`` with the tables, plots, wall times and a verdict per claim.

    python experiments/reproduce.py --out ~/rcmdp-repro            # everything (long)
    python experiments/reproduce.py --out ~/rcmdp-repro --report   # only rewrite the report

Every setting is one ``run.py`` run in ``OUT/<setting>/``; an interrupted reproduction
resumes where it stopped (finished settings are skipped, a partial one is resumed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import launch  # noqa: E402  (experiments/launch.py)
from claims import CLAIMS, verdict_table  # noqa: E402

SETTINGS = (
    ("cartpole", "short"), ("inventory", "short"), ("inventory3d", "short"),
    ("cartpole", "long"), ("inventory", "long"), ("inventory3d", "long"),
)  # fmt: skip
SCHEDULES = ("inventory", "short")  # the schedules study's domain and budget
# rough relative cost of each setting (minutes on a 2-core CPU), for the ETA before any finished
WEIGHT = {"cartpole-short": 2, "inventory-short": 2, "inventory3d-short": 6,
          "cartpole-long": 12, "inventory-long": 20, "inventory3d-long": 35, "schedules-inventory-short": 3}  # fmt: skip
TITLES = {"cartpole": "CartPole", "inventory": "Inventory 1-D", "inventory3d": "Inventory 3-D"}


def setting_name(env: str, budget: str, schedules: bool = False) -> str:
    return f"{'schedules-' if schedules else ''}{env}-{budget}"


def jobs(seeds: int, schedules: bool) -> list[tuple[str, list[str]]]:
    """The settings in the order they run: the short budgets, the schedules study, the long budgets."""
    out = [(setting_name(e, b), ["--env", e, "--budget", b, "--seeds", str(seeds)]) for e, b in SETTINGS]
    if schedules:
        e, b = SCHEDULES
        out.insert(3, (setting_name(e, b, True), ["--env", e, "--budget", b, "--seeds", str(seeds), "--schedules"]))
    return out


def finished(run_dir: Path, env: str) -> bool:
    return (run_dir / env / "summary.json").exists()


def run_all(out: Path, seeds: int, schedules: bool, extra: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    timings_path = out / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    todo = jobs(seeds, schedules)
    t0 = time.perf_counter()
    for i, (name, args) in enumerate(todo):
        run_dir = out / name
        env = args[1]
        if finished(run_dir, env):
            print(f"[{i + 1}/{len(todo)}] {name}: finished before, skipped", flush=True)
            continue
        left = sum(WEIGHT.get(n, 5) for n, _ in todo[i:] if not finished(out / n, n.split("-")[-2]))
        done_w = sum(WEIGHT.get(n, 5) for n in timings)
        done_s = sum(timings.values())
        rate = done_s / done_w if done_w else 60.0
        print(f"[{i + 1}/{len(todo)}] {name}: starting; ETA for the rest ~{left * rate / 60:.0f} min", flush=True)
        start = time.perf_counter()
        status = launch.launch(run_dir, [*args, *extra], log=out / f"{name}.log", check=False)
        if not launch.finished(status):  # the one exit-code rule
            print(f"[{i + 1}/{len(todo)}] {name}: run.py exited {status} ({launch.explain(status)}); see {out / name}.log",
                  flush=True)  # fmt: skip
            return status
        if status == 3:
            print(f"[{i + 1}/{len(todo)}] {name}: seeds diverged (see the table)", flush=True)
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
        timings_path.write_text(json.dumps(timings, indent=2))
        print(f"[{i + 1}/{len(todo)}] {name}: done in {timings[name] / 60:.1f} min "
              f"(total {(time.perf_counter() - t0) / 60:.1f} min)", flush=True)  # fmt: skip
    return 0


def _table(md_path: Path) -> str:
    text = md_path.read_text()
    text = text.split("\n", 2)[2].strip() if text.startswith("#") else text.strip()
    return text.replace("\n## ", "\n#### ")  # the summary's own sections sit under the setting's


def write_report(out: Path, docs: Path, schedules: bool) -> Path:
    """``docs/reproduction.md`` (and its PNGs in ``docs/reproduction/``) from the runs in ``out``."""
    fig_dir = docs / "reproduction"
    fig_dir.mkdir(parents=True, exist_ok=True)
    timings = json.loads((out / "timings.json").read_text()) if (out / "timings.json").exists() else {}
    summaries, sections = {}, []
    names = [n for n, _ in jobs(10, schedules)]
    for name in names:
        parts = name.split("-")
        env, budget = parts[-2], parts[-1]
        env_dir = out / name / env
        if not (env_dir / "summary.json").exists():
            sections.append(f"### {name}\n\nNot run yet.\n")
            continue
        summaries[name] = json.loads((env_dir / "summary.json").read_text())
        plan = json.loads((out / name / "run.json").read_text())
        any_cfg = next(iter(plan["configs"][env].values()))
        for png in ("test_return.png", "train_curves.png"):
            if (env_dir / png).exists():
                shutil.copy(env_dir / png, fig_dir / f"{name}-{png}")
        wall = f"{timings[name] / 60:.1f} min" if name in timings else "n/a"
        title = ("Schedules study: " if name.startswith("schedules") else "") + TITLES[env]
        sections.append(
            f"### {title}, {budget} budget ({any_cfg['total_timesteps']:,} policy steps)\n\n"
            f"{plan['seeds']} seeds; wall time {wall} (training, compile and robustness sweep).\n\n"
            f"{_table(env_dir / 'summary.md')}\n\n"
            f"![{name} test return](reproduction/{name}-test_return.png)\n"
            f"![{name} training curves](reproduction/{name}-train_curves.png)\n"
        )
    findings = docs / "reproduction_findings.md"
    text = [
        "# Reproducing the study\n",
        "Generated by `python experiments/reproduce.py` from a full run (the tables and plots below "
        "are that run's; the verdicts are computed from its summary numbers by `experiments/claims.py`; "
        "the findings are written by hand; each section says which run it quotes).\n",
        "Tables: mean ± standard error across test environments (min in brackets), **bold** = best "
        "or within one pooled SE of it ([method.md §4](method.md)).\n",
        f"Total wall time of the settings' runs: {sum(timings.values()) / 60:.1f} min on the machine "
        "named in the findings.\n",
        "## Verdicts on the study's claims\n",
        verdict_table(summaries),
    ]
    if findings.exists():
        text.append(findings.read_text())
    text.append("## Tables and plots\n")
    text.extend(sections)
    path = docs / "reproduction.md"
    path.write_text("\n".join(text))
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder of the runs (resumable)")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--no-schedules", dest="schedules", action="store_false", help="skip the schedules study")
    p.add_argument("--report", action="store_true", help="only (re)write docs/reproduction.md from --out")
    p.add_argument("--docs", default=str(ROOT / "docs"), help="where to write reproduction.md (default docs/)")
    args, extra = p.parse_known_args(argv)
    out = Path(args.out).expanduser()
    if args.seeds < 1:
        print("reproduce.py: error: --seeds must be a positive integer", file=sys.stderr)
        return 2
    if not args.report:
        rc = run_all(out, args.seeds, args.schedules, extra)
        if rc:
            return rc
    path = write_report(out, Path(args.docs), args.schedules)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    assert CLAIMS  # the claims module defines the study's claims
    sys.exit(main())

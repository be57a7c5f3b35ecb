"""The budget at which a setting's learner has converged, by the written rule
(``rcmdp_jax.convergence``; docs/robustness.md, "Budgets").

    python experiments/budget_rule.py --out DIR [--settings gymnax:Pendulum-v1,...] [--max-steps N]

For each setting it trains the non-robust learner (PPO-Lag, 10 seeds; resumable: a run folder
already in DIR is resumed or read) at ``--max-steps`` and reads its training curves — the
deterministic policy's return and each constraint's value at the nominal kernel, every
iteration — then applies the rule on the doubling grid up to half of ``--max-steps``. It prints
the table and writes ``DIR/budgets.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from launch import launch  # noqa: E402  (experiments/launch.py)

from rcmdp_jax.auto_budget import curves_of  # noqa: E402
from rcmdp_jax.convergence import converged_budget  # noqa: E402

SETTINGS = ("gymnax:Pendulum-v1", "gymnax:CartPole-v1", "gymnax:Acrobot-v1")
GRID = tuple(int(25_000 * 2**i) for i in range(8))  # 25k .. 3.2M


def folder_name(setting: str) -> str:
    return setting.replace(":", "_").replace("@", "_").replace("=", "_")


def train(setting: str, out: Path, steps: int, seeds: int, algo: str) -> float:
    """Train (or resume) ``algo`` on ``setting`` into ``out``; the wall seconds (0 when it was done)."""
    if (out / "done").exists():
        return 0.0
    t0 = time.time()
    launch(out, ["--env", setting, "--algos", algo, "--seeds", str(seeds), "--steps", str(steps), "--plots", "off",
                 "--n-test", "10"])  # fmt: skip
    (out / "done").write_text("")
    return time.time() - t0


def curves(out: Path, algo: str):
    """The rule's curves of the run in ``out`` (``auto_budget.curves_of``: constraints named by
    index), its steps and each constraint's multiplier."""
    env_dir = next(p for p in out.iterdir() if p.is_dir())
    m = dict(np.load(env_dir / algo / "train_metrics.npz"))
    return curves_of(m, range(m["eval_costs"].shape[-1]))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--settings", default=",".join(SETTINGS))
    p.add_argument("--max-steps", type=int, default=1_600_000)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--algo", default="PPO-Lag")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / "budgets.json"
    results = json.loads(saved.read_text()) if saved.exists() else {}  # other settings' results stay
    for setting in args.settings.split(","):
        folder = args.out / folder_name(setting)
        wall = train(setting, folder, args.max_steps, args.seeds, args.algo)
        c, steps, mult = curves(folder, args.algo)
        found, table = converged_budget(c, steps, GRID, multipliers=mult)
        results[setting] = dict(converged=found, max_steps=args.max_steps, seeds=args.seeds, wall_s=round(wall, 1),
                                table={str(n): {k: [round(a, 4), round(b, 4), *v[2:]] for k, (a, b, *v) in row.items()}
                                       for n, row in table.items()})  # fmt: skip
        print(f"\n{setting}: converged budget {found if found else 'none within the grid'}")
        print("| budget | " + " | ".join(f"{k}: moved / SE" for k in c) + " |")
        print("|---" * (1 + len(c)) + "|")
        for n, row in table.items():
            print(f"| {n:,} | " + " | ".join(f"{v[0]:.3f} / {v[1]:.3f}{'' if len(v) == 2 else ' (not binding)'}"
                                             for v in row.values()) + " |")  # fmt: skip
    saved.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()

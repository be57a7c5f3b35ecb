"""The held-out robustness benchmark (docs/heldout.md: its rule, written before the results).

    python experiments/heldout.py --out DIR --draw          # draw the settings (deterministic; saved)
    python experiments/heldout.py --out DIR                 # calibrate, budget, train, test (resumable)
    python experiments/heldout.py --out DIR --only 3,4      # some settings (1-based, the draw's order)

Each stage of a setting writes its result into ``DIR/<n>/`` before the next starts, so a run
that is stopped continues where it was (the runner's own ``--resume`` inside a stage).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SEED = 61
N_SETTINGS = 8
DEVELOPMENT = (1, 2)  # the rest is held out
WIDTHS = (0.1, 0.2, 0.3)
# environment -> (uncertain fields, {cost field: (low, high) of LIMIT})
POOL = {
    "gymnax:CartPole-v1": (("gravity", "masspole", "length", "force_mag"), {"x": (0.05, 0.3), "x_dot": (0.3, 1.0)}),
    "gymnax:Pendulum-v1": (("g", "m", "l"), {"theta_dot": (1.0, 3.0)}),
    "gymnax:Acrobot-v1": (("link_mass_1", "link_mass_2", "link_length_1"), {"velocity_1": (2.0, 6.0),
                                                                             "velocity_2": (3.0, 9.0)}),
    "gymnax:MountainCarContinuous-v0": (("power", "gravity"), {"velocity": (0.03, 0.06)}),
    "brax:inverted_pendulum": (("pole_mass", "gear"), {"speed": (0.05, 0.3)}),
}  # fmt: skip
LOOSEN, TRIES = 1.25, 4  # calibration: the limit times 1.25, at most four times
BUDGET_CAP, UNCONVERGED_STEPS = 1_600_000, 800_000
LEARNERS = ("PPO-Lag", "MDPO-Lag")
METHODS = ("none", "search", "worst-of-n", "corners", "dr", "ltma-norm")
SEEDS = 10


def draw(n: int = N_SETTINGS, seed: int = SEED) -> list[dict]:
    """The rule's draw: ``n`` distinct settings ``{"env", "uncertain": {field: width}, "field",
    "limit"}`` (docs/heldout.md); the same for the same ``seed``, on any machine."""
    rng = np.random.default_rng(seed)
    out, seen = [], set()
    while len(out) < n:
        env = sorted(POOL)[rng.integers(len(POOL))]
        fields, costs = POOL[env]
        k = int(rng.integers(1, min(3, len(fields)) + 1))
        chosen = sorted(rng.choice(len(fields), size=k, replace=False).tolist())
        uncertain = {fields[i]: float(WIDTHS[rng.integers(len(WIDTHS))]) for i in chosen}
        field = sorted(costs)[rng.integers(len(costs))]
        low, high = costs[field]
        limit = float(f"{math.exp(rng.uniform(math.log(low), math.log(high))):.3g}")
        key = (env, tuple(sorted(uncertain.items())), field, limit)
        if key in seen:
            continue
        seen.add(key)
        out.append({"env": env, "uncertain": uncertain, "field": field, "limit": limit})
    for i, s in enumerate(out, 1):
        s["index"], s["set"] = i, "development" if i in DEVELOPMENT else "held-out"
    return out


def env_name(setting: dict, limit: float | None = None) -> str:
    """The setting as one ``--env`` name: ``gymnax:ID@uncertain=F:W,...@costs=FIELD:LIMIT``."""
    box = ",".join(f"{f}:{w:g}" for f, w in setting["uncertain"].items())
    return f"{setting['env']}@uncertain={box}@costs={setting['field']}:{limit or setting['limit']:g}"


def algos(env: str) -> str:
    names = [lr if m == "none" else f"{lr}+{m}" for lr in LEARNERS for m in METHODS]
    try:  # ltma (the score-function gradient) where the kernel has a density
        from rcmdp_jax import envs

        e, p = envs.make(env)
        e.check_estimator(p, "score")
        names += [f"{lr}+ltma" for lr in LEARNERS]
    except ValueError:
        pass
    return ",".join(names)


def run(cmd: list[str], log: Path) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        return subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode


def calibrate(setting: dict, where: Path) -> dict:
    """Stage 1: the limit keepable with room (docs/heldout.md), ``where/calibration.json``."""
    done = where / "calibration.json"
    if done.exists():
        return json.loads(done.read_text())
    limit, tries = setting["limit"], []
    for t in range(TRIES + 1):
        out = where / f"feasibility-{t}"
        cmd = [sys.executable, "-m", "rcmdp_jax", "feasibility", "--env", env_name(setting, limit), "--out", str(out)]
        rc = run(cmd + (["--resume"] if out.is_dir() else []), where / "log.txt")
        rows = json.loads((out / "feasibility.json").read_text())["constraints"] if rc == 0 else []
        row = rows[0] if rows else {}
        room = bool(row) and row["least_worst_C"] + 2 * row.get("least_worst_C_se", 0.0) <= 0
        tries.append({"limit": limit, "rc": rc, "least_worst_C": row.get("least_worst_C"),
                      "se": row.get("least_worst_C_se"), "with_room": room})  # fmt: skip
        if room:
            break
        limit = float(f"{limit * LOOSEN:.3g}")
    result = {"limit": tries[-1]["limit"] if tries[-1]["with_room"] else None, "tries": tries}
    done.write_text(json.dumps(result, indent=1))
    return result


def budget(name: str, where: Path) -> dict:
    """Stage 2: the budget rule on PPO-Lag up to ``BUDGET_CAP`` (``where/budget.json``)."""
    done = where / "budget.json"
    if done.exists():
        return json.loads(done.read_text())
    out = where / "budget"
    rc = run([sys.executable, str(ROOT / "experiments" / "budget_rule.py"), "--out", str(out), "--settings", name,
              "--max-steps", str(BUDGET_CAP)], where / "log.txt")  # fmt: skip
    if rc != 0:
        raise SystemExit(f"budget rule failed on {name}: {where / 'log.txt'}")
    found = json.loads((out / "budgets.json").read_text())[name]
    steps = found.get("converged") or UNCONVERGED_STEPS
    result = {"steps": int(steps), "converged": found.get("converged") is not None, "table": found}
    done.write_text(json.dumps(result, indent=1))
    return result


def train(name: str, steps: int, where: Path) -> Path:
    """Stage 3: both learners under every method, tested, searched (``where/run``)."""
    from launch import command  # experiments/launch.py

    out = where / "run"
    if (where / "trained").exists():
        return out
    args = ["--env", name, "--algos", algos(name), "--seeds", str(SEEDS), "--steps", str(steps), "--worst-case",
            "costs", "--plots", "off"]  # fmt: skip
    if run(command(out, args), where / "log.txt") != 0:
        raise SystemExit(f"training failed on {name}: {where / 'log.txt'}")
    (where / "trained").write_text("")
    return out


def verdicts(C: np.ndarray) -> tuple[int, int, int]:
    """``(kept, too close, broken)`` seeds from per-seed episodes ``C [seeds, episodes]``: broken when
    the seed's mean is above 0 by more than two standard errors, kept when below by more."""
    mean = C.mean(1)
    se = C.std(1, ddof=1) / np.sqrt(C.shape[1])
    return int((mean + 2 * se <= 0).sum()), int((np.abs(mean) < 2 * se).sum()), int((mean - 2 * se > 0).sum())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--draw", action="store_true", help="draw the settings and stop")
    p.add_argument("--only", default=None, help="comma-separated setting numbers (default: held-out first, then dev)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "settings.json"
    if not path.exists() or args.draw:
        settings = draw()
        text = json.dumps(settings, indent=1)
        path.write_text(text)
        (ROOT / "docs" / "heldout_settings.json").write_text(text + "\n")
        print(f"drew {len(settings)} settings into {path}")
        if args.draw:
            return
    settings = json.loads(path.read_text())
    order = [s for s in settings if s["set"] == "held-out"] + [s for s in settings if s["set"] == "development"]
    if args.only:
        order = [s for s in order if str(s["index"]) in args.only.split(",")]
    for s in order:
        where = args.out / str(s["index"])
        t0 = time.time()
        cal = calibrate(s, where)
        if cal["limit"] is None:
            print(f"setting {s['index']}: not keepable with room after {TRIES} loosenings; dropped", flush=True)
            continue
        name = env_name(s, cal["limit"])
        b = budget(name, where)
        train(name, b["steps"], where)
        print(f"setting {s['index']} ({name}): done in {(time.time() - t0) / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()

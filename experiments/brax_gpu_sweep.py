"""The batch shape for the brax velocity presets on a GPU, chosen by a short sweep.

    python experiments/brax_gpu_sweep.py --env hopper --out DIR      # train, then print the choice
    python experiments/brax_gpu_sweep.py --env hopper --out DIR --report

The presets' learner settings are the study's small batches (4 envs x 400 steps a seed, minibatches
of 32), whose many small sequential updates a GPU cannot fill (docs/brax_envs.md: 46-76 % of
brax's own PPO on one H200 with 64 seeds). This sweep trains PPO-Lag on one preset at each of
``SHAPES`` (2 seeds, ``--steps`` policy steps, the robustness test at 2 episodes a kernel, no
worst-case search), one run folder per shape, and applies ``RULE`` — written before any result
— to choose the shape ``experiments/brax_gpu.sh`` then trains the study with. Resumable: a shape
whose folder holds ``summary.json`` is read, not retrained. Writes ``sweep.json`` (every shape's
return, constraint, wall time and the choice) into ``--out`` and prints the ``--set`` arguments
of the choice as its last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from launch import launch  # experiments/launch.py

ALGO = "PPO-Lag"
# (n_envs, n_steps, minibatch_size) a seed: the preset's, then batches 2.5x, 5x and 10x its
# 1,600 steps spread over more environments (shorter rollouts), minibatches growing with them
SHAPES = ((4, 400, 32), (32, 128, 256), (128, 64, 1024), (512, 32, 2048))
RULE = ("the widest shape whose mean return over the test grid (the run's Return column) is within 10 % "
        "of the best shape's, among the shapes that keep the constraint at the nominal kernel in every "
        "seed; the preset's shape when none keeps it")


def shape_args(shape: tuple[int, int, int]) -> list[str]:
    n_envs, n_steps, minibatch = shape
    return ["--set", f"n_envs={n_envs}", "--set", f"n_steps={n_steps}", "--set", f"minibatch_size={minibatch}"]


def shape_dir(out: Path, shape: tuple[int, int, int]) -> Path:
    return out / "shape_{}x{}_mb{}".format(*shape)


def train(env: str, shape: tuple[int, int, int], steps: int, out: Path) -> float | None:
    """One shape's run (skipped when its summary is there); its wall seconds, or None when read."""
    run_dir = shape_dir(out, shape)
    if list(run_dir.glob("*/summary.json")):
        return None
    t0 = time.perf_counter()
    launch(run_dir, ["--env", f"brax:{env}", "--algos", ALGO, "--seeds", "2", "--steps", str(steps), "--n-test", "2",
                     *shape_args(shape)])  # fmt: skip
    return time.perf_counter() - t0


def row(out: Path, shape: tuple[int, int, int]) -> dict | None:
    """A shape's result from its run folder's summary.json, or None before it ran."""
    found = list(shape_dir(out, shape).glob("*/summary.json"))
    if not found:
        return None
    s = json.loads(found[0].read_text())[ALGO]
    constraints = s["constraints"].values()
    return {
        "shape": list(shape),
        "return": s["Return"]["mean"],
        # every seed kept (none broken, none too close to call; a summary of before the verdict: none broken)
        "nominal_kept_every_seed": all(c.get("nominal_kept", c["nominal_seeds_broken"] == 0) is True for c in constraints),
        "C_nominal": max(c["nominal"] for c in constraints),
    }


def choose(rows: list[dict]) -> dict:
    """``RULE`` over the shapes' rows (in ``SHAPES``' order, narrowest first)."""
    kept = [r for r in rows if r["nominal_kept_every_seed"]]
    if not kept:
        return rows[0]
    best = max(r["return"] for r in kept)
    return [r for r in kept if r["return"] >= best - 0.1 * abs(best)][-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", required=True, choices=("hopper", "halfcheetah"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=1_000_000, help="policy steps a shape trains (default 1M)")
    p.add_argument("--report", action="store_true", help="read what --out holds; train nothing")
    args = p.parse_args(argv)
    walls = {}
    if not args.report:
        for shape in SHAPES:
            walls[shape] = train(args.env, shape, args.steps, args.out)
    rows = [r for r in (row(args.out, s) for s in SHAPES) if r is not None]
    if not rows:
        print(f"brax_gpu_sweep: no shape has run in {args.out}", file=sys.stderr)
        return 1
    saved = args.out / "sweep.json"
    before = {tuple(r["shape"]): r.get("wall_s") for r in json.loads(saved.read_text())["rows"]} if saved.exists() else {}
    for r in rows:
        r["wall_s"] = walls.get(tuple(r["shape"])) or before.get(tuple(r["shape"]))
    chosen = choose(rows)
    saved.write_text(json.dumps({"env": args.env, "algo": ALGO, "steps": args.steps, "rule": RULE,
                                                     "rows": rows, "chosen": chosen["shape"]}, indent=1))  # fmt: skip
    for r in rows:
        print("n_envs {} n_steps {} minibatch {}: return {:.2f}, C nominal {:+.3f}{}".format(
            *r["shape"], r["return"], r["C_nominal"], "" if r["nominal_kept_every_seed"] else " (broken)"))  # fmt: skip
    print(" ".join(shape_args(tuple(chosen["shape"]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where should the dual phase read C^ under worst-of-n and corners? The kernel the method
picked by the Lagrangian (``dual_reading=picked``) or the constraint's own worst candidate
(``worst_cost``)? Trains PPO-Lag under both methods and both readings, runs the robustness
test, and writes per seed the constraint value at the nominal kernel and on its worst test
kernel, and the return at the nominal kernel:

    python experiments/dual_reading.py --out DIR [--seeds 5] [--settings cartpole,...]

Resumable (each run folder is ``--resume``d, ``experiments/launch.py``); the table goes to
``DIR/dual_reading.md`` and ``DIR/dual_reading.json``. Seeds that diverged are left out as the
run's own report leaves them out (``rcmdp_jax.study.run_folder.kept_seeds``); the table says how
many seeds it kept of how many trained.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from launch import format_mean_se, launch  # experiments/launch.py

SETTINGS = {  # name -> the command's environment options
    "cartpole": ["--env", "cartpole"],
    "gymnax:Pendulum-v1 (±10 %)": ["--env", "gymnax:Pendulum-v1", "--uncertain", "g=0.1,m=0.1,l=0.1"],
}
ALGOS = ("PPO-Lag+worst-of-n", "PPO-Lag+corners")
READINGS = ("picked", "worst_cost")


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def run(out: Path, setting: str, reading: str, seeds: int) -> Path:
    folder = out / f"{slug(setting)}-{reading}"
    launch(folder, [*SETTINGS[setting], "--algos", ",".join(ALGOS), "--seeds", str(seeds),
                    "--set", f"dual_reading={reading}"])  # fmt: skip
    return folder


def per_seed(folder: Path, algo: str) -> dict:
    """Per kept seed (the report's rule, ``kept_seeds``: not diverged in training, finite test
    episodes): C at the nominal kernel and on the worst test kernel (the worst constraint), the
    return at the nominal kernel; and how many seeds were kept of how many trained."""
    from rcmdp_jax.study.run_folder import kept_seeds, load_npz

    (path,) = folder.glob(f"*/{slug(algo)}/test_results.npz")
    d = load_npz(path)
    keep = kept_seeds(d)
    C = d["C"][keep].mean(3).max(-1)  # [S, L, D]: mean over episodes, the worst constraint
    V = d["V"][keep].mean(3)  # [S, L, D]
    return {"C_nominal": C[:, 0, 0].tolist(), "C_worst": C.reshape(C.shape[0], -1).max(1).tolist(),
            "V_nominal": V[:, 0, 0].tolist(), "seeds": int(keep.sum()), "trained": int(keep.size)}  # fmt: skip


def mean_se(x) -> str:
    return format_mean_se(x, digits=3)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--settings", default=",".join(SETTINGS))
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results, walls = {}, {}
    for setting in args.settings.split(","):
        for reading in READINGS:
            t0 = time.time()
            folder = run(out, setting, reading, args.seeds)
            walls[f"{setting} {reading}"] = time.time() - t0
            for algo in ALGOS:
                results[f"{setting} | {algo} | {reading}"] = per_seed(folder, algo)
    lines = ["| setting | algorithm | dual reading | seeds kept | C nominal | C worst kernel | seeds broken (worst) "
             "| return nominal |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for key, r in results.items():
        setting, algo, reading = key.split(" | ")
        broken = sum(c > 0 for c in r["C_worst"])
        lines.append(f"| {setting} | {algo} | {reading} | {r['seeds']}/{r['trained']} | {mean_se(r['C_nominal'])} | "
                     f"{mean_se(r['C_worst'])} | "
                     f"{broken}/{len(r['C_worst'])} | {mean_se(r['V_nominal'])} |")  # fmt: skip
    (out / "dual_reading.md").write_text("\n".join(lines) + "\n")
    (out / "dual_reading.json").write_text(json.dumps({"results": results, "wall_s": walls}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

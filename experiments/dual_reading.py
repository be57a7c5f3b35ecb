"""Where should the dual phase read C^ under worst-of-n and corners? The kernel the method
picked by the Lagrangian (``dual_reading=picked``) or the constraint's own worst candidate
(``worst_cost``)? Trains PPO-Lag under both methods and both readings, runs the robustness
test, and writes per seed the constraint value at the nominal kernel and on its worst test
kernel, and the return at the nominal kernel:

    python experiments/dual_reading.py --out DIR [--seeds 5] [--settings cartpole,...]

Resumable (each run folder is ``--resume``d); the table goes to ``DIR/dual_reading.md`` and
``DIR/dual_reading.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
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
    cmd = [sys.executable, str(ROOT / "experiments" / "run.py"), *SETTINGS[setting], "--algos", ",".join(ALGOS),
           "--seeds", str(seeds), "--set", f"dual_reading={reading}", "--out", str(folder)]  # fmt: skip
    if (folder / "run.json").exists():
        cmd.append("--resume")
    subprocess.run(cmd, check=True, cwd=ROOT)
    return folder


def per_seed(folder: Path, algo: str) -> dict:
    """Per seed: C at the nominal kernel and on the worst test kernel (the worst constraint),
    the return at the nominal kernel."""
    (path,) = folder.glob(f"*/{slug(algo)}/test_results.npz")
    d = np.load(path)
    C = d["C"].mean(3).max(-1)  # [S, L, D]: mean over episodes, the worst constraint
    V = d["V"].mean(3)  # [S, L, D]
    return {"C_nominal": C[:, 0, 0].tolist(), "C_worst": C.reshape(C.shape[0], -1).max(1).tolist(),
            "V_nominal": V[:, 0, 0].tolist()}  # fmt: skip


def mean_se(x) -> str:
    x = np.asarray(x, np.float64)
    return f"{x.mean():+.3f} ± {x.std(ddof=1) / np.sqrt(x.size) if x.size > 1 else 0.0:.3f}"


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
    lines = ["| setting | algorithm | dual reading | C nominal | C worst kernel | seeds broken (worst) | return nominal |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for key, r in results.items():
        setting, algo, reading = key.split(" | ")
        broken = sum(c > 0 for c in r["C_worst"])
        lines.append(f"| {setting} | {algo} | {reading} | {mean_se(r['C_nominal'])} | {mean_se(r['C_worst'])} | "
                     f"{broken}/{len(r['C_worst'])} | {mean_se(r['V_nominal'])} |")  # fmt: skip
    (out / "dual_reading.md").write_text("\n".join(lines) + "\n")
    (out / "dual_reading.json").write_text(json.dumps({"results": results, "wall_s": walls}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

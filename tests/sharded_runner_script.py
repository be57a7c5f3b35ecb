"""Run by ``test_sharding.py`` in a subprocess with 2 forced host devices: the runner on the
Inventory-3D MDPO family (orthogonal init, gradient clipping), the case that deadlocked
when the initial state was computed by a sharded program. Prints ``FINISHED`` at the end."""

import sys
import tempfile
from pathlib import Path

import jax

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))

import run as runner  # noqa: E402

assert jax.device_count() == 2, jax.devices()
out = Path(tempfile.mkdtemp()) / "run"
args = ["--env", "inventory3d", "--algos", "MDPO,MDPO-Lag", "--seeds", "3", "--steps", "64", "--n-test", "1",
        "--set", "n_steps=16", "--set", "minibatch_size=16", "--set", "eval_episodes=2",
        "--compile-cache", "off", "--out", str(out)]  # fmt: skip
assert runner.main(args) == 0
assert (out / "inventory3d" / "summary.json").exists()
print("FINISHED")

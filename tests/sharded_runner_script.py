"""Run by ``test_sharding.py`` in a subprocess with 2 forced host devices: the runner on
Inventory 3-D with two families (MCPMD, then the MDPO family with orthogonal init), the
case that deadlocked XLA CPU twice: a sharded init program, and the next family's
initial state placed on the devices from the compile thread while the previous family
trained. Prints ``FINISHED`` at the end."""

import tempfile
from pathlib import Path

import jax

from rcmdp_jax import runner  # noqa: E402

assert jax.device_count() == 2, jax.devices()
out = Path(tempfile.mkdtemp()) / "run"
args = ["--env", "inventory3d", "--algos", "MCPMD,MDPO,MDPO-Lag", "--seeds", "3", "--steps", "640", "--n-test", "1",
        "--set", "n_steps=16", "--set", "minibatch_size=16", "--set", "eval_episodes=2",
        "--compile-cache", "off", "--out", str(out)]  # fmt: skip
assert runner.main(args) == 0
assert (out / "inventory3d" / "summary.json").exists()
print("FINISHED")

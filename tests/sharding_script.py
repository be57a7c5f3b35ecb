"""Run by ``test_sharding.py`` in a subprocess with 4 forced host devices: sharded training,
sweeps and the runner give the single-device numbers. Prints ``RESULT <json>``."""

import json

import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax import make_train, preset
from rcmdp_jax.evaluate import make_eval
from rcmdp_jax.sharding import local_mesh, shard_batch, sharded_blocks, sharded_vmap, unshard

assert jax.device_count() == 4, jax.devices()
cfg = preset(
    "cartpole",
    "MDPO-Robust-Lag",
    total_timesteps=128,
    n_steps=16,
    minibatch_size=16,
    ltma_iterations=2,
    eval_episodes=2,
)
keys = jax.random.split(jax.random.PRNGKey(0), 6)  # 6 seeds on 4 devices: padded to 8
train = make_train(cfg)
mesh = local_mesh()
single = jax.jit(jax.vmap(train))(keys)
# a user's jax.jit(jax.vmap(train)) on seeds placed across the mesh: split across the 4 devices
# (``sharded_vmap`` is this program; its own padding and trimming are checked on the sweep below)
raw = jax.jit(jax.vmap(train))(shard_batch(keys, mesh))
sharded = unshard(raw, len(keys))
sweep = make_eval(cfg, n_test=2)
eval_keys = jax.random.split(jax.random.PRNGKey(1), 6)
s_single = jax.jit(jax.vmap(sweep.per_seed))(single.state.params["actor"], eval_keys)
s_sharded = sharded_vmap(sweep.per_seed, mesh)(sharded.state.params["actor"], eval_keys)
s_blocks = sharded_blocks(sweep.from_keys, mesh)(sharded.state.params["actor"], eval_keys)
# a hyperparameter sweep (3 alphas, replicated seed) sharded the same way
hp = jax.tree.map(lambda x: jnp.full((3,), x, jnp.float32), cfg.hparams).replace(alpha=jnp.array([0.5, 2.0, 4.0]))
hp_single = jax.jit(jax.vmap(train, in_axes=(None, 0)))(keys[0], hp)
hp_sharded = sharded_vmap(train, mesh, in_axes=(None, 0))(keys[0], hp)


def max_diff(xs, ys):
    """NaN-aware: a NaN on one side only counts as an infinite difference."""
    worst = 0.0
    for a, b in zip(jax.tree.leaves(xs), jax.tree.leaves(ys)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        both = np.isnan(a) & np.isnan(b)
        # float rounding is relative: differences are measured against max(1, |value|)
        d = np.where(both, 0.0, np.abs(a - b) / np.maximum(1.0, np.abs(b)))
        worst = max(worst, float(np.max(np.where(np.isnan(d), np.inf, d), initial=0.0)))
    return worst


out = {
    "train_shape": list(sharded.metrics["lam"].shape),
    "train_max_diff": max_diff(single.metrics, sharded.metrics),
    "sweep_shape": list(s_sharded["V"].shape),
    "sweep_max_diff": float(jnp.max(jnp.abs(s_single["V"] - s_sharded["V"]))),
    "blocks_shape": list(s_blocks["V"].shape),
    "blocks_max_diff": float(jnp.max(jnp.abs(s_single["V"] - s_blocks["V"]))),
    "hp_alpha": [float(a) for a in hp_sharded.metrics["alpha"][:, 0]],
    "hp_max_diff": max_diff(hp_single.metrics, hp_sharded.metrics),
    "raw_shape": list(raw.metrics["lam"].shape),
    "n_devices_used": len(raw.metrics["lam"].sharding.device_set),
}
# the runner's --devices path (auto: all 4) gives the single-device numbers too: same
# config, the same 6 seeds (PRNGKey(0)) and evaluation keys (PRNGKey(1)) as above
import contextlib
import io
import pathlib
import tempfile

from rcmdp_jax.study import cli

tiny = ["--algos", "MDPO-Robust-Lag", "--seeds", "6", "--steps", "128", "--n-test", "2",
        "--set", "n_steps=16", "--set", "minibatch_size=16", "--set", "ltma_iterations=2",
        "--set", "eval_episodes=2", "--compile-cache", "off"]  # fmt: skip
tmp = pathlib.Path(tempfile.mkdtemp())
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    assert cli.main(tiny + ["--out", str(tmp / "four")]) == 0
algo_dir = tmp / "four" / "cartpole" / "MDPO-Robust-Lag"
out["runner_sharded"] = "sharded over 4 CPU devices" in printed.getvalue()
out["runner_shape"] = list(np.load(algo_dir / "test_results.npz")["V"].shape)
out["runner_diffs"] = {k: max_diff(v, single.metrics[k]) for k, v in np.load(algo_dir / "train_metrics.npz").items()
                       if k in single.metrics}  # fmt: skip
out["runner_max_diff"] = max(
    max_diff(np.load(algo_dir / "test_results.npz")["V"], np.asarray(s_single["V"])), *out["runner_diffs"].values()
)
print("RESULT " + json.dumps(out))

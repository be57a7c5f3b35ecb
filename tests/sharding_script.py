"""Run by ``test_sharding.py`` in a subprocess with 4 forced host devices: sharded training,
sweeps and the runner give the single-device numbers. Prints ``RESULT <json>``."""

import json

import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax import make_train, preset, sweep
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
seeds = jax.random.split(jax.random.PRNGKey(0), 6)  # the runner's 6 seeds below
# 6 lanes on 4 devices (padded to 8): lanes 0-2 a hyperparameter sweep (3 alphas on seed 0, the
# first the preset's), lanes 3-5 seeds 3-5 at the preset's alpha; the runner's lanes 0, 3, 4, 5
keys = seeds[jnp.array([0, 0, 0, 3, 4, 5])]
a = cfg.hparams.alpha  # the preset's: 2
hp6 = sweep(cfg, alpha=[a, 0.5, 4.0, a, a, a])
train = make_train(cfg)
mesh = local_mesh()
single = jax.jit(jax.vmap(train))(keys, hp6)
# a user's jax.jit(jax.vmap(train)) on seeds and hyperparameters placed across the mesh: split
# across the 4 devices (``sharded_vmap`` is this program; its own padding and trimming are
# checked on the robustness test below)
raw = jax.jit(jax.vmap(train))(shard_batch(keys, mesh), shard_batch(hp6, mesh))
sharded = unshard(raw, len(keys))
robustness = make_eval(cfg, n_test=2)  # the robustness test of every seed
eval_keys = jax.random.split(jax.random.PRNGKey(1), 6)
s_single = jax.jit(jax.vmap(robustness.per_seed))(single.state.params["actor"], eval_keys)
s_sharded = sharded_vmap(robustness.per_seed, mesh)(sharded.state.params["actor"], eval_keys)
s_blocks = sharded_blocks(robustness.from_keys, mesh)(sharded.state.params["actor"], eval_keys)
# the sweep of lanes 0-2 with its seed replicated (in_axes None) through ``sharded_vmap``
hp = jax.tree.map(lambda x: x[:3], hp6)
hp_single = jax.tree.map(lambda x: x[:3], single)
hp_sharded = sharded_vmap(train, mesh, in_axes=(None, 0))(seeds[0], hp)


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
    "hp_alpha": [round(float(a), 6) for a in hp_sharded.metrics["alpha"][:, 0]],
    "alpha_default": float(cfg.hparams.alpha),
    "hp_lanes_differ": bool(
        not np.allclose(hp_sharded.metrics["policy_loss"][0], hp_sharded.metrics["policy_loss"][1])
    ),
    "hp_max_diff": max_diff(hp_single.metrics, hp_sharded.metrics),
    "raw_shape": list(raw.metrics["lam"].shape),
    "n_devices_used": len(raw.metrics["lam"].sharding.device_set),
}
# the runner's --devices path (auto: all 4) gives the single-device numbers too: same
# config, its 6 seeds (PRNGKey(0)) and evaluation keys (PRNGKey(1)); lanes 0, 3, 4, 5 above are its seeds
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
same = np.array([0, 3, 4, 5])  # the runner's lanes that equal lanes above (same seed, the preset's alpha)
out["runner_diffs"] = {k: max_diff(v[same], single.metrics[k][same])
                       for k, v in np.load(algo_dir / "train_metrics.npz").items() if k in single.metrics}  # fmt: skip
out["runner_max_diff"] = max(
    max_diff(np.load(algo_dir / "test_results.npz")["V"][same], np.asarray(s_single["V"])[same]),
    *out["runner_diffs"].values(),
)
print("RESULT " + json.dumps(out))

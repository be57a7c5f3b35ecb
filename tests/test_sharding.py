"""Sharding across 4 (forced host) devices gives the single-device numbers."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax.sharding import pad_leading, process_block, unshard

SCRIPT = textwrap.dedent(
    """
    import json, jax, jax.numpy as jnp, numpy as np
    from rcmdp_jax import make_train, preset
    from rcmdp_jax.evaluate import make_eval
    from rcmdp_jax.sharding import local_mesh, sharded_vmap

    assert jax.device_count() == 4, jax.devices()
    cfg = preset("cartpole", "MDPO-Robust-Lag", total_timesteps=128, n_steps=16,
                 minibatch_size=16, ltma_iterations=2, eval_episodes=2)
    keys = jax.random.split(jax.random.PRNGKey(0), 6)   # 6 seeds on 4 devices: padded to 8
    train = make_train(cfg)
    mesh = local_mesh()
    single = jax.jit(jax.vmap(train))(keys)
    sharded = sharded_vmap(train, mesh)(keys)
    sweep = make_eval(cfg, n_test=2)
    eval_keys = jax.random.split(jax.random.PRNGKey(1), 6)
    s_single = jax.jit(jax.vmap(sweep.per_seed))(single.state.params["actor"], eval_keys)
    s_sharded = sharded_vmap(sweep.per_seed, mesh)(sharded.state.params["actor"], eval_keys)
    from rcmdp_jax.sharding import sharded_blocks
    s_blocks = sharded_blocks(sweep.from_keys, mesh)(sharded.state.params["actor"], eval_keys)
    from rcmdp_jax.sharding import shard_batch
    raw = jax.jit(jax.vmap(train))(shard_batch(keys, mesh))
    # a hyperparameter sweep (3 alphas, replicated seed) sharded the same way
    hp = jax.tree.map(lambda x: jnp.full((3,), x, jnp.float32), cfg.hparams).replace(alpha=jnp.array([0.5, 2.0, 4.0]))
    hp_single = jax.jit(jax.vmap(train, in_axes=(None, 0)))(keys[0], hp)
    hp_sharded = sharded_vmap(train, mesh, in_axes=(None, 0))(keys[0], hp)
    out = {
        "train_shape": list(sharded.metrics["lam"].shape),
        "train_max_diff": max(float(jnp.max(jnp.abs(a - b))) for a, b in
                              zip(jax.tree.leaves(single.metrics), jax.tree.leaves(sharded.metrics))),
        "sweep_shape": list(s_sharded["V"].shape),
        "sweep_max_diff": float(jnp.max(jnp.abs(s_single["V"] - s_sharded["V"]))),
        "blocks_shape": list(s_blocks["V"].shape),
        "blocks_max_diff": float(jnp.max(jnp.abs(s_single["V"] - s_blocks["V"]))),
        "hp_alpha": [float(a) for a in hp_sharded.metrics["alpha"][:, 0]],
        "hp_max_diff": max(float(jnp.max(jnp.abs(a - b))) for a, b in
                           zip(jax.tree.leaves(hp_single.metrics), jax.tree.leaves(hp_sharded.metrics))),
        "raw_shape": list(raw.metrics["lam"].shape),
        "n_devices_used": len(raw.metrics["lam"].sharding.device_set),
    }
    # the runner's --devices path gives the single-device numbers too
    import sys, tempfile, pathlib
    sys.path.insert(0, "experiments")
    import run as runner
    tiny = ["--algos", "MDPO-Robust-Lag", "--seeds", "3", "--steps", "64", "--n-test", "2",
            "--set", "n_steps=16", "--set", "minibatch_size=16", "--set", "ltma_iterations=2",
            "--set", "eval_episodes=2", "--compile-cache", "off"]
    tmp = pathlib.Path(tempfile.mkdtemp())
    assert runner.main(tiny + ["--out", str(tmp / "one"), "--devices", "1"]) == 0
    assert runner.main(tiny + ["--out", str(tmp / "four")]) == 0  # default --devices auto: all 4
    load = lambda d: np.load(tmp / d / "cartpole" / "MDPO-Robust-Lag" / "test_results.npz")["V"]
    out["runner_shape"] = list(load("four").shape)
    out["runner_max_diff"] = float(np.max(np.abs(load("one") - load("four"))))
    print("RESULT " + json.dumps(out))
    """
)


def test_sharded_training_and_sweep_equal_single_device():
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600, cwd=root
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    assert out["train_shape"] == [6, 2, 1]
    assert out["sweep_shape"] == [6, 11, 16, 2]
    assert out["raw_shape"] == [8, 2, 1] and out["n_devices_used"] == 4
    assert out["train_max_diff"] < 1e-4
    assert out["sweep_max_diff"] < 1e-4
    assert out["hp_alpha"] == [0.5, 2.0, 4.0] and out["hp_max_diff"] < 1e-4
    assert out["runner_shape"] == [3, 11, 16, 2] and out["runner_max_diff"] < 1e-4
    assert out["blocks_shape"] == [6, 11, 16, 2] and out["blocks_max_diff"] < 1e-4


def test_sharded_runner_finishes_on_the_family_that_deadlocked():
    """On 2 host devices the runner trains the Inventory-3D MDPO family to the end (a
    sharded init program with orthogonal init used to hang XLA CPU forever)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    env["JAX_PLATFORMS"] = "cpu"
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sharded_runner_script.py")
    try:
        proc = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=400)
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"the sharded runner hung: {(err.stdout or b'')[-2000:]!r}") from None
    assert proc.returncode == 0 and "FINISHED" in proc.stdout, proc.stderr[-3000:]


def test_split_cpu_exposes_the_host_as_several_devices_before_jax_starts():
    script = textwrap.dedent(
        """
        from rcmdp_jax import sharding            # imports nothing that starts JAX
        assert sharding.split_cpu(3)
        import jax, jax.numpy as jnp
        import envs                               # gymnax starts the backends
        assert jax.device_count() == 3, jax.devices()
        assert not sharding.split_cpu(2)          # too late now: refused, not an error
        mesh = sharding.setup_devices("auto")
        assert mesh.size == 3
        print("OK")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


def test_padding_and_trimming_are_invisible():
    tree = {"a": jnp.arange(6.0), "b": jnp.ones((6, 2))}
    padded = pad_leading(tree, 4)
    assert padded["a"].shape == (8,) and float(padded["a"][-1]) == 5.0
    back = unshard(padded, 6)
    np.testing.assert_array_equal(back["a"], tree["a"])
    assert process_block(10) == slice(0, 10)  # one process takes every seed
    assert jax.process_count() == 1

"""Sharding across 4 (forced host) devices gives the single-device numbers."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax.sharding import pad_leading, process_block, unshard


@pytest.mark.slow
def test_sharded_training_and_sweep_equal_single_device():
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "tests", "sharding_script.py")
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=600, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT ") :])
    assert out["train_shape"] == [6, 2, 1]
    assert out["sweep_shape"] == [6, 11, 16, 2]
    assert out["raw_shape"] == [8, 2, 1] and out["n_devices_used"] == 4
    assert out["train_max_diff"] < 1e-4
    assert out["sweep_max_diff"] < 1e-4
    assert out["hp_alpha"] == [out["alpha_default"], 0.5, 4.0] and out["hp_max_diff"] < 1e-4 and out["hp_lanes_differ"]
    # relative to max(1, |value|): the multiplier batch's minibatch means round differently
    # when the lanes are split differently (c_hat ~7e-5), and the deterministic evaluation
    # amplifies that through the parameters (eval_costs ~6e-4 after two iterations)
    assert out["runner_sharded"] and out["runner_shape"] == [6, 11, 16, 2] and out["runner_max_diff"] < 1e-3
    assert out["blocks_shape"] == [6, 11, 16, 2] and out["blocks_max_diff"] < 1e-4


@pytest.mark.slow
def test_split_cpu_exposes_the_host_as_several_devices_before_jax_starts():
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp              # importing starts no backend (docs/custom_envs.md)
        from rcmdp_jax import envs, make_train, preset, sharding
        assert sharding.split_cpu(3)
        envs.make("cartpole")                     # the first computation starts the backends
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
    host = pad_leading({"a": np.arange(6.0)}, 4)["a"]  # a host array padded on the host
    assert isinstance(host, np.ndarray) and host.tolist() == [0, 1, 2, 3, 4, 5, 5, 5]
    assert process_block(10) == slice(0, 10)  # one process takes every seed
    assert jax.process_count() == 1

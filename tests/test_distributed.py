"""--distributed for real: two processes on this machine (coordinator on localhost, CPU
devices, gloo) give the numbers of one process trained on the same seeds."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from rcmdp_jax import make_train, preset
from rcmdp_jax.evaluate import make_eval

pytestmark = pytest.mark.slow  # the quick tier leaves them out (pyproject.toml's markers)

RUN_PY = Path(__file__).resolve().parent.parent / "experiments" / "run.py"
TINY = ["--algos", "MDPO-Lag", "--seeds", "4", "--steps", "64", "--n-test", "2", "--devices", "1",
        "--set", "n_steps=16", "--set", "minibatch_size=16", "--set", "eval_episodes=2"]  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_equal_one(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    port = _free_port()
    two = tmp_path / "two"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(RUN_PY),
                *TINY,
                "--out",
                str(two),
                "--distributed",
                "--coordinator",
                f"localhost:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )  # fmt: skip
        for i in range(2)
    ]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-2000:] + logs[1][-2000:]
    # one process, in this one: the same config, seeds (PRNGKey(0)) and test keys (PRNGKey(1))
    cfg = preset("cartpole", "MDPO-Lag", total_timesteps=64, n_steps=16, minibatch_size=16, eval_episodes=2)
    single = jax.jit(jax.vmap(make_train(cfg)))(jax.random.split(jax.random.PRNGKey(0), 4))
    V = jax.jit(make_eval(cfg, n_test=2).from_keys)(
        single.state.params["actor"], jax.random.split(jax.random.PRNGKey(1), 4)
    )["V"]
    algo = two / "cartpole" / "MDPO-Lag"
    b = np.load(algo / "test_results.npz")["V"]
    assert b.shape == (4, 11, 16, 2)
    np.testing.assert_allclose(b, np.asarray(V), rtol=1e-5, atol=1e-4)
    metrics = np.load(algo / "train_metrics.npz")
    for key in ("lam", "xi", "policy_loss", "eval_return"):
        np.testing.assert_allclose(metrics[key], np.asarray(single.metrics[key]), rtol=1e-5, atol=1e-5, err_msg=key)
    # each process trained its own 2 seeds; process 0 alone wrote the folder
    assert "process 0 of 2" in logs[0] and "process 1 of 2" in logs[1], logs[0][-1500:]
    assert "| MDPO-Lag |" in logs[0] and "| MDPO-Lag |" not in logs[1]  # process 0 reports

"""--distributed for real: two processes on this machine (coordinator on localhost, CPU
devices, gloo) give the numbers of one process trained on the same seeds: the session's
shared one-process run ``trained`` (conftest.py) of the same arguments, so no reference
program is compiled here (that the runner's numbers are the API's, ``make_train`` on
seeds ``PRNGKey(0)`` and test keys ``PRNGKey(1)``, is ``test_sharding.py``'s check)."""

import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import RUN_PY, assert_csv_is_npz
from tiny_configs import HOSTILE_TINY

pytestmark = pytest.mark.slow  # the quick tier leaves them out (pyproject.toml's markers)

ALGO = "MDPO-Lag"  # HOSTILE_TINY's one algorithm, 2 seeds: one per process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_equal_one(trained, tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    port = _free_port()
    two = tmp_path / "two"
    procs = [
        subprocess.Popen(
            [sys.executable, str(RUN_PY), *HOSTILE_TINY, "--devices", "1", "--out", str(two), "--distributed",
             "--coordinator", f"localhost:{port}", "--num-processes", "2", "--process-id", str(i)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )
        for i in range(2)
    ]  # fmt: skip
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-2000:] + logs[1][-2000:]
    # one process: the same options, seeds and test keys, trained once a session (``trained``)
    algo, single = two / "cartpole" / ALGO, trained / "cartpole" / ALGO
    b, V = np.load(algo / "test_results.npz")["V"], np.load(single / "test_results.npz")["V"]
    assert b.shape == (2, 11, 16, 3) and V.shape == b.shape
    np.testing.assert_allclose(b, V, rtol=1e-5, atol=1e-4)
    metrics, want = np.load(algo / "train_metrics.npz"), np.load(single / "train_metrics.npz")
    for key in ("lam", "xi", "policy_loss", "eval_return"):
        np.testing.assert_allclose(metrics[key], want[key], rtol=1e-5, atol=1e-5, err_msg=key)
    # the training log, written by process 0 when the algorithm finished: every seed's rows and event files
    assert_csv_is_npz(algo)
    assert sorted(p.name for p in (algo / "tensorboard").iterdir()) == ["seed_0", "seed_1"]
    # each process trained its own seed; process 0 alone wrote the folder
    assert "process 0 of 2" in logs[0] and "process 1 of 2" in logs[1], logs[0][-1500:]
    assert f"| {ALGO} |" in logs[0] and f"| {ALGO} |" not in logs[1]  # process 0 reports

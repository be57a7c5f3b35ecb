"""What the command-line and run-folder test files share (not a test file): copying a shared
run folder before changing it, and reading one. The tiny studies' arguments (``conftest.py``'s
``full_run`` and ``trained`` train them once a session) are in ``tiny_configs.py``."""

import csv
import shutil
from pathlib import Path

import numpy as np

from rcmdp_jax import envs
from rcmdp_jax.kernel_text import kernel_names

RUN_PY = Path(__file__).resolve().parent.parent / "experiments" / "run.py"  # the command users call
TOY = Path(__file__).resolve().parent / "feasibility_toy.py"  # a toy environment for rcmdp feasibility
FEAS = ["feasibility", "--seeds", "2", "--steps", "2000", "--n-test", "2"]  # its tiny check

def _load(out, algo, name):
    return dict(np.load(Path(out) / "cartpole" / algo / name))


def _copy(run, tmp_path) -> Path:
    """A copy of a shared run folder to change (the shared one stays as it is for the other tests)."""
    out = tmp_path / "copy"
    shutil.copytree(run, out)
    return out


def _assert_same_run(a_dir, b_dir, algos):
    for algo in algos:
        a, b = _load(a_dir, algo, "test_results.npz"), _load(b_dir, algo, "test_results.npz")
        np.testing.assert_array_equal(a["V"], b["V"])
        np.testing.assert_array_equal(a["C"], b["C"])
        ma, mb = _load(a_dir, algo, "train_metrics.npz"), _load(b_dir, algo, "train_metrics.npz")
        for key in ma:
            np.testing.assert_array_equal(ma[key], mb[key])


def _snapshot(root: Path) -> dict:
    """Every file under ``root``: its bytes (what a refused command must leave as it was)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line(capsys, *words) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


def read_csv(path):
    """``(header, rows)`` of a CSV file."""
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    return lines[0], lines[1:]


def column_values(metrics, column, env="cartpole"):
    """The npz values of a ``train_metrics.csv`` column of a run on ``env`` (the log's
    ``training_log.columns``: its metric and the entry of its trailing axes, flattened),
    ``[seeds, iterations]``."""
    from rcmdp_jax.study import training_log

    xi, lam = np.shape(metrics["xi"]), np.shape(metrics.get("lam", np.zeros((1, 1))))
    cols = training_log.columns(metrics, kernel_names(env, xi[2:]), envs.cost_names(env, lam[-1]) if len(lam) > 2 else ())
    name, j = next((m, j) for c, m, j in cols if c == column)
    values = np.asarray(metrics[name])
    return values if j is None else values.reshape(values.shape[:2] + (-1,))[..., j]


def assert_csv_is_npz(algo_dir: Path) -> list[str]:
    """``train_metrics.csv`` holds every metric of ``train_metrics.npz``, one row per seed and
    iteration, each value the npz's float32 exactly; its header."""
    metrics = dict(np.load(algo_dir / "train_metrics.npz"))
    header, rows = read_csv(algo_dir / "train_metrics.csv")
    n_seeds, n_iter = metrics["lam"].shape[:2]
    assert header[:2] == ["iteration", "seed"] and len(rows) == n_seeds * n_iter
    width = sum(int(np.prod(np.shape(x)[2:])) for x in metrics.values())
    assert len(header) == 2 + width == len(set(header))  # every value of every metric, once
    it, seed = np.array([[int(r[0]), int(r[1])] for r in rows]).T
    for k, column in enumerate(header[2:], start=2):
        got = np.array([float(r[k]) for r in rows], np.float64).astype(np.float32)
        np.testing.assert_array_equal(got, column_values(metrics, column)[seed, it], err_msg=column)
    assert sorted(zip(seed, it)) == [(s, t) for s in range(n_seeds) for t in range(n_iter)]
    return header


def events(folder):
    """``{tag: {step: value}}`` of the scalars in the event files of ``folder``, read with the
    event protobuf (TFRecord: length, its CRC, the record, its CRC)."""
    import struct

    from tensorboardX.proto import event_pb2

    out = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (n,) = struct.unpack("<Q", data[at : at + 8])
            event = event_pb2.Event.FromString(data[at + 12 : at + 12 + n])
            at += 12 + n + 4
            for v in event.summary.value:
                out.setdefault(v.tag, {})[event.step] = v.simple_value
    return out

"""What the command-line and run-folder test files share (not a test file): copying a shared
run folder before changing it, and reading one. The tiny studies' arguments (``conftest.py``'s
``full_run`` and ``trained`` train them once a session) are in ``tiny_configs.py``."""

import csv
import shutil
from pathlib import Path

import numpy as np

RUN_PY = Path(__file__).resolve().parent.parent / "experiments" / "run.py"  # the command users call

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


def column_values(metrics, column, position: int = 0):
    """The npz values of a ``train_metrics.csv`` column (``name``, or ``name/J`` with ``J`` a
    constraint's index or a kernel field's name: the ``position``-th column of ``name``, in the
    flattened order of its trailing axes), ``[seeds, iterations]``."""
    name, _, j = column.partition("/")
    if not j:
        return metrics[name]
    values = metrics[name]
    return values.reshape(values.shape[:2] + (-1,))[..., position]


def assert_csv_is_npz(algo_dir: Path) -> list[str]:
    """``train_metrics.csv`` holds every metric of ``train_metrics.npz``, one row per seed and
    iteration, each value the npz's float32 exactly; its header."""
    metrics = dict(np.load(algo_dir / "train_metrics.npz"))
    header, rows = read_csv(algo_dir / "train_metrics.csv")
    n_seeds, n_iter = metrics["lam"].shape[:2]
    assert header[:2] == ["iteration", "seed"] and len(rows) == n_seeds * n_iter
    assert {c.partition("/")[0] for c in header[2:]} == set(metrics)  # every metric, and only those
    it, seed = np.array([[int(r[0]), int(r[1])] for r in rows]).T
    seen: dict[str, int] = {}
    for k, column in enumerate(header[2:], start=2):
        got = np.array([float(r[k]) for r in rows], np.float64).astype(np.float32)
        name = column.partition("/")[0]
        position = seen[name] = seen.get(name, -1) + 1
        np.testing.assert_array_equal(got, column_values(metrics, column, position)[seed, it], err_msg=column)
    assert sorted(zip(seed, it)) == [(s, t) for s in range(n_seeds) for t in range(n_iter)]
    return header

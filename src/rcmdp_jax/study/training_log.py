"""The training metrics as files a person reads while a run trains: per environment and
algorithm, ``train_metrics.csv`` (one row per seed and iteration; always) and TensorBoard
event files (``tensorboard/seed_S/``, written with tensorboardX when it is installed),
both written after each training chunk. ``train_metrics.npz`` stays the record the report
reads; when an algorithm's training ends, its CSV is written again whole from the
metrics the npz gets, so that the two hold the same numbers.

Columns (docs/cli.md, "Training metrics"): ``iteration`` (0-based), ``seed`` (0 ..
seeds-1), then every metric of ``train_metrics.npz`` in its order: a per-iteration number
as its name, a per-constraint one as ``NAME/J`` (``c_hat/0``: constraint J, 0-based), the
kernel as ``xi/FIELD`` (the run report's field names; ``xi/I`` where the environment names
none); each value with 9 significant digits, so a float32 reads back exactly. The event
files hold the same names as scalar tags, one event per seed and iteration, step =
iteration (NaN, the training curve between its points, left out)."""

from __future__ import annotations

import csv
import io
import shutil

import numpy as np

from rcmdp_jax.study.run_folder import RunFolder, write_text

CSV_NAME = "train_metrics.csv"
TB_DIR = "tensorboard"
INSTALL = "pip install 'rcmdp_jax[tensorboard]'"


def tensorboard_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorboardX") is not None


def columns(metrics: dict, field_names) -> list[tuple[str, str, int | None]]:
    """``(column, metric, entry)`` for each value of an iteration (``entry``: the index into a
    metric's last axis, None for a number)."""
    out = []
    for name, x in metrics.items():
        x = flat(np.asarray(x))
        if x.ndim == 2:  # [seeds, iterations]
            out.append((name, name, None))
            continue
        labels = list(field_names) if name == "xi" and len(field_names) == x.shape[-1] else None
        labels = [str(i) if lb.startswith("xi[") else lb for i, lb in enumerate(labels)] if labels else None
        out += [(f"{name}/{labels[j] if labels else j}", name, j) for j in range(x.shape[-1])]
    return out


def flat(x: np.ndarray) -> np.ndarray:
    """A metric ``[seeds, iterations, ...]`` with its trailing axes as one (a kernel of several
    axes, Inventory 3-D's ``xi [3, 2]``, gives a column per entry, in C order)."""
    return x if x.ndim <= 3 else x.reshape(x.shape[:2] + (-1,))


def table(metrics: dict, cols) -> np.ndarray:
    """The values of ``cols`` as one array ``[seeds, iterations, columns]`` (float64: every
    float32 metric exactly)."""
    arrays = {name: flat(np.asarray(x)) for name, x in metrics.items()}
    return np.stack([arrays[name] if j is None else arrays[name][..., j] for _, name, j in cols], -1).astype(np.float64)


def csv_lines(metrics: dict, cols, first_iteration: int = 0, seeds=None, header: bool = False) -> str:
    """CSV text of ``metrics`` (leaves ``[seeds, iterations, ...]``), a row per seed and
    iteration, seed-major; each value with 9 significant digits (a float32 exactly)."""
    values = table(metrics, cols)
    n_seeds, n_iter = values.shape[:2]
    seeds = np.arange(n_seeds) if seeds is None else np.asarray(seeds)
    index = np.stack(np.meshgrid(seeds, first_iteration + np.arange(n_iter), indexing="ij"), -1)[..., ::-1]
    buf = io.StringIO()
    if header:
        csv.writer(buf, lineterminator="\n").writerow(["iteration", "seed", *(c for c, _, _ in cols)])
    rows = np.concatenate([index.reshape(-1, 2), values.reshape(-1, len(cols))], 1)
    np.savetxt(buf, rows, fmt=["%d", "%d"] + ["%.9g"] * len(cols), delimiter=",")
    return buf.getvalue()


class TrainingLog:
    """The CSV and event files of the members ``algos`` of a family of ``env`` (in the
    family's order; ``group``: those this run saves, default all) while they train
    (``chunk``), and their final CSV (``finish``). ``tensorboard``: write event files."""

    def __init__(self, folder: RunFolder, env: str, group, tensorboard: bool, algos=None):
        from rcmdp_jax.kernel_text import kernel_names

        self.folder, self.env, self.tensorboard = folder, env, tensorboard
        self.group, self.algos = list(group), list(group if algos is None else algos)
        self.kernel_names = lambda shape: kernel_names(env, shape)
        self.cols: dict = {}
        self.writers: dict = {}
        self.written: dict = {}  # {(algo, seed): iterations in the event files}
        for algo in self.algos:  # trained again from the start: the files of an earlier try go
            d = folder.algo_dir(env, algo)
            (d / CSV_NAME).unlink(missing_ok=True)
            shutil.rmtree(d / TB_DIR, ignore_errors=True)

    def _cols(self, algo: str, metrics: dict):
        if algo not in self.cols:
            xi = metrics.get("xi")
            names = self.kernel_names(np.shape(xi)[2:]) if xi is not None and np.ndim(xi) > 2 else ()
            self.cols[algo] = columns(metrics, names)
        return self.cols[algo]

    def chunk(self, member: int, metrics: dict, first_iteration: int, seeds=None) -> None:
        """Iterations ``first_iteration ..`` of member ``member``'s seeds ``seeds`` (default
        all): ``metrics`` leaves ``[seeds, iterations, ...]`` (host arrays)."""
        algo = self.group[member]
        if algo not in self.algos:
            return
        cols = self._cols(algo, metrics)
        path = self.folder.algo_dir(self.env, algo) / CSV_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        text = csv_lines(metrics, cols, first_iteration, seeds, header=not path.exists())
        with open(path, "a", newline="") as f:
            f.write(text)
        self._events(algo, metrics, first_iteration, seeds)

    def _events(self, algo: str, metrics: dict, first_iteration: int, seeds=None) -> None:
        """One event per seed and iteration holding every column's scalar (NaN left out)."""
        if not self.tensorboard:
            return
        from tensorboardX import SummaryWriter
        from tensorboardX.proto.summary_pb2 import Summary

        cols = self._cols(algo, metrics)
        values = table(metrics, cols)
        for s_i, s in enumerate(range(values.shape[0]) if seeds is None else seeds):
            if (algo, s) not in self.writers:
                logdir = self.folder.algo_dir(self.env, algo) / TB_DIR / f"seed_{s}"
                self.writers[algo, s] = SummaryWriter(str(logdir), flush_secs=3600)
            w = self.writers[algo, s]._get_file_writer()
            for t, row in enumerate(values[s_i]):
                tags = [Summary.Value(tag=c, simple_value=x) for (c, _, _), x in zip(cols, row.tolist()) if x == x]
                w.add_summary(Summary(value=tags), first_iteration + t)
            w.flush()
            self.written[algo, s] = first_iteration + values.shape[1]

    def finish(self, algo: str, metrics: dict) -> None:
        """``algo`` trained: its CSV written whole from ``metrics`` (what ``train_metrics.npz``
        holds), the event files completed (the iterations a chunk did not write: a run of
        several processes writes them all here) and closed."""
        text = csv_lines(metrics, self._cols(algo, metrics), header=True)
        write_text(self.folder.algo_dir(self.env, algo) / CSV_NAME, text)
        n_seeds = next(iter(metrics.values())).shape[0]
        for s in range(n_seeds):
            done = self.written.get((algo, s), 0)
            rest = {k: np.asarray(v)[s : s + 1, done:] for k, v in metrics.items()}
            if next(iter(rest.values())).shape[1]:
                self._events(algo, rest, done, [s])
            if (w := self.writers.pop((algo, s), None)) is not None:
                w.close()

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
        self.writers.clear()

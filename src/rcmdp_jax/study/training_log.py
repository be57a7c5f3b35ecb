"""The training log written after each chunk: per algorithm ``train_metrics.csv`` (a row per seed and iteration, 9
significant digits: a float32 reads back exactly) and tensorboardX's event files (``tensorboard/seed_S/``, no NaN)."""

from __future__ import annotations

import csv
import io
import shutil

import numpy as np

from rcmdp_jax import envs
from rcmdp_jax.atomic import write_text
from rcmdp_jax.kernel_text import kernel_names

# each metric's name in the log: ``{c}`` a constraint's name, ``{f}`` a kernel field's
NAMES = {
    "episode_return": "return/episode", "episode_disc_return": "return/episode_discounted",
    "eval_return": "return/eval", "episodes_completed": "rollout/episodes_completed",
    "episode_costs": "cost/{c}/episode_C", "episode_ep_cost": "cost/{c}/ep_cost",
    "eval_costs": "cost/{c}/eval_C", "eval_ep_cost": "cost/{c}/eval_ep_cost", "c_hat": "cost/{c}/c_hat",
    "margin": "cost/{c}/margin", "lam": "lambda/{c}", "lam_tilde": "lambda_used/{c}", "dual_updates": "dual/updates",
    "policy_steps": "steps/policy", "dual_steps": "steps/dual", "ltma_steps": "steps/robust_method",
    "policy_loss": "update/policy_loss", "critic_loss": "update/critic_loss", "approx_kl": "update/approx_kl",
    "alpha": "update/alpha", "n_updates": "update/n_updates", "policy_epochs": "update/policy_epochs",
    "xi": "kernel/{f}", "active": "run/active", "valid_input": "run/valid_input",
}  # fmt: skip
CSV_NAME = "train_metrics.csv"


def flat(x: np.ndarray) -> np.ndarray:
    """A metric ``[seeds, iterations, ...]`` with its trailing axes as one (C order)."""
    return x if x.ndim <= 3 else x.reshape(x.shape[:2] + (-1,))


def columns(metrics: dict, field_names, cost_names=()) -> list[tuple[str, str, int | None]]:
    """``(column, metric, entry)`` per value of an iteration (``entry``: the index into its last axis, or None)."""
    out = []
    for name, x in metrics.items():
        x = flat(np.asarray(x))
        pattern = NAMES.get(name, name + "/{c}")
        if x.ndim == 2:  # [seeds, iterations]
            out.append((pattern.replace("/{c}", "").replace("/{f}", ""), name, None))
            continue
        given = field_names if name == "xi" else cost_names
        labels = [str(lb) for lb in given] if len(given) == x.shape[-1] else [str(j) for j in range(x.shape[-1])]
        labels = [str(i) if lb.startswith(("xi[", "C_")) else lb.replace("/", " per ") for i, lb in enumerate(labels)]
        out += [(pattern.format(c=labels[j], f=labels[j]), name, j) for j in range(x.shape[-1])]
    return sorted(out, key=lambda col: col[0].split("/")[0])  # by section (cost, lambda, return, ...), stable


def table(metrics: dict, cols) -> np.ndarray:
    """The values of ``cols`` as one float64 array ``[seeds, iterations, columns]``."""
    arrays = {name: flat(np.asarray(x)) for name, x in metrics.items()}
    return np.stack([arrays[name] if j is None else arrays[name][..., j] for _, name, j in cols], -1).astype(np.float64)


def csv_lines(metrics: dict, cols, first_iteration: int = 0, seeds=None, header: bool = False) -> str:
    """CSV text of ``metrics``, a row per seed and iteration, seed-major."""
    values = table(metrics, cols)
    seeds = np.arange(values.shape[0]) if seeds is None else np.asarray(seeds)
    index = np.stack(np.meshgrid(seeds, first_iteration + np.arange(values.shape[1]), indexing="ij"), -1)[..., ::-1]
    buf = io.StringIO()
    if header:
        csv.writer(buf, lineterminator="\n").writerow(["iteration", "seed", *(c for c, _, _ in cols)])
    rows = np.concatenate([index.reshape(-1, 2), values.reshape(-1, len(cols))], 1)
    np.savetxt(buf, rows, fmt=["%d", "%d"] + ["%.9g"] * len(cols), delimiter=",")
    return buf.getvalue()


class TrainingLog:
    """The log of a family's members ``algos`` (default all) while they train; ``dirs``: ``{algo: folder}`` in order."""

    def __init__(self, dirs: dict, env: str, tensorboard: bool, algos=None):
        self.dirs, self.env, self.tensorboard = dirs, env, tensorboard
        self.group, self.algos = list(dirs), list(dirs if algos is None else algos)
        self.cols, self.writers, self.written = {}, {}, {}  # written: {(algo, seed): iterations in event files}
        for algo in self.algos:  # trained again from the start: the files of an earlier try go
            (dirs[algo] / CSV_NAME).unlink(missing_ok=True)
            shutil.rmtree(dirs[algo] / "tensorboard", ignore_errors=True)

    def _cols(self, algo: str, metrics: dict):
        if algo not in self.cols:  # the constraints by their spec's names where it names each, else numbered
            xi, lam = np.shape(metrics.get("xi", 0)), np.shape(metrics.get("lam", 0))
            names = kernel_names(self.env, xi[2:]) if len(xi) > 2 else ()
            self.cols[algo] = columns(metrics, names, envs.cost_names(self.env, lam[-1]) if len(lam) > 2 else ())
        return self.cols[algo]

    def chunk(self, member: int, metrics: dict, first_iteration: int, seeds=None) -> None:
        """Iterations ``first_iteration ..`` of member ``member``'s ``seeds``: leaves ``[seeds, iterations, ...]``."""
        algo = self.group[member]
        if algo not in self.algos:
            return
        path = self.dirs[algo] / CSV_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", newline="") as f:
            f.write(csv_lines(metrics, self._cols(algo, metrics), first_iteration, seeds, header=not path.exists()))
        self._events(algo, metrics, first_iteration, seeds)

    def _events(self, algo: str, metrics: dict, first_iteration: int, seeds=None) -> None:
        """One event per seed and iteration holding every column's scalar (NaN left out)."""
        if not self.tensorboard:
            return
        from tensorboardX import FileWriter
        from tensorboardX.proto.summary_pb2 import Summary

        cols = self._cols(algo, metrics)
        values = table(metrics, cols)
        ran = np.asarray(metrics.get("active", np.ones(values.shape[:2]))).reshape(values.shape[:2]) > 0
        steps = np.asarray(metrics["policy_steps"]).reshape(values.shape[:2]) if "policy_steps" in metrics else None
        for s_i, s in enumerate(range(values.shape[0]) if seeds is None else seeds):
            if (w := self.writers.get((algo, s))) is None:
                w = self.writers[algo, s] = FileWriter(self.dirs[algo] / "tensorboard" / f"seed_{s}", flush_secs=3600)
            for t in np.flatnonzero(ran[s_i]).tolist():
                it = first_iteration + t
                tags = [Summary.Value(tag="iteration", simple_value=it)]
                tags += [Summary.Value(tag=c, simple_value=x) for (c, _, _), x in zip(cols, values[s_i, t].tolist())
                         if x == x]  # fmt: skip
                w.add_summary(Summary(value=tags), it if steps is None else int(steps[s_i, t]))
            w.flush()
            self.written[algo, s] = first_iteration + values.shape[1]

    def finish(self, algo: str, metrics: dict) -> None:
        """``algo`` trained: its CSV written whole from ``metrics``, its event files completed and closed."""
        write_text(self.dirs[algo] / CSV_NAME, csv_lines(metrics, self._cols(algo, metrics), header=True))
        for s in range(next(iter(metrics.values())).shape[0]):
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

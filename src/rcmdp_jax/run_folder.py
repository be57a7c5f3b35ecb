"""The run folder: the contract between the runner (which writes it) and the report
(which reads it). ``run.json`` is the plan; per environment and algorithm,
``train_metrics.npz``, ``timing.json``, ``checkpoint/``, ``test_results.npz`` (with the
test kernels' ``xi``, so a report needs no environment), ``diverged.json`` and
``worst_case.npz``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from rcmdp_jax.divergence import nonfinite_episodes
from rcmdp_jax.plan import UsageError

PLAN_KEYS = ("envs", "algos", "seeds", "seed", "vmap", "configs", "n_test")


def kept_seeds(test: dict) -> np.ndarray:
    """The seeds of a ``test_results.npz`` that count: not diverged in training and with
    finite test episodes (the flag is also recomputed for results written before it)."""
    keep = ~test["diverged"] if "diverged" in test else np.ones(test["V"].shape[0], bool)
    return keep & ~nonfinite_episodes(test["V"], test["C"])


class DamagedFile(ValueError):
    """A result file of the run folder that cannot be read (truncated, overwritten)."""


def readable(path: Path) -> bool:
    try:
        with np.load(path) as z:
            for name in z.files:
                z[name]
    except Exception:  # missing, truncated or not an npz
        return False
    return True


def load_npz(path: Path) -> dict:
    """All arrays of ``path``, or ``DamagedFile`` naming it."""
    try:
        with np.load(path) as z:
            return {name: z[name] for name in z.files}
    except Exception as err:
        raise DamagedFile(f"{path} cannot be read ({type(err).__name__}); run.py --resume re-creates it from the "
                          "checkpoint") from None  # fmt: skip


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def plan_problem(plan: dict) -> str:
    """What makes a ``run.json`` unusable ("" if nothing): wrong types, or configs that do
    not match its environments and algorithms."""

    def names(v):
        return isinstance(v, list) and v and all(isinstance(x, str) for x in v)

    def count(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1

    if not names(plan["envs"]) or not names(plan["algos"]):
        return "envs and algos must be lists of names"
    if not count(plan["seeds"]) or not isinstance(plan["seed"], int) or not isinstance(plan["vmap"], bool):
        return "seeds must be a positive integer, seed an integer, vmap true or false"
    if plan["n_test"] is not None and not count(plan["n_test"]):
        return "n_test must be null or a positive integer"
    configs = plan["configs"]
    if not isinstance(configs, dict) or any(
        not isinstance(configs.get(e), dict) or set(configs[e]) != set(plan["algos"]) for e in plan["envs"]
    ):
        return "configs must hold one config per environment and algorithm"
    return ""


def restore_envs(plan: dict, flag: str) -> None:
    """A user environment of the plan registered again in this process (``user_env.restore``)."""
    from rcmdp_jax.user_env import restore

    try:
        restore(plan)
    except ValueError as err:
        raise UsageError(f"{flag}: {err}") from None


def _named_dir(parent: Path, name: str) -> Path:
    """The folder of an environment or algorithm: its name in letters, digits, ``-``,
    ``_`` and ``.`` (``user_env.folder_name``; run.json keeps the full name), or the
    full name where a run folder written before that has it."""
    from rcmdp_jax.user_env import folder_name

    safe, legacy = parent / folder_name(name), parent / name
    return legacy if legacy != safe and legacy.exists() and not safe.exists() else safe


class RunFolder:
    """Paths, readers and writers of one run folder."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    # ---------------------------------------------------------------- paths
    def env_dir(self, env: str) -> Path:
        return _named_dir(self.root, env)

    def algo_dir(self, env: str, algo: str) -> Path:
        return _named_dir(self.env_dir(env), algo)

    def ckpt_dir(self, env: str, algo: str) -> Path:
        return self.algo_dir(env, algo) / "checkpoint"

    def tested(self, env: str, algo: str) -> bool:
        """Whether ``algo``'s test results and training metrics are there and readable."""
        d = self.algo_dir(env, algo)
        return readable(d / "test_results.npz") and readable(d / "train_metrics.npz")

    # ---------------------------------------------------------------- the plan
    def read_plan(self, flag: str) -> dict:
        """``run.json``, or a ``UsageError`` naming what is wrong (``flag``: the option
        that asked for it)."""
        path = self.root / "run.json"
        if not path.exists():
            raise UsageError(f"{flag}: {self.root} is not a run folder (no run.json)")
        try:
            plan = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise UsageError(f"{flag}: cannot read {path}: {err}") from None
        missing = [k for k in PLAN_KEYS if k not in plan] if isinstance(plan, dict) else list(PLAN_KEYS)
        if missing:
            raise UsageError(f"{flag}: {path} is not a run.json of this runner (missing {', '.join(missing)})")
        if problem := plan_problem(plan):
            raise UsageError(f"{flag}: {path} is inconsistent ({problem}); it was edited or damaged")
        restore_envs(plan, flag)
        return plan

    def check_seeds(self, plan: dict, flag: str) -> None:
        """The saved training metrics must have ``plan["seeds"]`` seeds (an edited run.json
        would otherwise fail after a restore, or set a good checkpoint aside)."""
        for env in plan["envs"]:
            for algo in plan["algos"]:
                path = self.algo_dir(env, algo) / "train_metrics.npz"
                try:
                    n = np.load(path)["active"].shape[0] if path.exists() else plan["seeds"]
                except Exception:  # unreadable: the resume re-creates it from the checkpoint
                    continue
                if n != plan["seeds"]:
                    raise UsageError(f"{flag}: run.json says {plan['seeds']} seed(s) but {env}/{algo} was trained "
                                     f"with {n}; it was edited: restore its seeds")  # fmt: skip

    def lock(self):
        """Take the folder's lock (``.lock`` holding this process's PID) and return the
        function that releases it: a second process on the same folder is refused; a lock
        whose process no longer runs (killed) is taken over."""
        path = self.root / ".lock"
        for _ in range(3):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    pid = int(path.read_text().strip() or 0)
                except (OSError, ValueError):
                    pid = 0
                if pid and pid != os.getpid() and _running(pid):
                    raise UsageError(f"{self.root} is in use by another run (PID {pid}); wait for it to end") from None
                path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return lambda: path.unlink(missing_ok=True)
        raise UsageError(f"{self.root}: cannot take its lock {path}")

    def create(self, plan: dict) -> None:
        """Make the folder (it must not exist) and write ``run.json``."""
        try:
            self.root.mkdir(parents=True)
            (self.root / "run.json").write_text(json.dumps(plan, indent=2))
        except OSError as err:
            raise UsageError(f"--out {self.root}: cannot create the run folder: {err.strerror or err}") from None

    # ---------------------------------------------------------------- writers
    def save_training(self, env: str, algo: str, metrics: dict, timing: dict | None = None) -> None:
        d = self.algo_dir(env, algo)
        d.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(d / "train_metrics.npz", **metrics)
        if timing is not None:
            (d / "timing.json").write_text(json.dumps(timing))

    def save_test(self, env: str, algo: str, V, C, bound, diverged, levels, test_xi) -> None:
        d = self.algo_dir(env, algo)
        np.savez_compressed(d / "test_results.npz", V=V, C=C, bound=bound, diverged=diverged, levels=levels,
                            test_xi=test_xi)  # fmt: skip
        (d / "diverged.json").write_text(json.dumps({"seeds": np.flatnonzero(diverged).tolist()}))

    def save_worst_case(self, env: str, algo: str, found: dict) -> None:
        flat = {f"{name}/{field}": value for name, d in found.items() for field, value in d.items()}
        np.savez_compressed(self.algo_dir(env, algo) / "worst_case.npz", **flat)

    # ---------------------------------------------------------------- readers
    def load_results(self, env: str, algos, bounds: dict | None = None, seeds: dict | None = None):
        """``(results {algo: (V, C) of the kept seeds, or None}, training metrics, levels)``;
        fills ``bounds`` (if given) with each algorithm's per-episode state-bound flags and
        ``seeds`` with ``(seeds used, seeds trained)``."""
        results, metrics, levels = {}, {}, None
        for algo in algos:
            d = self.algo_dir(env, algo)
            if (d / "test_results.npz").exists():
                z = load_npz(d / "test_results.npz")
                keep = kept_seeds(z)
                results[algo] = (z["V"][keep], z["C"][keep]) if keep.any() else None
                levels = z["levels"]
                if bounds is not None and keep.any():
                    bounds[algo] = (z["bound"] if "bound" in z else np.zeros_like(z["V"]))[keep]
                if seeds is not None:
                    seeds[algo] = (int(keep.sum()), int(keep.size))
            if (d / "train_metrics.npz").exists():
                metrics[algo] = load_npz(d / "train_metrics.npz")
        return results, metrics, levels

    def load_worst_case(self, env: str, algo: str) -> tuple[dict, np.ndarray | None]:
        """``({objective: {field: per kept seed}}, the test kernels' xi or None)``."""
        z = load_npz(self.algo_dir(env, algo) / "worst_case.npz")
        t = load_npz(self.algo_dir(env, algo) / "test_results.npz")
        keep = kept_seeds(t)
        nested: dict = {}
        for key in z:
            name, field = key.split("/")
            nested.setdefault(name, {})[field] = z[key][keep]
        return nested, (t["test_xi"] if "test_xi" in t else None)

"""The run folder, written by the runner and read by the report: ``run.json`` (the plan), per
environment and algorithm its results and ``checkpoint/``, and its lock ``.lock`` (``take``)."""

from __future__ import annotations

import errno
import io
import json
import os
import stat
from pathlib import Path

import numpy as np

from rcmdp_jax import envs
from rcmdp_jax.atomic import edited, write_bytes, write_text
from rcmdp_jax.divergence import nonfinite_episodes
from rcmdp_jax.study import user_code
from rcmdp_jax.study.run_plan import REQUIRED_KEYS, Plan, RunFolderError, folder_name, plan_problem


def kept_seeds(test: dict) -> np.ndarray:
    """The seeds of a ``test_results.npz`` that count: not diverged in training, with finite test episodes."""
    keep = ~test["diverged"] if "diverged" in test else np.ones(test["V"].shape[0], bool)
    return keep & ~nonfinite_episodes(test["V"], test["C"])


class DamagedFile(ValueError):
    """A result file of the run folder that cannot be read (truncated, overwritten)."""


def load_npz(path: Path, strict: bool = True) -> dict | None:
    """All arrays of ``path``; where it cannot be read, ``DamagedFile`` naming it (not ``strict``: None)."""
    try:
        with np.load(path) as z:
            return {name: z[name] for name in z.files}
    except Exception as err:  # missing, truncated or not an npz
        if not strict:
            return None
        raise DamagedFile(f"{path} cannot be read ({type(err).__name__}); run.py --resume re-creates it from the "
                          "checkpoint") from None  # fmt: skip


def _save_npz(path: Path, **arrays) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    write_bytes(path, buf.getvalue())


def _saved_problems(d: Path, plan: Plan, env: str, where: str):
    """``(of the results file alone, what)`` for each thing saved in ``d`` (``where``) that contradicts ``plan``."""
    metrics, test = (load_npz(d / name, strict=False) for name in ("train_metrics.npz", "test_results.npz"))
    try:
        seed = json.loads((d / "timing.json").read_text()).get("seed")  # a folder of an older version has none
    except (OSError, ValueError, AttributeError):
        seed = None
    if metrics is not None and "active" in metrics and metrics["active"].shape[0] != plan.seeds:
        yield False, f"run.json says {plan.seeds} seed(s) but {where} was trained with {metrics['active'].shape[0]}"
    if seed is None and test is not None and "seed" in test:
        seed = int(test["seed"])
    if seed is not None and seed != plan.seed:
        yield False, f"run.json says seed {plan.seed} but {where} was trained with seed {seed}"
    if test is None:
        return
    if "V" in test and test["V"].ndim == 4 and test["V"].shape[3] != (n := plan.n_test or envs.spec(env).n_test):
        yield False, (f"run.json says {n} test episode(s) per kernel (n_test) but {where} was tested with "
                      f"{test['V'].shape[3]}")  # fmt: skip
    # the arrays of one run: V [seeds, levels, kernels, episodes], C the same and a constraint axis, the flags per seed
    V, C, file = test.get("V"), test.get("C"), f"{where}/test_results.npz"
    if V is None or C is None:
        yield True, f"{file} lacks {'V' if V is None else 'C'}"
    elif V.ndim != 4 or V.shape[0] != plan.seeds:
        yield True, f"{file} holds V of shape {V.shape}, not ({plan.seeds} seeds, levels, kernels, episodes)"
    elif C.shape[:4] != V.shape or C.ndim != 5:
        yield True, f"{file} holds C of shape {C.shape}, not V's {V.shape} and a constraint axis"
    for name in ("diverged", "bound"):  # (the kernels' shapes: ``load_results`` compares the algorithms')
        if name in test and test[name].shape[:1] != (plan.seeds,):
            yield True, f"{file} holds {name} of shape {test[name].shape}, not one per seed ({plan.seeds})"


class RunFolder:
    """Paths, readers and writers of one run folder."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    # an environment's and an algorithm's folder: its name in letters, digits, -, _ and . (run.json keeps it whole)
    def env_dir(self, env: str) -> Path:
        return self.root / folder_name(env)

    def algo_dir(self, env: str, algo: str) -> Path:
        return self.env_dir(env) / folder_name(algo)

    def ckpt_dir(self, env: str, algo: str) -> Path:
        return self.algo_dir(env, algo) / "checkpoint"

    def trained(self, env: str, algo: str) -> bool:
        """Whether ``algo`` has a finished checkpoint."""
        from rcmdp_jax import checkpoint

        return checkpoint.exists(self.ckpt_dir(env, algo))

    def tested(self, env: str, algo: str, searched: bool = False) -> bool:
        """Whether ``algo``'s test results and training metrics (``searched``: its search) are readable."""
        names = ("test_results.npz", "train_metrics.npz") + (("worst_case.npz",) if searched else ())
        return all(load_npz(self.algo_dir(env, algo) / n, strict=False) is not None for n in names)

    def read_plan(self, flag: str) -> Plan:
        """``run.json`` with its plug-ins and user environments loaded again, or a ``RunFolderError``."""
        path = self.root / "run.json"
        try:
            plan = json.loads(path.read_text())
        except (FileNotFoundError, NotADirectoryError):
            raise RunFolderError(f"{flag}: {self.root} is not a run folder (no run.json)") from None
        except (OSError, ValueError) as err:
            raise RunFolderError(f"{flag}: cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
        if missing := [k for k in REQUIRED_KEYS if not isinstance(plan, dict) or k not in plan]:
            raise RunFolderError(f"{flag}: {path} is not a run.json of this runner (missing {', '.join(missing)})")
        try:
            user_code.restore_plugins(plan)  # first: the algorithms' names and configs need them
            user_code.restore_envs(plan)  # before the checks: they know a user environment by name then
        except ValueError as err:
            raise RunFolderError(f"{flag}: {err}") from None
        if problem := plan_problem(plan):
            raise RunFolderError(f"{flag}: {path} is inconsistent ({problem}); it was edited or damaged")
        return Plan.from_dict(plan)

    def open(self, flag: str, results: bool = True, rewrites: bool = True) -> Plan:
        """The one check of a run folder before a command uses it: ``read_plan``, every saved file against it
        (``results``: shapes too), no report file edited (``rewrites``). Its plan, or one ``RunFolderError``."""
        plan = self.read_plan(flag)
        if rewrites and (changed := edited(self.env_dir(e) for e in plan.envs)):
            raise RunFolderError(f"{flag}: {changed[0]} was edited since the report wrote it, and the report "
                                 "would write it again: move it away to keep the edit")  # fmt: skip
        for env, algo in [(e, a) for e in plan.envs for a in plan.algos]:
            for of_results, problem in _saved_problems(self.algo_dir(env, algo), plan, env, f"{env}/{algo}"):
                if not of_results:
                    raise RunFolderError(f"{flag}: {problem}; it was edited: restore it")
                if results:  # --eval-only re-creates the results: not refused there
                    raise RunFolderError(f"{flag}: {problem}: it is damaged or another run's; run.py --eval-only "
                                         f"{self.root} re-creates it from the checkpoint")  # fmt: skip
        return plan

    def check_checkpoints(self, plan: Plan, keys, groups: dict, flag: str = "") -> None:
        """``RunFolderError`` unless each finished checkpoint of ``groups`` (``{env: [[algo]]}``) fits its config."""
        from rcmdp_jax import checkpoint, make_train

        for env, group in [(e, g) for e, env_groups in groups.items() for g in env_groups]:
            if done := [a for a in group if self.trained(env, a)]:
                abstract = checkpoint.abstract_result(make_train(plan.configs[env][done[0]]), keys)
                if bad := [a for a in done if checkpoint.matches(self.ckpt_dir(env, a), abstract) is False]:
                    raise RunFolderError(f"{flag}{self.root / 'run.json'}: the config of {env}/{bad[0]} does not "
                                         "match its checkpoint (other array shapes); it was edited: restore "
                                         "it")  # fmt: skip

    def create(self, plan: Plan) -> None:
        """Make the folder (it must not exist) and write ``run.json``."""
        try:
            self.root.mkdir(parents=True)
        except OSError as err:
            raise RunFolderError(f"--out {self.root}: cannot create the run folder: {err.strerror or err}") from None
        try:
            write_text(self.root / "run.json", plan.to_json())
        except BaseException as err:  # a full disk, Ctrl-C: the empty folder goes too, so a re-run is not blocked
            self.root.rmdir()
            if isinstance(err, OSError):
                raise RunFolderError(f"--out {self.root}: cannot write run.json: {err.strerror or err}") from None
            raise

    def save_training(self, env: str, algo: str, metrics: dict, timing: dict | None = None) -> None:
        d = self.algo_dir(env, algo)
        d.mkdir(parents=True, exist_ok=True)
        _save_npz(d / "train_metrics.npz", **metrics)
        if timing is not None:
            write_text(d / "timing.json", json.dumps(timing))

    def save_test(self, env: str, algo: str, V, C, bound, diverged, levels, test_xi, seed: int, **kept) -> None:
        """``test_results.npz``; ``kept``: the episode costs ``EpCost``, ``gamma_c`` and ``horizon``."""
        d = self.algo_dir(env, algo)
        arrays = dict(V=V, C=C, bound=bound, diverged=diverged, levels=levels, test_xi=test_xi, seed=np.int64(seed))
        _save_npz(d / "test_results.npz", **arrays, **kept)
        write_text(d / "diverged.json", json.dumps({"seeds": np.flatnonzero(diverged).tolist()}))

    def save_worst_case(self, env: str, algo: str, found: dict) -> None:
        flat = {f"{name}/{field}": value for name, d in found.items() for field, value in d.items()}
        _save_npz(self.algo_dir(env, algo) / "worst_case.npz", **flat)

    def load_results(self, env: str, algos, bounds: dict, seeds: dict, costs: dict):
        """``(results {algo: (V, C) of the kept seeds, or None}, training metrics, levels)``; fills
        ``bounds`` (state-bound flags), ``seeds`` (used, trained) and ``costs`` (EpCost, ...)."""
        results, metrics, levels, first = {}, {}, None, None
        for algo in algos:
            d = self.algo_dir(env, algo)
            if (d / "train_metrics.npz").exists():
                metrics[algo] = load_npz(d / "train_metrics.npz")
            if not (d / "test_results.npz").exists():
                continue
            z = load_npz(d / "test_results.npz")
            first = first or (algo, z["V"].shape[1:])
            if z["V"].shape[1:] != first[1]:  # a file of another run or environment
                raise DamagedFile(f"{d / 'test_results.npz'} holds results of shape {z['V'].shape[1:]} (levels, "
                                  f"kernels, episodes), {first[0]}'s {first[1]}: it is not this run's; run.py "
                                  "--eval-only re-creates it from the checkpoints")  # fmt: skip
            keep, levels = kept_seeds(z), z["levels"]
            results[algo] = (z["V"][keep], z["C"][keep]) if keep.any() else None
            seeds[algo] = (int(keep.sum()), int(keep.size))
            if keep.any():
                bounds[algo] = z["bound"][keep]
            if keep.any() and "EpCost" in z:
                costs[algo] = {"EpCost": z["EpCost"][keep], "gamma_c": z["gamma_c"], "horizon": int(z["horizon"])}
        return results, metrics, levels

    def load_worst_case(self, env: str, algo: str) -> tuple[dict, np.ndarray]:
        """``({objective: {field: per kept seed}}, the test kernels' xi)``."""
        z = load_npz(self.algo_dir(env, algo) / "worst_case.npz")
        t = load_npz(self.algo_dir(env, algo) / "test_results.npz")
        keep, nested = kept_seeds(t), {}
        for key, value in z.items():
            name, field = key.split("/")
            nested.setdefault(name, {})[field] = value[keep]
        return nested, t["test_xi"]


# --- the lock ``.lock``: ``fcntl.flock`` (freed when its process dies) on a file holding the holder's PID;
# never taken through a link (the PID would overwrite its target)
def in_use(root: Path) -> str:
    """The refusal of a folder another process holds, with the PID its lock file holds (``?``: not digits)."""
    try:
        pid = (root / ".lock").read_text()[:20].strip()
    except (OSError, UnicodeDecodeError):
        pid = "?"
    return f"{root} is in use by another run or report (PID {pid if pid.isdigit() else '?'}); wait for it to end"


def take(root: Path):
    """Take ``root``'s lock; the function that releases it, or ``RunFolderError``."""
    import fcntl  # POSIX: imported where used, so that the module imports anywhere

    path = root / ".lock"
    if not os.access(root, os.W_OK | os.X_OK):
        raise RunFolderError(f"{root}: Permission denied (the run folder is not writable by this user)")
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(errno.EINVAL, "not a regular file")
        except OSError as err:
            raise RunFolderError(f"{path}: cannot take the run folder's lock ({err.strerror}); remove it if no "
                                 "run is using the folder") from None  # fmt: skip
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino == os.stat(path).st_ino:  # else released and removed meanwhile: lock anew
                break
        except BlockingIOError:
            os.close(fd)
            raise RunFolderError(in_use(root)) from None
        except FileNotFoundError:
            pass
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())

    def release():
        path.unlink(missing_ok=True)  # while still held: a waiting run then locks a new file
        os.close(fd)

    return release


def holder(root: Path) -> str | None:
    """``in_use`` of ``root`` while a process holds its lock, else None: for a reader that may not take it."""
    import fcntl

    fd = None
    try:
        fd = os.open(root / ".lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return in_use(root)
    except OSError:  # no lock file, a link, or one this user may not read
        pass
    finally:
        if fd is not None:
            os.close(fd)
    return None

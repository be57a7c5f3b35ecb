"""The run folder: the contract between the runner (which writes it) and the report
(which reads it). ``run.json`` is the plan; per environment and algorithm,
``train_metrics.npz``, ``timing.json``, ``checkpoint/``, ``test_results.npz`` (with the
test kernels' ``xi``, so a report needs no environment), ``diverged.json`` and
``worst_case.npz``.

Its lock: ``.lock`` held with ``fcntl.flock`` (atomic; the kernel drops it when its process
dies, so a killed run's lock is free) and holding the PID, which a refused second run or
report names (``take``, ``holder``). Never taken through a link (the PID would overwrite
the file it points to)."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import numpy as np

from rcmdp_jax import envs
from rcmdp_jax.divergence import nonfinite_episodes
from rcmdp_jax.study import user_code
from rcmdp_jax.study.run_plan import REQUIRED_KEYS, Plan, RunFolderError, plan_problem


def kept_seeds(test: dict) -> np.ndarray:
    """The seeds of a ``test_results.npz`` that count: not diverged in training and with
    finite test episodes (a result file without the ``diverged`` flag counts every seed
    as trained)."""
    keep = ~test["diverged"] if "diverged" in test else np.ones(test["V"].shape[0], bool)
    return keep & ~nonfinite_episodes(test["V"], test["C"])


class DamagedFile(ValueError):
    """A result file of the run folder that cannot be read (truncated, overwritten)."""


def load_npz(path: Path) -> dict:
    """All arrays of ``path``, or ``DamagedFile`` naming it."""
    try:
        with np.load(path) as z:
            return {name: z[name] for name in z.files}
    except Exception as err:  # missing, truncated or not an npz
        raise DamagedFile(f"{path} cannot be read ({type(err).__name__}); run.py --resume re-creates it from the "
                          "checkpoint") from None  # fmt: skip


def readable(path: Path) -> bool:
    try:
        load_npz(path)
    except DamagedFile:
        return False
    return True


def write_atomic(path: Path, write) -> None:
    """``write(file)`` into a temporary name beside ``path``, then rename it to ``path``: a
    failed write (a full disk) leaves the old file, or none, never a half-written one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except OSError as err:  # named by the file it was for
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode()))


def save_npz(path: Path, **arrays) -> None:
    write_atomic(path, lambda f: np.savez_compressed(f, **arrays))


def restore_user_code(plan: dict, flag: str) -> None:
    """The plan's plug-in files and modules imported in this process, then its user
    environments registered again (``user_code``); ``RunFolderError`` in one line."""
    try:
        user_code.restore_plugins(plan)  # the plug-ins first: the algorithms' names and configs need them
        user_code.restore_envs(plan)  # a user environment before the checks: they know it by name then
    except ValueError as err:
        raise RunFolderError(f"{flag}: {err}") from None


def _saved_problems(d: Path, plan: Plan, env: str):
    """What in ``d`` (an algorithm's folder) contradicts ``plan``, ``{where}`` for its name."""
    saved = {}
    for name in ("train_metrics.npz", "test_results.npz"):
        try:
            saved[name] = np.load(d / name) if (d / name).exists() else None
        except Exception:  # unreadable: --resume re-creates it from the checkpoint
            saved[name] = None
    try:
        timing = json.loads((d / "timing.json").read_text()) if (d / "timing.json").exists() else {}
    except (OSError, ValueError):
        timing = {}
    if (z := saved["train_metrics.npz"]) is not None and "active" in z and z["active"].shape[0] != plan.seeds:
        yield f"run.json says {plan.seeds} seed(s) but {{where}} was trained with {z['active'].shape[0]}"
    test = saved["test_results.npz"]
    seed = timing.get("seed") if isinstance(timing, dict) else None  # a folder of an older version has none
    if seed is None and test is not None and "seed" in test:
        seed = int(test["seed"])
    if seed is not None and seed != plan.seed:
        yield f"run.json says seed {plan.seed} but {{where}} was trained with seed {seed}"
    if test is not None and "V" in test and test["V"].ndim == 4:
        n_test = plan.n_test or envs.spec(env).n_test
        if test["V"].shape[3] != n_test:
            episodes = test["V"].shape[3]
            yield f"run.json says {n_test} test episode(s) per kernel (n_test) but {{where}} was tested with {episodes}"
    if test is not None and (problem := results_shape_problem(test, plan.seeds)):
        yield RESULTS + problem


RESULTS = "results: "  # a problem of the results file alone (not of run.json): --eval-only re-creates it


def results_shape_problem(test, seeds: int) -> str:
    """What makes the arrays of a ``test_results.npz`` not one run's ("" if nothing): ``V``
    ``[seeds, levels, kernels, episodes]``, ``C`` the same with a constraint axis, ``diverged``
    and ``bound`` one per seed."""
    if any(k not in test for k in ("V", "C")):
        return f"{{where}}/test_results.npz lacks {'V' if 'V' not in test else 'C'}"
    V, C = test["V"], test["C"]
    if V.ndim != 4 or V.shape[0] != seeds:
        return f"{{where}}/test_results.npz holds V of shape {V.shape}, not ({seeds} seeds, levels, kernels, episodes)"
    if C.shape[:4] != V.shape or C.ndim != 5:
        return f"{{where}}/test_results.npz holds C of shape {C.shape}, not V's {V.shape} and a constraint axis"
    for name in ("diverged", "bound"):  # one per seed (the kernels' shapes: ``load_results`` compares the algorithms')
        if name in test and test[name].shape[:1] != (seeds,):
            return f"{{where}}/test_results.npz holds {name} of shape {test[name].shape}, not one per seed ({seeds})"
    return ""


class RunFolder:
    """Paths, readers and writers of one run folder."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    # ---------------------------------------------------------------- paths
    # an environment's and an algorithm's folder: the name in letters, digits, ``-``, ``_`` and
    # ``.`` (``user_code.folder_name``; run.json keeps the full name)
    def env_dir(self, env: str) -> Path:
        return self.root / user_code.folder_name(env)

    def algo_dir(self, env: str, algo: str) -> Path:
        return self.env_dir(env) / user_code.folder_name(algo)

    def ckpt_dir(self, env: str, algo: str) -> Path:
        return self.algo_dir(env, algo) / "checkpoint"

    def tested(self, env: str, algo: str, searched: bool = False) -> bool:
        """Whether ``algo``'s test results and training metrics are there and readable (and,
        with ``searched``, its worst-case search: ``--worst-case``)."""
        d = self.algo_dir(env, algo)
        done = readable(d / "test_results.npz") and readable(d / "train_metrics.npz")
        return done and (not searched or readable(d / "worst_case.npz"))

    # ---------------------------------------------------------------- the plan
    def read_plan(self, flag: str) -> Plan:
        """``run.json``, or a ``RunFolderError`` naming what is wrong (``flag``: the option
        that asked for it)."""
        path = self.root / "run.json"
        try:
            plan = json.loads(path.read_text())
        except (FileNotFoundError, NotADirectoryError):
            raise RunFolderError(f"{flag}: {self.root} is not a run folder (no run.json)") from None
        except OSError as err:
            raise RunFolderError(f"{flag}: cannot read {path}: {err.strerror}") from None
        except ValueError as err:
            raise RunFolderError(f"{flag}: cannot read {path}: {err}") from None
        missing = [k for k in REQUIRED_KEYS if k not in plan] if isinstance(plan, dict) else list(REQUIRED_KEYS)
        if missing:
            raise RunFolderError(f"{flag}: {path} is not a run.json of this runner (missing {', '.join(missing)})")
        restore_user_code(plan, flag)
        if problem := plan_problem(plan):
            raise RunFolderError(f"{flag}: {path} is inconsistent ({problem}); it was edited or damaged")
        return Plan.from_dict(plan)

    def open(self, flag: str, results: bool = True) -> Plan:
        """The one check of a run folder before a command uses it (``--resume``, ``--eval-only``,
        ``rcmdp report``, ``rcmdp eval``, ``load_policy``): ``run.json`` read and checked
        (``read_plan``), then every saved file against it: the seed count of the training
        metrics, the base seed (``timing.json``, ``test_results.npz``), the test episodes per
        kernel and, with ``results``, the results' shapes (an edited run.json would otherwise fail
        after a restore, set a good checkpoint aside, or overwrite results with other numbers).
        The checkpoints' shapes against the configs: ``check_checkpoints``. Its plan, or a
        one-line ``RunFolderError``."""
        plan = self.read_plan(flag)
        for env in plan.envs:
            for algo in plan.algos:
                for problem in _saved_problems(self.algo_dir(env, algo), plan, env):
                    where = f"{env}/{algo}"
                    if not problem.startswith(RESULTS):
                        raise RunFolderError(f"{flag}: {problem.format(where=where)}; it was edited: restore it")
                    if results:  # --eval-only re-creates the results: not refused there
                        raise RunFolderError(f"{flag}: {problem[len(RESULTS):].format(where=where)}: it is damaged or "
                                             f"another run's; run.py --eval-only {self.root} re-creates it from the "
                                             "checkpoint")  # fmt: skip
        return plan

    def check_checkpoints(self, plan: Plan, keys, groups: dict | None = None, flag: str = "") -> None:
        """Every finished checkpoint of ``groups`` (``{env: [[algo, ...], ...]}``, algorithms whose
        configs train arrays of one shape; default: each of the plan's alone) must hold arrays of
        the shapes its run.json config trains with ``keys`` (one key per seed): an edited
        run.json is refused (``RunFolderError``) before anything is restored, never taken for a
        damaged checkpoint."""
        from rcmdp_jax import checkpoint, make_train

        groups = groups or {env: [[a] for a in plan.algos] for env in plan.envs}
        for env, env_groups in groups.items():
            for group in env_groups:
                done = [a for a in group if checkpoint.exists(self.ckpt_dir(env, a))]
                if not done:
                    continue
                abstract = checkpoint.abstract_result(make_train(plan.configs[env][done[0]]), keys)
                for algo in done:
                    if checkpoint.matches(self.ckpt_dir(env, algo), abstract) is False:
                        raise RunFolderError(f"{flag}{self.root / 'run.json'}: the config of {env}/{algo} does not "
                                             "match its checkpoint (other array shapes); it was edited: restore "
                                             "it")  # fmt: skip

    def exists(self, flag: str) -> bool:
        try:
            os.stat(self.root)
        except FileNotFoundError:
            return False
        except OSError as err:  # a name too long, a file on the way
            raise RunFolderError(f"{flag} {self.root}: {err.strerror}") from None
        return True

    def lock(self):
        """Take the folder's lock; the function that releases it (``take``)."""
        return take(self.root)

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

    # ---------------------------------------------------------------- writers
    def save_training(self, env: str, algo: str, metrics: dict, timing: dict | None = None) -> None:
        d = self.algo_dir(env, algo)
        d.mkdir(parents=True, exist_ok=True)
        save_npz(d / "train_metrics.npz", **metrics)
        if timing is not None:
            write_text(d / "timing.json", json.dumps(timing))

    def save_test(self, env: str, algo: str, V, C, bound, diverged, levels, test_xi, seed: int, **kept) -> None:
        """``test_results.npz``; ``kept``: the episode costs ``EpCost`` (as ``C``), and what ``C``
        is, each constraint's discount ``gamma_c`` and the episode length ``horizon``."""
        d = self.algo_dir(env, algo)
        save_npz(d / "test_results.npz", V=V, C=C, bound=bound, diverged=diverged, levels=levels, test_xi=test_xi,
                 seed=np.int64(seed), **kept)  # fmt: skip
        write_text(d / "diverged.json", json.dumps({"seeds": np.flatnonzero(diverged).tolist()}))

    def save_worst_case(self, env: str, algo: str, found: dict) -> None:
        flat = {f"{name}/{field}": value for name, d in found.items() for field, value in d.items()}
        save_npz(self.algo_dir(env, algo) / "worst_case.npz", **flat)

    # ---------------------------------------------------------------- readers
    def load_results(self, env: str, algos, bounds: dict | None = None, seeds: dict | None = None,
                     costs: dict | None = None):  # fmt: skip
        """``(results {algo: (V, C) of the kept seeds, or None}, training metrics, levels)``;
        fills ``bounds`` (if given) with each algorithm's per-episode state-bound flags,
        ``seeds`` with ``(seeds used, seeds trained)`` and ``costs`` with ``{"EpCost": the kept
        seeds' episode costs, "gamma_c", "horizon"}`` (a file written before them: absent)."""
        results, metrics, levels, first = {}, {}, None, None
        for algo in algos:
            d = self.algo_dir(env, algo)
            if (d / "test_results.npz").exists():
                z = load_npz(d / "test_results.npz")
                first = first or (algo, z["V"].shape[1:])
                if z["V"].shape[1:] != first[1]:  # a file of another run or environment
                    raise DamagedFile(f"{d / 'test_results.npz'} holds results of shape {z['V'].shape[1:]} (levels, "
                                      f"kernels, episodes), {first[0]}'s {first[1]}: it is not this run's; run.py "
                                      "--eval-only re-creates it from the checkpoints")  # fmt: skip
                keep = kept_seeds(z)
                results[algo] = (z["V"][keep], z["C"][keep]) if keep.any() else None
                levels = z["levels"]
                if bounds is not None and keep.any():
                    bounds[algo] = z["bound"][keep]
                if costs is not None and keep.any() and "EpCost" in z:
                    costs[algo] = {"EpCost": z["EpCost"][keep], "gamma_c": z["gamma_c"], "horizon": int(z["horizon"])}
                if seeds is not None:
                    seeds[algo] = (int(keep.sum()), int(keep.size))
            if (d / "train_metrics.npz").exists():
                metrics[algo] = load_npz(d / "train_metrics.npz")
        return results, metrics, levels

    def load_worst_case(self, env: str, algo: str) -> tuple[dict, np.ndarray]:
        """``({objective: {field: per kept seed}}, the test kernels' xi)``."""
        z = load_npz(self.algo_dir(env, algo) / "worst_case.npz")
        t = load_npz(self.algo_dir(env, algo) / "test_results.npz")
        keep = kept_seeds(t)
        nested: dict = {}
        for key in z:
            name, field = key.split("/")
            nested.setdefault(name, {})[field] = z[key][keep]
        return nested, t["test_xi"]


# --- the run folder's lock: ``.lock`` ---
def in_use(root: Path, pid: str) -> str:
    return f"{root} is in use by another run or report (PID {pid}); wait for it to end"


def _pid(path: Path) -> str:
    """The PID a lock file holds, or ``?`` (anything but digits is not repeated)."""
    try:
        text = path.read_text()[:20].strip()
    except (OSError, UnicodeDecodeError):
        return "?"
    return text if text.isdigit() else "?"


def take(root: Path):
    """Take ``root``'s lock; the function that releases it. ``RunFolderError`` if another
    process holds it, or the folder or its ``.lock`` is not what it should be."""
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
        except BlockingIOError:
            os.close(fd)
            raise RunFolderError(in_use(root, _pid(path))) from None
        try:  # the file we locked may have been released and removed meanwhile: lock the one there
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
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
    """The PID of a process holding ``root``'s lock (``?`` if unknown), or None: for a
    reader that may not take the lock itself (a folder this user may not write)."""
    import fcntl

    path = root / ".lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None  # no lock file, a link, or one this user may not read
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _pid(path)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None

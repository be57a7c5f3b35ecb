"""Checkpoints of trained states with orbax-checkpoint.

A checkpoint holds the whole ``TrainResult`` of one algorithm (every seed:
params, optimiser state, multipliers, kernel, schedule, rng and the metrics).
Restoring needs the *shape* of that result, which ``abstract_result`` gets from
``jax.eval_shape`` without compiling anything. A checkpoint written before a leaf of
``ADDED_LEAVES`` existed restores with it filled (a metric NaN, a state's leaf 0).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from rcmdp_jax import atomic

# leaves added to the trained result after checkpoints without them were written (the episode
# cost: the training metrics' ``episode_ep_cost`` and ``eval_ep_cost``, the rollout's running
# ``ep_costs`` and ``steps``; the dual's margin and its episodes' spread, ``margin`` and
# ``spread``; the environment's ``cost_limits`` and ``cost_shares``, constants of an older run's program: restored
# as its environment's own): an older checkpoint restores with them filled
ADDED_LEAVES = frozenset({"episode_ep_cost", "eval_ep_cost", "ep_costs", "steps", "margin", "spread", "cost_limits",
                          "cost_shares"})  # fmt: skip


class Damaged(ValueError):
    """A checkpoint whose files are not those listed when it was saved (the message says which)."""


def save(path: str | os.PathLike, tree: Any) -> None:
    """Write ``tree`` to ``path`` (a directory that must not exist yet); blocks until done.
    In a multi-process run every process calls it (orbax's multi-host protocol)."""
    path = Path(path).absolute()
    if jax.process_count() > 1:  # every process calls save; process 0 checks, orbax writes from it
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"rcmdp_jax checkpoint {path}")
    if jax.process_index() == 0 and path.exists():
        raise FileExistsError(f"checkpoint {path} already exists; refusing to overwrite it")
    if jax.process_index() == 0:
        remove_partial(path)  # a killed save's leftovers
    if jax.process_index() == 0:
        files_path(path).unlink(missing_ok=True)  # a list of an earlier checkpoint at this path
    try:  # orbax's threads' own error logs and event-loop noise: said below in one line
        with quiet_absl(), loop_noise_off(), ocp.StandardCheckpointer() as ckpt:
            ckpt.save(path, tree)
            ckpt.wait_until_finished()
        if jax.process_index() == 0:
            write_files(path)
    except Exception as err:  # a full disk, a folder that is not ours: nothing half-written stays
        if jax.process_index() == 0:
            for _ in range(3):  # orbax's threads may still finish a file or two
                time.sleep(0.2)
                remove_partial(path)
        if isinstance(err, OSError):
            raise
        if code := re.search(r"os_error_code='(\d+)'", str(err)):  # tensorstore's OS error, by number
            raise OSError(int(code[1]), f"{os.strerror(int(code[1]))} (writing the checkpoint)", str(path)) from None
        cause = (str(err).strip().splitlines() or [type(err).__name__])[-1][:200]
        raise OSError(errno.EIO, f"cannot write the checkpoint ({cause})", str(path)) from None


@contextlib.contextmanager
def quiet_absl():
    """orbax's absl log records (errors of its background threads, a missing metadata
    warning) off stderr: the caller says in one line what they mean."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        absl.setLevel(level)


def remove_partial(path: Path) -> None:
    """Remove what an unfinished save left at ``path`` (orbax's temporary folders too)."""
    for p in path.parent.glob(f"{path.name}.orbax-checkpoint-tmp*"):  # never finished, whatever is in it
        shutil.rmtree(p, ignore_errors=True)
    if path.exists() and not exists(path):
        shutil.rmtree(path, ignore_errors=True)


def restore(path: str | os.PathLike, abstract_tree: Any, env_params: Any = None) -> Any:
    """Read the checkpoint at ``path`` into the structure of ``abstract_tree``; ``Damaged`` in one line
    for one that cannot be read into it (cut short, foreign). ``env_params``: the environment's default
    parameters, whose fields fill an ``env_params`` leaf the checkpoint lacks."""
    path = Path(path).absolute()
    if not exists(path):
        raise FileNotFoundError(f"no complete checkpoint at {path}")
    if problem := files_problem(path):  # refused before orbax reads (its reads of a cut checkpoint
        raise Damaged(problem)  # end on a closed event loop)
    try:
        with quiet_absl(), loop_noise_off(), ocp.StandardCheckpointer() as ckpt:
            missing = missing_leaves(path, abstract_tree)
            if missing is None:  # a foreign checkpoint: orbax says how it differs
                return ckpt.restore(path, abstract_tree)
            if not missing:
                try:  # the same tree
                    return ckpt.restore(path, abstract_tree)
                except ValueError:  # the same leaves, in containers of another shape: an older version's tree
                    pass  # without a container that is empty in this version (``DualState.own``, the plug-in slots)
            leaves = jax.tree_util.tree_flatten_with_path(abstract_tree)[0]
            wanted = {key_of(p): leaf for p, leaf in leaves}
            saved = ckpt.metadata(path)  # the checkpoint's own tree, each leaf as the abstract one
            saved = jax.tree_util.tree_map_with_path(lambda p, _: wanted[key_of(p)], metadata_tree(saved))
            restored = {key_of(p): x for p, x in jax.tree_util.tree_flatten_with_path(ckpt.restore(path, saved))[0]}
    except Exception as err:
        asyncio_quiet_from_now()
        time.sleep(0.5)  # the reads in flight end now, while the filter is on, not at the process's exit
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise Damaged(f"{type(err).__name__}: {first}" if first else type(err).__name__) from None
    out = []
    for p, leaf in leaves:
        if key_of(p) in missing and key_of(p)[-2:-1] == ("env_params",) and env_params is not None:
            own = np.asarray(getattr(env_params, key_of(p)[-1]), leaf.dtype)  # the same for every seed
            out.append(np.array(np.broadcast_to(own, leaf.shape)))
        elif key_of(p) in missing:  # a metric unknown to the old run: NaN; a running sum: 0
            out.append(np.full(leaf.shape, np.nan if key_of(p)[0] == "metrics" else 0, leaf.dtype))
        else:
            out.append(restored[key_of(p)])
    return jax.tree.unflatten(jax.tree.structure(abstract_tree), out)


def metadata_tree(saved):
    """The tree of a checkpoint's metadata (orbax's ``item_metadata`` where it wraps it)."""
    return getattr(saved, "item_metadata", saved)


def key_of(path) -> tuple[str, ...]:
    """A leaf's path as strings, the same for a flax dataclass's field and orbax's dict key."""
    return tuple(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)


def saved_leaves(path: Path) -> dict | None:
    """``{path: (shape, dtype)}`` of the checkpoint's arrays (None: unreadable metadata)."""
    try:
        with quiet_absl(), loop_noise_off(), ocp.StandardCheckpointer() as ckpt:
            saved = metadata_tree(ckpt.metadata(path))
    except Exception:
        asyncio_quiet_from_now()
        return None
    return {key_of(p): (tuple(m.shape), str(m.dtype)) for p, m in jax.tree_util.tree_flatten_with_path(saved)[0]}


def missing_leaves(path: Path, abstract_tree: Any) -> frozenset | None:
    """The leaves of ``abstract_tree`` a checkpoint written before them lacks (``ADDED_LEAVES``,
    every other leaf there with its shape): restored filled; empty when none is missing. None
    when the checkpoint differs otherwise (its own error comes from the strict restore)."""
    have = saved_leaves(Path(path))
    if not have:
        return None
    flat = jax.tree_util.tree_flatten_with_path(abstract_tree)[0]
    want = {key_of(p): (tuple(x.shape), str(x.dtype)) for p, x in flat}
    missing = frozenset(k for k in want if k not in have)
    if any(k[-1] not in ADDED_LEAVES for k in missing) or any(want.get(k) != v for k, v in have.items()):
        return None
    return missing


def files_path(path: Path) -> Path:
    """Where the list of a checkpoint's files and their sizes lives: beside its folder."""
    return path.with_name(path.name + ".files.json")


def write_files(path: Path) -> None:
    """Record every file of the finished checkpoint at ``path`` and its size (a temporary
    name, then renamed: a list is whole or absent)."""
    listing = {str(p.relative_to(path)): p.stat().st_size for p in sorted(path.rglob("*")) if p.is_file()}
    atomic.write_text(files_path(path), json.dumps(listing, indent=0))


def files_problem(path: Path) -> str | None:
    """What differs between the checkpoint at ``path`` and the list written when it was saved
    (a file missing or of another size), or None (the same, or no list to compare with)."""
    try:
        listing = json.loads(files_path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return f"its file list {files_path(path).name} cannot be read"
    if not isinstance(listing, dict):
        return f"its file list {files_path(path).name} cannot be read"
    for name, size in listing.items():
        f = path / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != size:
            return f"{name} has {f.stat().st_size} bytes, {size} when saved"
    return None


def asyncio_quiet_from_now() -> None:
    """After a failed restore, the reads still in flight end on orbax's closed event loop and
    asyncio logs each one's traceback through the root logger, whose handler (absl's) holds
    the stderr it was made with: those records are kept off for the rest of the process."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)


@contextlib.contextmanager
def loop_noise_off():
    """When a save or restore fails, the reads and writes still in flight finish on orbax's
    closed event loop, each printing an "Event loop is closed" traceback from tensorstore's
    threads, during the call and after it: noise, kept off stderr (from then on, after a
    failure)."""
    previous = sys.stderr
    if not isinstance(previous, _LoopClosedFilter):
        sys.stderr = _LoopClosedFilter(previous)
    yield
    if isinstance(sys.stderr, _LoopClosedFilter) and sys.stderr.stream is previous:  # it went well
        sys.stderr.flush()
        sys.stderr = previous


class _LoopClosedFilter:
    """``sys.stderr`` without the tracebacks that end in ``RuntimeError: Event loop is
    closed``; everything else passes through, a line at a time."""

    NOISE = ("Event loop is closed", "asyncio/base_events.py", "self._check_closed()")

    def __init__(self, stream):
        self.stream, self.line, self.block, self.lock = stream, "", [], threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:  # tensorstore's threads write at once
            self.line += text
            while "\n" in self.line:
                line, self.line = self.line.split("\n", 1)
                if line.startswith("Traceback (most recent call last)") or (self.block and line.startswith(" ")):
                    self.block.append(line)
                    continue
                if not any(n in x for x in [*self.block, line] for n in self.NOISE):
                    self.stream.write("".join(x + "\n" for x in [*self.block, line]))
                self.block = []
        return len(text)

    def flush(self) -> None:
        with self.lock:
            if self.line and not self.block:
                self.stream.write(self.line)
                self.line = ""
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def matches(path: str | os.PathLike, abstract_tree: Any) -> bool | None:
    """Whether the checkpoint's arrays have the shapes and dtypes of ``abstract_tree``
    (None: its metadata cannot be read, a damaged checkpoint)."""
    if files_problem(Path(path).absolute()):  # damaged: orbax does not read it (see ``restore``)
        return None
    try:
        with quiet_absl(), loop_noise_off(), ocp.StandardCheckpointer() as ckpt:
            saved = ckpt.metadata(Path(path).absolute())
        saved = getattr(saved, "item_metadata", saved)
        have = sorted((tuple(m.shape), str(m.dtype)) for m in jax.tree.leaves(saved))
    except Exception:
        asyncio_quiet_from_now()
        return None
    if not have:
        return None
    want = sorted((tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(abstract_tree))
    return have == want or bool(missing_leaves(Path(path).absolute(), abstract_tree))


def exists(path: str | os.PathLike) -> bool:
    """True when ``path`` holds a finished checkpoint (not one cut short by a crash)."""
    path = Path(path)
    return path.is_dir() and (path / "_CHECKPOINT_METADATA").exists()


def set_aside(path: str | os.PathLike) -> Path:
    """Rename a damaged checkpoint folder to ``<path>.damaged[-N]`` (nothing is deleted);
    return the new path."""
    path = Path(path)
    target, n = path.with_name(path.name + ".damaged"), 1
    while target.exists():
        target, n = path.with_name(f"{path.name}.damaged-{n}"), n + 1
    path.rename(target)
    if files_path(path).exists():  # its file list goes with it
        files_path(path).rename(files_path(target))
    return target


def abstract_result(train, rngs: jax.Array) -> Any:
    """``jax.ShapeDtypeStruct`` tree of ``jax.vmap(train)(rngs)``."""
    return jax.eval_shape(jax.vmap(train), rngs)

"""Checkpoints of trained states with orbax-checkpoint.

A checkpoint holds the whole ``TrainResult`` of one algorithm (every seed:
params, optimiser state, multipliers, kernel, schedule, rng and the metrics).
Restoring needs the *shape* of that result, which ``abstract_result`` gets from
``jax.eval_shape`` without compiling anything.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp


def save(path: str | os.PathLike, tree: Any) -> None:
    """Write ``tree`` to ``path`` (a directory that must not exist yet); blocks until done.
    In a multi-process run every process calls it (orbax's multi-host protocol)."""
    path = Path(path).absolute()
    if jax.process_count() > 1:  # every process calls save; process 0 checks, orbax writes from it
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"rcmdp_jax checkpoint {path}")
    if jax.process_index() == 0 and path.exists():
        raise FileExistsError(f"checkpoint {path} already exists; refusing to overwrite it")
    try:
        with ocp.StandardCheckpointer() as ckpt:
            ckpt.save(path, tree)
            ckpt.wait_until_finished()
    except Exception as err:  # a full disk, a folder that is not ours: nothing half-written stays
        quiet_loop_noise()
        if jax.process_index() == 0:
            remove_partial(path)
        if isinstance(err, OSError):
            raise
        cause = (str(err).strip().splitlines() or [type(err).__name__])[-1][:200]
        raise OSError(errno.EIO, f"cannot write the checkpoint ({cause})", str(path)) from None


def remove_partial(path: Path) -> None:
    """Remove what an unfinished save left at ``path`` (orbax's temporary folders too)."""
    for p in [path, *path.parent.glob(f"{path.name}.orbax-checkpoint-tmp*")]:
        if p.exists() and not exists(p):
            shutil.rmtree(p, ignore_errors=True)


def restore(path: str | os.PathLike, abstract_tree: Any) -> Any:
    """Read the checkpoint at ``path`` into the structure of ``abstract_tree``."""
    path = Path(path).absolute()
    if not exists(path):
        raise FileNotFoundError(f"no complete checkpoint at {path}")
    try:
        with ocp.StandardCheckpointer() as ckpt:
            return ckpt.restore(path, abstract_tree)
    except Exception:
        quiet_loop_noise()
        raise


def quiet_loop_noise() -> None:
    """After a failed save or restore, the reads and writes still in flight finish on
    orbax's closed event loop, each printing an "Event loop is closed" traceback from
    tensorstore's threads: noise, kept off stderr from now on."""
    if not isinstance(sys.stderr, _LoopClosedFilter):
        sys.stderr = _LoopClosedFilter(sys.stderr)


class _LoopClosedFilter:
    """``sys.stderr`` without the tracebacks that end in ``RuntimeError: Event loop is
    closed``; everything else passes through, a line at a time."""

    def __init__(self, stream):
        self.stream, self.line, self.block = stream, "", []

    def write(self, text: str) -> int:
        self.line += text
        while "\n" in self.line:
            line, self.line = self.line.split("\n", 1)
            if line.startswith("Traceback (most recent call last)") or (self.block and line.startswith(" ")):
                self.block.append(line)
                continue
            if not (self.block and line == "RuntimeError: Event loop is closed"):
                self.stream.write("".join(x + "\n" for x in [*self.block, line]))
            self.block = []
        return len(text)

    def flush(self) -> None:
        if self.line and not self.block:
            self.stream.write(self.line)
            self.line = ""
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def matches(path: str | os.PathLike, abstract_tree: Any) -> bool | None:
    """Whether the checkpoint's arrays have the shapes and dtypes of ``abstract_tree``
    (None: its metadata cannot be read, a damaged checkpoint)."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)  # its warning about missing metadata: the caller says what it means
    try:
        with ocp.StandardCheckpointer() as ckpt:
            saved = ckpt.metadata(Path(path).absolute())
        saved = getattr(saved, "item_metadata", saved)
        have = sorted((tuple(m.shape), str(m.dtype)) for m in jax.tree.leaves(saved))
    except Exception:
        return None
    finally:
        absl.setLevel(level)
    if not have:
        return None
    want = sorted((tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(abstract_tree))
    return have == want


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
    return target


def abstract_result(train, rngs: jax.Array) -> Any:
    """``jax.ShapeDtypeStruct`` tree of ``jax.vmap(train)(rngs)``."""
    return jax.eval_shape(jax.vmap(train), rngs)

"""Checkpoints of trained states with orbax-checkpoint.

A checkpoint holds the whole ``TrainResult`` of one algorithm (every seed:
params, optimiser state, multipliers, kernel, schedule, rng and the metrics).
Restoring needs the *shape* of that result, which ``abstract_result`` gets from
``jax.eval_shape`` without compiling anything.
"""

from __future__ import annotations

import os
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
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(path, tree)
    ckpt.wait_until_finished()


def restore(path: str | os.PathLike, abstract_tree: Any) -> Any:
    """Read the checkpoint at ``path`` into the structure of ``abstract_tree``."""
    path = Path(path).absolute()
    if not exists(path):
        raise FileNotFoundError(f"no complete checkpoint at {path}")
    return ocp.StandardCheckpointer().restore(path, abstract_tree)


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

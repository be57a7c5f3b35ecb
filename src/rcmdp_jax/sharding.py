"""Sharding batch axes (seeds, hyperparameters, kernels) across devices.

Every batch axis a user vmaps over is independent work, so it is split across
the local devices with a one-axis ``jax.sharding.Mesh`` and a ``NamedSharding``
on the leading axis: no collectives, no ``pmap``. A batch that does not divide
the device count is padded (by repeating its last element) and trimmed after.

Multi-host: ``setup_devices(..., distributed=True)`` calls
``jax.distributed.initialize()``; each process then takes a contiguous block
of the seeds (``process_block``) and ``gather_blocks`` brings every block to
every process (process 0 writes the report).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "batch"


def local_mesh(n_devices: int | None = None) -> Mesh:
    """A 1-D mesh over the first ``n_devices`` local devices (all by default)."""
    devices = jax.local_devices()
    n = len(devices) if n_devices is None else int(n_devices)
    if not 1 <= n <= len(devices):
        raise ValueError(f"devices={n_devices!r}: this process sees {len(devices)} local device(s)")
    return Mesh(np.array(devices[:n]), (AXIS,))


def leading_size(tree: Any) -> int:
    return jax.tree.leaves(tree)[0].shape[0]


def pad_leading(tree: Any, multiple: int) -> Any:
    """Pad the leading axis of every leaf to a multiple of ``multiple`` by repeating the last row."""
    n = leading_size(tree)
    extra = (-n) % multiple
    if extra == 0:
        return tree
    return jax.tree.map(lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], extra, axis=0)]), tree)


def shard_batch(tree: Any, mesh: Mesh) -> Any:
    """Pad ``tree``'s leading axis to the mesh size and place it split across the mesh."""
    sharding = NamedSharding(mesh, PartitionSpec(AXIS))
    return jax.device_put(pad_leading(tree, mesh.size), sharding)


def unshard(tree: Any, n: int) -> Any:
    """Trim the leading axis back to the ``n`` real entries."""
    return jax.tree.map(lambda x: x[:n], tree)


def sharded_vmap(fn: Callable, mesh: Mesh, in_axes: Any = 0) -> Callable:
    """``jax.jit(jax.vmap(fn, in_axes))`` whose batch axis is split across ``mesh``.

    Positional arguments with ``in_axes`` 0 are padded and sharded; the others
    (``None``) are replicated. Outputs are trimmed to the true batch size.
    """
    batched = jax.jit(jax.vmap(fn, in_axes=in_axes))

    def call(*args):
        axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        n = next(leading_size(a) for a, ax in zip(args, axes) if ax == 0)
        placed = [shard_batch(a, mesh) if ax == 0 else a for a, ax in zip(args, axes)]
        return unshard(batched(*placed), n)

    return call


def setup_devices(devices: str | int = "all", distributed: bool = False) -> Mesh:
    """Initialise multi-host JAX if asked, then the local mesh for ``devices`` ('all' or N)."""
    if distributed:
        jax.distributed.initialize()
    n = None if devices in ("all", None) else int(devices)
    return local_mesh(n)


def process_block(n: int) -> slice:
    """This process's contiguous block of ``n`` items (blocks padded to equal size)."""
    per = -(-n // jax.process_count())
    start = jax.process_index() * per
    return slice(start, min(start + per, n))


def gather_blocks(tree: Any, n: int) -> Any:
    """Concatenate every process's block (in process order) and trim to ``n``."""
    if jax.process_count() == 1:
        return tree
    from jax.experimental import multihost_utils

    per = -(-n // jax.process_count())
    padded = jax.tree.map(lambda x: np.asarray(pad_leading(x, per))[:per] if x.shape[0] else x, tree)
    gathered = multihost_utils.process_allgather(padded, tiled=True)
    return unshard(gathered, n)

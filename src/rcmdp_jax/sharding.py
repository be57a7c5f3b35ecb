"""Sharding batch axes (seeds, hyperparameters, kernels) across devices.

Every batch axis a user vmaps over is independent work, so it is split across
the local devices with a one-axis ``jax.sharding.Mesh`` and a ``NamedSharding``
on the leading axis: no collectives, no ``pmap``. A batch that does not divide
the device count is padded (by repeating its last element) and trimmed after.

On a CPU, XLA runs one program's kernels mostly one after another, so a
vmapped train step leaves cores idle. ``split_cpu(n)`` exposes the host as ``n``
XLA devices (``jax_num_cpu_devices``) before JAX starts; sharding the seeds
across them runs the shards in parallel (figures in docs/performance.md). ``setup_devices("auto")`` does this with one device per core.

Multi-host: ``init_distributed`` (or ``setup_devices(..., distributed=True)``) calls
``jax.distributed.initialize()``; each process then takes a contiguous block
of the seeds (``process_block``) and ``gather_blocks`` brings every block to
every process (process 0 writes the report).
"""

from __future__ import annotations

import os
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
    # host arrays padded on the host: no small compiled program per leaf shape
    xp = lambda x: np if isinstance(x, np.ndarray) else jnp  # noqa: E731
    return jax.tree.map(lambda x: xp(x).concatenate([x, xp(x).repeat(x[-1:], extra, axis=0)]), tree)


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading axis split across ``mesh``."""
    return NamedSharding(mesh, PartitionSpec(AXIS))


def shard_batch(tree: Any, mesh: Mesh) -> Any:
    """Pad ``tree``'s leading axis to the mesh size and place it split across the mesh."""
    return jax.device_put(pad_leading(tree, mesh.size), batch_sharding(mesh))


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


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def split_cpu(n: int) -> bool:
    """Expose the host CPU as ``n`` XLA devices. Works only before JAX has
    initialised its backends (before any computation); returns whether it took
    effect. An explicit ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``
    wins. Harmless where the default backend is an accelerator."""
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return False
    try:
        jax.config.update("jax_num_cpu_devices", int(n))
    except (RuntimeError, ValueError, AttributeError):  # backends already up, or an old JAX
        return False
    return True


def sharded_blocks(fn: Callable, mesh: Mesh, wrap: Callable = lambda jitted: jitted, whole: int = 0) -> Callable:
    """``fn`` maps a block of items (leading axis) to a block of results; run it on
    every device's share of the items (``jax.shard_map``, no collectives), padding
    and trimming the leading axis. Unlike ``sharded_vmap`` the per-device work is
    whatever ``fn`` does with its block (e.g. a cache-friendly ``lax.map``). ``wrap``: what
    calls the jitted program instead of itself (the runner's ``program_store.Stored``);
    ``whole``: how many of the last arguments every device gets whole (the test kernels)."""
    spec, programs = PartitionSpec(AXIS), {}

    def call(*args):
        split = len(args) - whole
        if split not in programs:  # one program per number of arguments
            specs = (spec,) * split + (PartitionSpec(),) * whole
            programs[split] = wrap(
                jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=spec, check_vma=False))
            )
        n = leading_size(args[:split])
        return unshard(programs[split](*[shard_batch(a, mesh) for a in args[:split]], *args[split:]), n)

    return call


def init_distributed(
    coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None
) -> None:
    """``jax.distributed.initialize`` for a multi-process run, before any JAX work.
    Arguments left ``None`` are JAX's to find: from SLURM or Open MPI, and the
    coordinator from ``JAX_COORDINATOR_ADDRESS``. CPU processes exchange results
    through gloo (``jax_cpu_collectives_implementation``). Does nothing if JAX's
    distributed runtime is already up."""
    if jax.distributed.is_initialized():
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)


def setup_devices(devices: str | int = "all", distributed: bool = False) -> Mesh:
    """Initialise multi-host JAX if asked (``init_distributed`` with JAX's own
    detection, unless already initialised), then the local mesh for ``devices``:
    'all', 'auto' (on a CPU: one XLA device per core, then all of them) or N
    (on a CPU, N > 1 splits the host into N devices). Call before any JAX work."""
    if distributed:
        init_distributed()
    if devices == "auto":
        split_cpu(available_cores())
        return local_mesh(None)
    n = None if devices in ("all", None) else int(devices)
    if n is not None and n > 1:
        split_cpu(n)  # only takes effect where the backend is the CPU and not yet started
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

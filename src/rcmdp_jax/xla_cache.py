"""JAX's persistent XLA cache bounded: the compile-cache folder's ``*-cache`` files (machine code
for a program, found after tracing it; the program store, ``program_store``, keeps its own bound in
its subfolder). JAX bounds its cache only where ``jax_compilation_cache_max_size`` is set, which
needs the ``filelock`` package, and its eviction then fails on entries written without it (no
``-atime`` file): the runner calls ``evict`` at each run's start instead."""

from __future__ import annotations

import contextlib
import stat
from pathlib import Path

MAX_BYTES = 2 << 30


def evict(cache: Path, max_bytes: int | None = None) -> list[Path]:
    """Where JAX's XLA cache in folder ``cache`` holds more than ``max_bytes`` (``MAX_BYTES`` where
    None), drop its least recently used entries (by the later of a file's access and modification
    times: JAX writes an entry once and only reads it after) until it holds at most three quarters
    of it; the dropped. Other files and the program store's subfolder are not touched. A process
    that reads an entry as it goes compiles that program again (JAX warns)."""
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    entries = []
    for path in Path(cache).glob("*-cache"):
        with contextlib.suppress(OSError):
            st = path.stat()
            if stat.S_ISREG(st.st_mode):
                entries.append((max(st.st_atime, st.st_mtime), st.st_size, path))
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return []
    dropped = []
    for _, size, path in sorted(entries):
        if total <= max_bytes * 3 // 4:
            break
        with contextlib.suppress(OSError):  # another process's eviction, a read-only folder
            path.unlink(missing_ok=True)
            path.with_name(path.name.removesuffix("-cache") + "-atime").unlink(missing_ok=True)  # JAX's own LRU's
            total -= size
            dropped.append(path)
    return dropped

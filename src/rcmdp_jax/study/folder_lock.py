"""A run folder's lock: ``.lock`` held with ``fcntl.flock`` (atomic; the kernel drops it
when its process dies, so a killed run's lock is free) and holding the PID, which a
refused second run or report names. Never taken through a link (the PID would overwrite
the file it points to)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from rcmdp_jax.study.errors import RunFolderError


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

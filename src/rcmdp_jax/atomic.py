"""Files written whole or not at all (a temporary file beside them, renamed): the run folder's
results and reports, the program store's entries, a checkpoint's list of files."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_bytes(path: Path | str, data: bytes) -> None:
    """``data`` to ``path``: a failed write leaves the old file (or none) and no temporary file; an
    ``OSError`` names ``path``, not the temporary file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise


def write_text(path: Path | str, text: str) -> None:
    """``text`` (UTF-8) to ``path`` as ``write_bytes`` writes."""
    write_bytes(path, text.encode())

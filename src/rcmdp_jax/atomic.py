"""Files written whole or not at all (a temporary file beside them, renamed): the run folder's
results and reports, the program store's entries, a checkpoint's list of files; and the files a
person may edit (a report's tables), their SHA-256 kept beside them so that an edit is found
(``edited``) before a command would write over it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

DIGESTS = ".written.sha256.json"  # in a folder of ``write_kept``'s files: {file name: SHA-256 as written}


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


def write_kept(path: Path | str, text: str) -> None:
    """``text`` to ``path`` as ``write_text`` writes, its SHA-256 recorded in the folder's ``DIGESTS``."""
    path = Path(path)
    write_text(path, text)
    digests = _digests(path.parent)
    digests[path.name] = hashlib.sha256(text.encode()).hexdigest()
    write_text(path.parent / DIGESTS, json.dumps(digests, indent=1, sort_keys=True))


def _digests(folder: Path) -> dict[str, str]:
    """The folder's recorded digests (none where the file is missing or not such a record)."""
    try:
        digests = json.loads((folder / DIGESTS).read_text())
    except (OSError, ValueError):
        return {}
    ok = isinstance(digests, dict) and all(isinstance(v, str) and Path(k).name == k for k, v in digests.items())
    return digests if ok else {}


def edited(folders) -> list[Path]:
    """The files ``write_kept`` wrote in ``folders`` whose bytes changed since (a person's edit); a
    file removed since is not one."""
    out = []
    for folder in map(Path, folders):
        for name, digest in _digests(folder).items():
            try:
                data = (folder / name).read_bytes()
            except OSError:
                continue
            if hashlib.sha256(data).hexdigest() != digest:
                out.append(folder / name)
    return out

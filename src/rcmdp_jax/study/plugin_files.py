"""``--plugins FILE.py|MODULE``: a user's plug-ins (learners, constraint rules, robust
methods, environments) loaded before anything reads the registries.

The file or module registers its plug-ins when imported (``rcmdp_jax.learners.register``,
``constraints.register``, ``adversary.register``, ``envs.register``). ``run.json`` records
each (``plugins``: its absolute path or module name, the SHA-256 of its source and what it
registered), so ``rcmdp report``, ``--resume`` and ``--eval-only`` import it again in a fresh
process (``restore``) and refuse a file whose source changed since the run was trained.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_LOADED: dict[str, dict] = {}  # file path or module name -> its record, in load order


def split(values) -> list[str]:
    """``--plugins`` given repeatedly and/or as comma lists: the names, each once."""
    out = []
    for value in values or ():
        parts = [v.strip() for v in value.split(",")]
        if not all(parts):
            raise ValueError(f"--plugins {value!r} has an empty name; give FILE.py or PACKAGE.MODULE, comma-separated")
        out += parts
    return list(dict.fromkeys(out))


def record_of(spec: str) -> dict:
    """How to load ``spec`` again: a file by its absolute path, a module with the folder it is
    imported from (the command's)."""
    if spec.endswith(".py"):
        return {"file": str(Path(spec).expanduser().resolve())}
    if not _MODULE.match(spec):
        raise ValueError(f"--plugins {spec!r} is not allowed; give FILE.py or PACKAGE.MODULE")
    return {"module": spec, "path": os.getcwd()}


def _registered() -> set[tuple[str, str]]:
    """Every plug-in of every kind: ``(kind, name)``."""
    from rcmdp_jax import adversary, constraints, envs, learners  # noqa: F401  (every kind's registry made)
    from rcmdp_jax.plugin import REGISTRIES

    return {(r.kind, n) for r in REGISTRIES for n in r.names()} | {("environment", n) for n in envs.registered()}


def _digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _where(record: dict) -> str:
    return record.get("file") or record.get("module")


def load(record: dict) -> dict:
    """Import the plug-ins of ``record`` (once a process) and return its full record (with
    ``sha256`` and ``registers``); ``ValueError`` in one line when it cannot be imported or
    registers nothing."""
    from rcmdp_jax.study.user_env import _import

    key = _where(record)
    if key in _LOADED:
        return _LOADED[key]
    if "file" in record and not Path(record["file"]).is_file():
        raise ValueError(f"--plugins {record['file']}: no such file")
    before = _registered()
    try:
        module = _import(record)
    except (Exception, SystemExit) as err:  # the user's code: any error (sys.exit too), said in one line
        msg = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"--plugins {key}: cannot import it: {type(err).__name__}: {msg}") from None
    added = sorted(_registered() - before)
    if not added:
        raise ValueError(f"--plugins {key} registers nothing (no learner, constraint rule, robust method or "
                         "environment): call rcmdp_jax.learners.register, constraints.register, adversary.register "
                         "or envs.register in it")  # fmt: skip
    source = record.get("file") or getattr(module, "__file__", None)
    full = {**record, "sha256": _digest(source) if source else "", "registers": [f"{k} {n}" for k, n in added]}
    _LOADED[key] = full
    return full


def load_specs(specs) -> list[dict]:
    """``--plugins``' files and modules loaded, in order: their records."""
    return [load(record_of(s)) for s in split(specs)]


def loaded() -> list[dict]:
    """The records of every plug-in file and module this process loaded (for run.json)."""
    return list(_LOADED.values())


def restore(plan: dict) -> None:
    """Import the plug-ins a saved plan names (``plugins``) before its algorithms are read;
    ``ValueError`` in one line for one that cannot be imported, or whose source is not the one
    the run was trained with."""
    saved = plan.get("plugins") or []
    ok = lambda r: isinstance(r, dict) and isinstance(_where(r), str) and isinstance(r.get("sha256"), str)  # noqa: E731
    if not isinstance(saved, list) or not all(ok(r) for r in saved):
        raise ValueError("plugins must list each plug-in's file or module and sha256; it was edited: restore it")
    for record in saved:
        now = load({k: record[k] for k in ("file", "module", "path") if k in record})
        if now["sha256"] != record["sha256"]:
            raise ValueError(f"plug-in {_where(record)} is not the one this run was trained with (its source "
                             "changed): restore that file, or train a new run")  # fmt: skip

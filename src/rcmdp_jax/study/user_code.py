"""The code a user brings (``--env MODULE:NAME`` / ``FILE.py:NAME``, ``--plugins FILE.py|MODULE``): loaded, recorded
in ``run.json`` (a plug-in with its SHA-256), loaded again in a fresh process, refused if it is not the run's."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import math
import os
import re
import sys
from pathlib import Path

import jax
import numpy as np

from rcmdp_jax import envs
from rcmdp_jax.plugin import REGISTRIES, closest

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
SOURCES: dict[str, dict] = {}  # a user environment's registered name -> how it was loaded (run.json's env_sources)
PLUGINS: dict[str, dict] = {}  # file path or module name -> its record, in load order (run.json's plugins)


def is_source(spec: str) -> bool:
    """Whether ``--env spec`` names a user's environment (``MODULE:NAME``, ``FILE.py:NAME``)."""
    if not isinstance(spec, str) or spec.startswith((envs.GYMNAX_PREFIX, envs.BRAX_PREFIX)) or ":" not in spec:
        return False
    target, _, attr = spec.rpartition(":")
    return bool(attr.isidentifier() and (target.endswith(".py") or _MODULE.match(target)))


def _record(spec: str) -> dict:
    """How to import ``spec`` (``FILE.py``, ``MODULE``, ``:NAME``) again: a file's absolute path, a module's folder."""
    target, _, attr = spec.rpartition(":") if is_source(spec) else (spec, "", "")
    if target.endswith(".py"):
        return {"file": str(Path(target).expanduser().resolve())} | ({"attr": attr} if attr else {})
    if Path(target).is_file():  # ``notes.txt`` reads as the module ``notes``' submodule ``txt``
        raise ValueError(f"{target} is a file, not one of Python code (FILE.py) nor a module (PACKAGE.MODULE)")
    return {"module": target, "path": os.getcwd()} | ({"attr": attr} if attr else {})


def _where(record: dict) -> str:
    return record.get("file") or record.get("module")


def _one_line(said: str, err: BaseException) -> ValueError:
    """``said`` and an error of the user's code (any, ``sys.exit`` too) in one line."""
    return ValueError(f"{said}{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}")


def _import(record: dict, failed: str):
    """The module of ``record``, or ``_one_line(failed, ...)``."""
    try:
        if "file" in record and not Path(record["file"]).is_file():
            raise FileNotFoundError(f"no such file {record['file']}")
        folder = record.get("path") if "module" in record else str(Path(record["file"]).parent)
        if folder and folder not in sys.path:  # a module beside the command's folder or the file, as `python -m`
            sys.path.insert(0, folder)  # or `python FILE.py` finds it
        if "module" in record:
            return importlib.import_module(record["module"])
        name = "rcmdp_user_" + re.sub(r"\W", "_", Path(record["file"]).stem)
        spec = importlib.util.spec_from_file_location(name, record["file"])
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except (Exception, SystemExit) as err:
        raise _one_line(failed, err) from None


def _attr(record: dict):
    """The ``attr`` of ``record``'s module; ``ValueError`` in one line."""
    where = f"{_where(record)}:{record['attr']}"
    module = _import(record, f"cannot load {where}: ")
    if not hasattr(module, record["attr"]):
        names = [n for n in vars(module) if not n.startswith("_")]
        raise ValueError(f"{where}: the module has no {record['attr']!r}{closest(record['attr'], names)}")
    return getattr(module, record["attr"])


def load_object(spec: str):
    """What ``MODULE:NAME`` / ``FILE.py:NAME`` names; ``ValueError`` in one line if it cannot be imported."""
    if not is_source(spec):
        raise ValueError(f"{spec!r} is not PACKAGE.MODULE:NAME or FILE.py:NAME")
    return _attr(_record(spec))


def load_env(record: dict, name: str) -> str:
    """Register ``record``'s ``RobustEnvironment``, ``DomainSpec``, dict or function of one as ``name``."""
    from rcmdp_jax.envs.base import RobustEnvironment  # here: importing it starts JAX's backend
    from rcmdp_jax.envs.domain import DomainSpec, from_dict

    where, obj = f"{_where(record)}:{record['attr']}", _attr(record)
    try:
        if callable(obj) and not isinstance(obj, (RobustEnvironment, DomainSpec)):
            obj = obj()
        if isinstance(obj, dict) and isinstance(obj.get("env"), RobustEnvironment):
            obj = from_dict(obj)
        elif not isinstance(obj, (RobustEnvironment, DomainSpec)):
            raise ValueError(f"{where} is a {type(obj).__name__}; it must be a RobustEnvironment (e.g. "
                             "envs.robustify(...)), an envs.DomainSpec, a dict {'env': ..., 'learner': {...}, "
                             "'n_test': N}, or a function returning one")  # fmt: skip
        envs.register(name, obj)
    except (Exception, SystemExit) as err:
        raise _one_line(f"cannot load {where}: ", err) from None
    SOURCES[name] = record
    return name


def load_spec(spec: str) -> tuple[str, dict]:
    """Load ``--env spec``: ``(registered name, its record for run.json)``."""
    record = _record(spec)  # a file's environment by its file's name
    return load_env(record, f"{Path(record['file']).name}:{record['attr']}" if "file" in record else spec), record


def restore_envs(plan: dict) -> None:
    """Register a saved plan's user environments (``env_sources``); ``ValueError`` for one not rebuilt as trained."""
    names, saved = plan.get("envs"), plan.get("env_sources") or {}
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return  # ``run_plan.plan_problem`` names it
    ok = lambda r: isinstance(r, dict) and isinstance(r.get("attr"), str) and isinstance(_where(r), str)
    if not isinstance(saved, dict) or not all(ok(r) for r in saved.values()):
        raise ValueError("env_sources must map each environment to its file or module and attr; it was edited: "
                         "restore it")  # fmt: skip
    for name in names:
        if name in saved and name not in envs.registered():
            load_env(saved[name], name)
        try:
            envs.check_name(name)
        except ValueError:
            raise ValueError(f"environment {name!r} was registered by the script that trained it and cannot be "
                             "rebuilt here: from a script that registers the same environment under this name, call "
                             "rcmdp_jax.study.console.report([RUN_DIR]) (or console.train(['--eval-only', RUN_DIR])); "
                             "or train with --env FILE.py:NAME or PACKAGE.MODULE:NAME") from None  # fmt: skip
        if name in envs.registered() and "env_descriptions" in plan:  # a folder of an older version has none
            # a run given --n-test tests at its own resolution: the spec's n_test is not used
            check_described(name, plan["env_descriptions"], ignore=("n_test",) if plan.get("n_test") else ())


def description(name: str) -> dict:
    """What ``run.json`` keeps of a user environment to tell it from another under ``name``: its spec's
    numbers and every leaf of its default parameters (NaN, inf as text). Not its code."""
    spec = envs.spec(name)
    out = {k: getattr(spec, k) for k in ("gamma", "lambda_max", "episode_length", "min_episode_length", "n_test")}
    out["cost_names"] = list(spec.cost_names)
    as_text = np.vectorize(lambda x: x if math.isfinite(x) else str(x), otypes=[object])  # strict JSON
    for path, leaf in jax.tree_util.tree_flatten_with_path(envs.make(name)[1])[0]:
        leaf = np.asarray(leaf)
        value = leaf.tolist() if leaf.dtype.kind in "biu" else str(leaf.tolist())  # complex, ...: as text
        if jax.numpy.issubdtype(leaf.dtype, np.floating):  # bfloat16 too
            value = as_text(leaf.astype(float)).tolist()
        out["params" + jax.tree_util.keystr(path)] = value
    return out


def check_described(name: str, described, ignore=()) -> None:
    """``ValueError`` naming what differs unless ``described[name]`` is ``description(name)`` (but ``ignore``)."""
    if not isinstance(described, dict) or not isinstance(described.get(name), dict):
        raise ValueError(f"env_descriptions has no description of {name!r}; it was edited: restore it")
    now, was = description(name), described[name]
    same = lambda a, b: json.dumps(a) == json.dumps(b)  # as JSON: True is not 1.0
    if not (differ := sorted(k for k in {*now, *was} - {*ignore} if not same(now.get(k), was.get(k)))):
        return
    fields = getattr(envs.make(name)[0], "fields", None)
    short = lambda x: f"{x:.6g}" if isinstance(x, float) else json.dumps(x)  # float32's 0.2, not 0.2000000029
    for i, key in enumerate(differ):  # the box's and the kernel's entries named by their fields
        if key in ("params.xi", "params.xi_c", "params.kappa") and fields:
            n, w = now.get(key), was.get(key)
            said = f"the uncertain fields: {', '.join(fields)}"
            if isinstance(n, list) and isinstance(w, list) and len(n) == len(w) == len(fields):
                said = "; ".join(f"{f}: {short(b)} -> {short(a)}" for f, a, b in zip(fields, n, w) if not same(a, b))
            differ[i] = f"{key} ({said})"
    said = ", ".join(differ[:4]) + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
    raise ValueError(f"environment {name!r} is not the one this run was trained on ({said} "
                     f"{'differs' if len(differ) == 1 else 'differ'}): register or load that environment, "
                     "or train a new run")  # fmt: skip


# --- plug-in files: ``--plugins FILE.py|MODULE`` ---
def _registered() -> set[tuple[str, str]]:
    """Every plug-in of every kind: ``(kind, name)``."""
    from rcmdp_jax import adversary, constraints, learners  # noqa: F401  (every kind's registry made)

    return {(r.kind, n) for r in REGISTRIES for n in r.names()} | {("environment", n) for n in envs.registered()}


def load_plugin(record: dict) -> dict:
    """Import ``record``'s plug-ins once: the record with ``sha256`` and ``registers``; ``ValueError`` if it fails."""
    if (key := _where(record)) in PLUGINS:
        return PLUGINS[key]
    before = _registered()
    module = _import(record, f"--plugins {key}: cannot import it: ")
    if not (added := sorted(_registered() - before)):
        raise ValueError(f"--plugins {key} registers nothing (no learner, constraint rule, robust method or "
                         "environment): call rcmdp_jax.learners.register, constraints.register, adversary.register "
                         "or envs.register in it")  # fmt: skip
    source = record.get("file") or getattr(module, "__file__", None)
    digest = hashlib.sha256(Path(source).read_bytes()).hexdigest() if source else ""
    PLUGINS[key] = {**record, "sha256": digest, "registers": [f"{k} {n}" for k, n in added]}
    return PLUGINS[key]


def load_plugin_specs(specs) -> list[dict]:
    """``--plugins``' files and modules (repeated and/or comma lists) loaded once each, in order: their records."""
    names = []
    for value in specs or ():
        if not all(parts := [v.strip() for v in value.split(",")]):
            raise ValueError(f"--plugins {value!r} has an empty name; give FILE.py or PACKAGE.MODULE, comma-separated")
        if bad := [p for p in parts if not p.endswith(".py") and not _MODULE.match(p)]:
            raise ValueError(f"--plugins {bad[0]!r} is not allowed; give FILE.py or PACKAGE.MODULE")
        names += parts
    try:
        records = [_record(s) for s in dict.fromkeys(names)]
    except ValueError as err:
        raise ValueError(f"--plugins {err}") from None
    return [load_plugin(r) for r in records]


def restore_plugins(plan: dict) -> None:
    """Import a saved plan's plug-ins; ``ValueError`` for one that cannot be imported or whose source changed."""
    saved = plan.get("plugins") or []
    ok = lambda r: isinstance(r, dict) and isinstance(_where(r), str) and isinstance(r.get("sha256"), str)
    if not isinstance(saved, list) or not all(ok(r) for r in saved):
        raise ValueError("plugins must list each plug-in's file or module and sha256; it was edited: restore it")
    for record in saved:
        if load_plugin({k: record[k] for k in ("file", "module", "path") if k in record})["sha256"] != record["sha256"]:
            raise ValueError(f"plug-in {_where(record)} is not the one this run was trained with (its source "
                             "changed): restore that file, or train a new run")  # fmt: skip

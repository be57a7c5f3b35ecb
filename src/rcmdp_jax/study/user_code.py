"""The code a user brings on the command line, loaded, recorded in ``run.json`` with where
it came from, and loaded again in a fresh process by ``--resume``, ``--eval-only`` and the
report: an environment (``--env MODULE:NAME`` / ``FILE.py:NAME``) and plug-in files
(``--plugins FILE.py|MODULE``); and run folder names.

**Environments.** ``--env PACKAGE.MODULE:NAME`` or ``--env PATH/TO/FILE.py:NAME``: ``NAME``
is a ``RobustEnvironment`` (e.g. ``envs.robustify(...)``), an ``envs.DomainSpec``, a dict
``{"env": ..., "learner": {...}, "n_test": N}`` (the arguments of ``envs.register``), or a
function without arguments that returns one of them. The environment is registered under a
name (``pkg.mod:NAME`` or ``FILE.py:NAME``), and ``run.json`` records where it came from
(``env_sources``), so ``--resume``, ``--eval-only`` and the report rebuild it in a fresh
process (``restore_envs``).

**Plug-in files.** ``--plugins FILE.py|MODULE``: a user's plug-ins (learners, constraint
rules, robust methods, environments) loaded before anything reads the registries. The file
or module registers its plug-ins when imported (``rcmdp_jax.learners.register``,
``constraints.register``, ``adversary.register``, ``envs.register``). ``run.json`` records
each (``plugins``: its absolute path or module name, the SHA-256 of its source and what it
registered), so ``rcmdp report``, ``--resume`` and ``--eval-only`` import it again in a fresh
process (``restore_plugins``) and refuse a file whose source changed since the run was trained.
"""

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
import jax.numpy as jnp
import numpy as np

from rcmdp_jax import envs
from rcmdp_jax.plugin import REGISTRIES

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RECORDS: dict[str, dict] = {}  # registered name -> how it was loaded


def is_source(spec: str) -> bool:
    """Whether ``--env spec`` names a user's environment (``MODULE:NAME``, ``FILE.py:NAME``)."""
    if not isinstance(spec, str) or spec.startswith((envs.GYMNAX_PREFIX, envs.BRAX_PREFIX)) or ":" not in spec:
        return False
    target, _, attr = spec.rpartition(":")
    return bool(attr.isidentifier() and (target.endswith(".py") or _MODULE.match(target)))


def folder_name(name: str) -> str:
    """A run folder's name for an environment or algorithm name: letters, digits, ``-``,
    ``_`` and ``.`` (``gymnax:Pendulum-v1@uncertain=g:0.2`` -> ``gymnax_Pendulum-v1_uncertain_g_0.2``)."""
    return _SAFE.sub("_", name).strip("_") or "_"


def _source_record(spec: str) -> tuple[str, dict]:
    """``(registered name, how to load it again)``: a file by its absolute path, a module
    with the folder it was imported from."""
    target, _, attr = spec.rpartition(":")
    if target.endswith(".py"):
        path = Path(target).expanduser().resolve()
        return f"{path.name}:{attr}", {"file": str(path), "attr": attr}
    return spec, {"module": target, "attr": attr, "path": os.getcwd()}


def _import(record: dict):
    if "file" in record:
        path = Path(record["file"])
        if not path.is_file():
            raise ValueError(f"no file {path}")
        if str(path.parent) not in sys.path:  # a module beside the file, as `python FILE.py` finds it
            sys.path.insert(0, str(path.parent))
        mod_name = "rcmdp_user_" + re.sub(r"\W", "_", path.stem)
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
        return module
    if record.get("path") and record["path"] not in sys.path:
        sys.path.insert(0, record["path"])  # a module beside the command's folder, as `python -m` finds it
    return importlib.import_module(record["module"])


def _spec(obj, where: str):
    """The ``DomainSpec`` of what ``NAME`` is (or returns)."""
    from rcmdp_jax.envs.base import RobustEnvironment
    from rcmdp_jax.envs.domain import DomainSpec, from_dict, from_env

    if callable(obj) and not isinstance(obj, (RobustEnvironment, DomainSpec)):
        obj = obj()
    if isinstance(obj, DomainSpec):
        return obj
    if isinstance(obj, RobustEnvironment):
        return from_env(obj)
    if isinstance(obj, dict) and isinstance(obj.get("env"), RobustEnvironment):
        return from_dict(obj)
    raise ValueError(f"{where} is a {type(obj).__name__}; it must be a RobustEnvironment (e.g. envs.robustify(...)), "
                     "an envs.DomainSpec, a dict {'env': ..., 'learner': {...}, 'n_test': N}, or a function returning "
                     "one")  # fmt: skip


def load_env(record: dict, name: str) -> str:
    """Import the environment of ``record`` and register it as ``name``; ``ValueError``
    in one line if that fails."""
    where = f"{record.get('file') or record.get('module')}:{record['attr']}"
    try:
        module = _import(record)
        if not hasattr(module, record["attr"]):
            raise ValueError(f"{where}: the module has no {record['attr']!r}")
        envs.register(name, _spec(getattr(module, record["attr"]), where))
        _RECORDS[name] = record
        return name
    except (Exception, SystemExit) as err:  # the user's code: any error (sys.exit too), said in one line
        msg = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"cannot load {where}: {type(err).__name__}: {msg}") from None


def load_object(spec: str):
    """What ``MODULE:NAME`` / ``FILE.py:NAME`` names (e.g. a controller for ``rcmdp
    feasibility``); ``ValueError`` in one line if it cannot be imported."""
    if not is_source(spec):
        raise ValueError(f"{spec!r} is not PACKAGE.MODULE:NAME or FILE.py:NAME")
    record = _source_record(spec)[1]
    where = f"{record.get('file') or record.get('module')}:{record['attr']}"
    try:
        module = _import(record)
    except (Exception, SystemExit) as err:  # the user's code: any error, said in one line
        msg = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"cannot load {where}: {type(err).__name__}: {msg}") from None
    if not hasattr(module, record["attr"]):
        raise ValueError(f"{where}: the module has no {record['attr']!r}")
    return getattr(module, record["attr"])


def load_spec(spec: str) -> tuple[str, dict]:
    """Load ``--env spec``: ``(registered name, its record for run.json)``."""
    name, record = _source_record(spec)
    return load_env(record, name), record


def restore_envs(plan: dict) -> None:
    """Register the user environments a saved plan names (``env_sources``), once;
    ``ValueError`` in one line for an environment this process cannot rebuild, or one
    that is not the environment the run was trained on (``check_described``)."""
    names, saved = plan.get("envs"), plan.get("env_sources") or {}
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return  # ``run_plan.plan_problem`` names it
    if not isinstance(saved, dict) or not all(isinstance(r, dict) and isinstance(r.get("attr"), str)
                                              and isinstance(r.get("file") or r.get("module"), str)
                                              for r in saved.values()):  # fmt: skip
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


def check_described(name: str, described, ignore=()) -> None:
    """``ValueError`` in one line unless ``described`` (a plan's ``env_descriptions``) holds
    ``name``'s ``description`` now, naming what differs; the keys in ``ignore`` are not
    compared."""
    if not isinstance(described, dict) or not isinstance(described.get(name), dict):
        raise ValueError(f"env_descriptions has no description of {name!r}; it was edited: restore it")
    now, was = description(name), described[name]
    same = lambda a, b: json.dumps(a) == json.dumps(b)  # as JSON: True is not 1.0
    if differ := sorted(k for k in {*now, *was} - {*ignore} if not same(now.get(k), was.get(k))):
        differ = [_per_field(name, k, now.get(k), was.get(k)) for k in differ]
        said = ", ".join(differ[:4]) + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
        raise ValueError(f"environment {name!r} is not the one this run was trained on ({said} "
                         f"{'differs' if len(differ) == 1 else 'differ'}): register or load that environment, "
                         "or train a new run")  # fmt: skip


def _per_field(name: str, key: str, now, was) -> str:
    """``params.kappa`` as the box's fields it changed: ``params.kappa (mass: 0.3 -> 0.6)``."""
    fields = getattr(envs.make(name)[0], "fields", None)
    if key not in ("params.xi", "params.xi_c", "params.kappa") or not fields:
        return key
    if not (isinstance(now, list) and isinstance(was, list) and len(now) == len(was) == len(fields)):
        return f"{key} (the uncertain fields: {', '.join(fields)})"
    short = lambda x: f"{x:.6g}" if isinstance(x, float) else json.dumps(x)  # noqa: E731  (float32's 0.2, not 0.2000000029)
    changed = [f"{f}: {short(w)} -> {short(n)}" for f, n, w in zip(fields, now, was) if json.dumps(n) != json.dumps(w)]
    return f"{key} ({'; '.join(changed)})"


def descriptions(names) -> dict:
    """``{name: description(name)}`` of the user environments among ``names`` (for run.json)."""
    return {n: description(n) for n in names if n in envs.registered()}


def _json_leaf(leaf):
    """An array as JSON: floats (of any width, bfloat16 too) as numbers, NaN and the
    infinities as strings (NaN != NaN, and strict JSON has neither); other kinds
    (complex, ...) as their text."""
    leaf = np.asarray(leaf)
    if jnp.issubdtype(leaf.dtype, jnp.floating):
        as_json = np.vectorize(lambda x: x if math.isfinite(x) else str(x), otypes=[object])
        return as_json(leaf.astype(np.float64)).tolist()
    if jnp.issubdtype(leaf.dtype, jnp.integer) or leaf.dtype == np.bool_:
        return leaf.tolist()
    return str(leaf.tolist())


def description(name: str) -> dict:
    """What ``run.json`` keeps of a user environment, so that a later ``--resume``,
    ``--eval-only`` or report can tell that the environment under ``name`` now is the one
    that trained the run: its spec's numbers and cost names, and every leaf of its default
    parameters (the box ``xi_c`` / ``kappa``, the noise, the inner environment's
    parameters). Not its code: an edited step, cost or termination is not seen."""
    spec = envs.spec(name)
    out = {k: getattr(spec, k) for k in ("gamma", "lambda_max", "episode_length", "min_episode_length", "n_test")}
    out["cost_names"] = list(spec.cost_names)
    for path, leaf in jax.tree_util.tree_flatten_with_path(envs.make(name)[1])[0]:
        out["params" + jax.tree_util.keystr(path)] = _json_leaf(leaf)
    return out


def check_folder_names(names) -> None:
    """``ValueError`` if two names would share a run folder (``folder_name``)."""
    seen: dict[str, str] = {}
    for n in names:
        if folder_name(n) in seen:
            raise ValueError(
                f"{seen[folder_name(n)]!r} and {n!r} would share the folder {folder_name(n)!r}; rename one"
            )
        seen[folder_name(n)] = n


def sources(names) -> dict:
    """``{name: record}`` of the user environments among ``names`` (for run.json)."""
    return {n: _RECORDS[n] for n in names if n in _RECORDS}


# --- plug-in files: ``--plugins FILE.py|MODULE`` ---
_PLUGINS: dict[str, dict] = {}  # file path or module name -> its record, in load order


def split_plugins(values) -> list[str]:
    """``--plugins`` given repeatedly and/or as comma lists: the names, each once."""
    out = []
    for value in values or ():
        parts = [v.strip() for v in value.split(",")]
        if not all(parts):
            raise ValueError(f"--plugins {value!r} has an empty name; give FILE.py or PACKAGE.MODULE, comma-separated")
        out += parts
    return list(dict.fromkeys(out))


def plugin_record(spec: str) -> dict:
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

    return {(r.kind, n) for r in REGISTRIES for n in r.names()} | {("environment", n) for n in envs.registered()}


def _digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _plugin_where(record: dict) -> str:
    return record.get("file") or record.get("module")


def load_plugin(record: dict) -> dict:
    """Import the plug-ins of ``record`` (once a process) and return its full record (with
    ``sha256`` and ``registers``); ``ValueError`` in one line when it cannot be imported or
    registers nothing."""

    key = _plugin_where(record)
    if key in _PLUGINS:
        return _PLUGINS[key]
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
    _PLUGINS[key] = full
    return full


def load_plugin_specs(specs) -> list[dict]:
    """``--plugins``' files and modules loaded, in order: their records."""
    return [load_plugin(plugin_record(s)) for s in split_plugins(specs)]


def loaded_plugins() -> list[dict]:
    """The records of every plug-in file and module this process loaded (for run.json)."""
    return list(_PLUGINS.values())


def restore_plugins(plan: dict) -> None:
    """Import the plug-ins a saved plan names (``plugins``) before its algorithms are read;
    ``ValueError`` in one line for one that cannot be imported, or whose source is not the one
    the run was trained with."""
    saved = plan.get("plugins") or []
    ok = lambda r: isinstance(r, dict) and isinstance(_plugin_where(r), str) and isinstance(r.get("sha256"), str)  # noqa: E731
    if not isinstance(saved, list) or not all(ok(r) for r in saved):
        raise ValueError("plugins must list each plug-in's file or module and sha256; it was edited: restore it")
    for record in saved:
        now = load_plugin({k: record[k] for k in ("file", "module", "path") if k in record})
        if now["sha256"] != record["sha256"]:
            raise ValueError(f"plug-in {_plugin_where(record)} is not the one this run was trained with (its source "
                             "changed): restore that file, or train a new run")  # fmt: skip

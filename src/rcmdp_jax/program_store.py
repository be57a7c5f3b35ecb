"""Compiled programs kept on disk between processes (``load_or_build``, ``Stored``): a process
whose programs differ from an earlier one's only in their arguments (traced numbers, a budget)
loads them without tracing. The study's runner keeps its training, robustness-test and search
programs here; a script of its own can keep any jitted function's (``Stored(jax.jit(fn), ...)``
after ``configure(folder)``).

JAX's persistent cache saves XLA's compile of a program, but finding its entry means tracing and
lowering the whole program again (seconds to minutes for a family). Here the compiled executables
themselves are serialized (``executables``) under a key known *before* tracing: what the caller
says shapes the program (``slot``, ``structure``, ``shapes``: for a family, its structure, its
arguments' shapes, the chunk, the mesh) and ``context()``: a hash of the package's own source
files (``rcmdp_jax`` and ``rcmdp_jax.envs``), the versions of JAX, jaxlib and the libraries a
program is traced from, the backend, its devices, the host CPU's instruction sets, ``XLA_FLAGS``,
the CPU's threefry lowering and JAX's settings that change arithmetic. A program built with code
from outside the package (a plug-in or an environment registered by a script) is not stored: its
code is not in the hash.

One file per program (``<key>.program``): a line of JSON (the key's parts, the payload's SHA-256
and size), then the pickled executables. An entry whose parts differ from the caller's is never
used; a miss says why it compiles (``miss_reason``), a damaged file is said, removed and compiled
again, and only regular files are read (a FIFO there would block). The folder keeps at most
``MAX_ENTRIES`` files and ``MAX_BYTES`` bytes, the least recently used dropped first. Loading a
file runs what it holds (pickle): the folder is trusted as the XLA cache beside it is
(``~/.cache/rcmdp_jax/xla/rcmdp_programs``, or the ``--compile-cache`` folder's)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import platform
import stat
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from rcmdp_jax import atomic, executables

FORMAT = 1
SUFFIX = ".program"
SUBFOLDER = "rcmdp_programs"  # inside the XLA cache folder (JAX's own files end in -cache)
MAX_ENTRIES = 48
MAX_BYTES = 1 << 30
STALE_SECONDS = 3600  # a temporary file (atomic.write_bytes') this old was left by a writer that died
# libraries whose code a program is traced from (their versions are part of the key)
LIBRARIES = ("jax", "jaxlib", "flax", "optax", "chex", "numpy", "gymnax", "brax", "mujoco", "mujoco-mjx")
# JAX settings that change what a traced program computes (beside jax_enable_x64)
JAX_CONFIG = ("jax_threefry_partitionable", "jax_default_matmul_precision", "jax_numpy_rank_promotion",
              "jax_numpy_dtype_promotion", "jax_default_prng_impl", "jax_random_seed_offset",
              "jax_softmax_custom_jvp")  # fmt: skip
# how a differing part of the key is said (parts not named here: "other shapes or devices")
WHY = {"code": "the package's code changed", "libraries": "other library versions (JAX, flax, ...)",
       "backend": "another backend", "devices": "other devices", "XLA_FLAGS": "other XLA_FLAGS",
       "threefry": "another threefry lowering", "x64": "another jax_enable_x64",
       "jax_config": "other JAX settings", "python": "another Python", "cpu": "another CPU"}  # fmt: skip
CPUINFO = Path("/proc/cpuinfo")  # where Linux says which CPU and instruction sets this machine has

_folder: list[Path | None] = [None]
counts = {"loaded": 0, "stored": 0, "missed": 0, "damaged": 0}  # for tests and curious users


def configure(folder: str | Path | None) -> None:
    """Keep programs in ``folder`` (made when the first is stored), or nowhere (None).
    ``RCMDP_JAX_PROGRAM_STORE=off`` in the environment keeps none whatever the folder."""
    off = os.environ.get("RCMDP_JAX_PROGRAM_STORE", "").lower() == "off"
    _folder[0] = None if folder is None or off else Path(folder)


def folder() -> Path | None:
    return _folder[0]


@functools.cache
def package_code() -> str:
    """SHA-256 of the package's own source files (``rcmdp_jax``, ``rcmdp_jax.envs``)."""
    import rcmdp_jax
    import rcmdp_jax.envs

    digest = hashlib.sha256()
    for pkg in (rcmdp_jax, rcmdp_jax.envs):
        root = Path(pkg.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def cpu() -> str:
    """The host CPU: its architecture, model and a hash of its instruction-set flags (Linux's
    ``CPUINFO``). XLA compiles a CPU program for the host's instruction sets: one stored on a
    machine with AVX-512 would crash another without it."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError, UnicodeDecodeError):
        for line in CPUINFO.read_text().splitlines():  # the first processor's block
            if not line.strip():
                break
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())
    flags = fields.get("flags", fields.get("Features", ""))
    model = fields.get("model name", fields.get("CPU part", platform.processor()))
    return f"{platform.machine()} {model} flags {hashlib.sha256(flags.encode()).hexdigest()[:16]}"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "-"


def context() -> dict:
    """What a program depends on beside its caller's key: code, libraries, backend, devices."""
    import jax

    from rcmdp_jax import cpu_prng

    devices = jax.devices()
    backend = devices[0].client
    return {"code": package_code(), "libraries": " ".join(f"{n}={_version(n)}" for n in LIBRARIES),
            "backend": f"{backend.platform} {backend.platform_version}",
            "devices": f"{len(devices)} x {devices[0].device_kind}", "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
            "threefry": cpu_prng.lowering(), "x64": str(jax.config.jax_enable_x64),
            "jax_config": " ".join(f"{n}={getattr(jax.config, n, None)}" for n in JAX_CONFIG),
            "python": sys.version.split()[0], "cpu": cpu()}  # fmt: skip


def describe(structure) -> dict:
    """``family.structure``'s tuple as ``{field: repr}`` (a loop's: per algorithm, ``i.field``);
    a dict (another program's own description) as it is."""
    if isinstance(structure, dict):
        return {k: str(v) for k, v in structure.items()}
    if structure and isinstance(structure[0], tuple):  # the loop layout: one structure per algorithm
        return {f"{i}.{k}": v for i, s in enumerate(structure) for k, v in describe(s).items()}
    shared, methods, rules, n = structure
    out = {f.name: repr(getattr(shared, f.name)) for f in dataclasses.fields(shared)}
    return {**out, "methods": repr(methods), "rules": repr(rules), "members": repr(n)}


def key_of(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:40]


class NotAFile(OSError):
    """A store's name held by something other than a regular file (a folder, a FIFO)."""


@contextlib.contextmanager
def _opened(path: Path):
    """``path`` open for reading if it is a regular file (``NotAFile`` else): opened without
    blocking, as a FIFO in the folder would block a plain ``open`` until something writes it."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # (no FIFOs, nor the flag, on Windows)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # checked before fdopen, which refuses a folder on its own
        os.close(fd)
        raise NotAFile(f"{path.name} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        yield f


def _stat(path: Path, field: str) -> float:
    try:
        return getattr(path.stat(), field)
    except OSError:
        return 0


def _entries(*patterns: str) -> list[Path]:
    """The folder's files matching ``patterns``, least recently used first."""
    root = folder()
    paths = [p for pat in patterns for p in root.glob(pat)] if root and root.is_dir() else []
    return sorted(paths, key=lambda p: _stat(p, "st_mtime"))


def miss_reason(parts: dict) -> str:
    """Why no stored program fits ``parts``: the parts in which the most recent entry of
    the same slot (``parts['slot']``) differs, or that none of the slot is stored."""
    for path in reversed(_entries(f"*{SUFFIX}")):
        try:
            with _opened(path) as f:
                was = json.loads(f.readline())["parts"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not isinstance(was, dict) or was.get("slot") != parts["slot"] or not isinstance(was.get("structure"), dict):
            continue  # another slot's, or a damaged header: says nothing of this one
        if was.get("structure") != parts["structure"] and all(was.get(k) == parts[k] for k in WHY):
            old, new = was["structure"], parts["structure"]
            return f"another structure ({', '.join(sorted(k for k in {**old, **new} if old.get(k) != new.get(k)))})"
        why = dict.fromkeys(WHY.get(k, "other shapes or devices") for k in parts
                            if k != "structure" and was.get(k) != parts[k])  # fmt: skip
        return "; ".join(why) or "another structure"
    return "none stored for it yet"


def load(parts: dict) -> tuple[Any, str]:
    """``(the stored programs of parts, "")``, or ``(None, why not)``."""
    if folder() is None:
        return None, ""
    path = folder() / f"{key_of(parts)}{SUFFIX}"
    try:
        with _opened(path) as f:
            head, payload = json.loads(f.readline()), f.read()
        if head.get("format") != FORMAT or head.get("parts") != parts:
            raise ValueError("its key does not match")
        if len(payload) != head["size"] or hashlib.sha256(payload).hexdigest() != head["sha256"]:
            raise ValueError("its checksum does not match")
        value = executables.loads(payload)
    except (FileNotFoundError, NotADirectoryError, NotAFile):  # none (or removed by an eviction), a folder
        counts["missed"] += 1
        return None, f"no stored program: {miss_reason(parts)}"
    except Exception as err:  # a truncated, edited or foreign file: never used, removed
        counts["damaged"] += 1
        why, gone = f"{type(err).__name__}: {err}", "removed"
        try:
            path.unlink(missing_ok=True)
        except OSError as cannot:  # a read-only folder: said, and never used all the same
            gone = f"cannot be removed ({cannot.strerror or cannot})"
        return None, f"the stored program {path.name} is damaged or cannot be loaded ({why}); {gone}"
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: evicted last
    counts["loaded"] += 1
    return value, ""


def _write(path: Path, data: bytes) -> None:
    """``data`` to ``path`` whole or not at all (a temporary file renamed), then the bound kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(path, data)
    evict(keep=path)


def save(parts: dict, value, seen: dict) -> str:
    """Store ``value``'s programs under ``parts`` (``seen``: ``executables.capturing``'s record); "" or why
    not (said, never raised)."""
    if folder() is None:
        return ""
    try:
        payload = executables.dumps(value, seen)
        head = {"format": FORMAT, "parts": parts, "sha256": hashlib.sha256(payload).hexdigest(), "size": len(payload)}
        _write(folder() / f"{key_of(parts)}{SUFFIX}", json.dumps(head, sort_keys=True).encode() + b"\n" + payload)
    except Exception as err:  # a full disk, a program XLA cannot serialize: compiled, not stored
        return f"not stored ({type(err).__name__}: {err})"
    counts["stored"] += 1
    return ""


def remembered(what: str, name: str, compute) -> Any:
    """``compute()``'s value (JSON), kept beside the programs under ``what``, the built-in
    environment ``name`` and ``context()``: a check that traces and runs a program (the
    runner's ``cost_check.cannot_bind``) is run once per environment and version of the code. A
    file whose value does not match the SHA-256 written beside it (edited, damaged) is computed again."""
    if folder() is None:
        return compute()
    path = folder() / f"{key_of({'what': what, 'name': name, **context()})}.json"
    digest = lambda v: hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest()  # noqa: E731
    try:
        with _opened(path) as f:
            kept = json.loads(f.read())
        if kept["sha256"] == digest(kept["value"]):
            os.utime(path)
            return kept["value"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    value = compute()
    with contextlib.suppress(OSError):
        _write(path, json.dumps({"what": what, "name": name, "value": value, "sha256": digest(value)}).encode())
    return value


def evict(keep: Path | None = None) -> list[Path]:
    """Drop the least recently used files (programs and ``remembered`` values) beyond
    ``MAX_ENTRIES`` or ``MAX_BYTES``, and the temporary files of writes that never finished (a
    process killed while writing: older than ``STALE_SECONDS``); the dropped."""
    stale = [p for p in _entries(".*.tmp") if time.time() - _stat(p, "st_mtime") > STALE_SECONDS]
    for path in stale:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
    entries = _entries(f"*{SUFFIX}", "*.json")
    sizes = {p: _stat(p, "st_size") for p in entries}
    total, dropped = sum(sizes.values()), []
    for path in entries:
        if len(entries) - len(dropped) <= MAX_ENTRIES and total <= MAX_BYTES:
            break
        if path == keep:
            continue
        with contextlib.suppress(OSError):  # another process's eviction, a read-only folder
            path.unlink(missing_ok=True)
        total -= sizes[path]
        dropped.append(path)
    return stale + dropped


def storable(objects, registered=()) -> str:
    """Why programs built with ``objects`` (the plug-ins they run: classes, functions, instances)
    for environments of which ``registered`` were registered in this process may not be stored;
    "" when they may."""
    import jax

    if jax.process_count() > 1:
        return "not stored: one of several processes"
    if registered:
        return f"not stored: environment {registered[0]!r} was registered in this process"
    for obj in objects:
        module = getattr(obj, "__module__", None) or type(obj).__module__
        if not (module == "rcmdp_jax" or module.startswith("rcmdp_jax.")):
            where = f"{getattr(obj, '__qualname__', type(obj).__qualname__)} of {module}"
            return f"not stored: built with code from outside the package ({where})"
    return ""


def load_or_build(slot: str, structure, shapes: str, build, objects=(), registered=()) -> tuple[Any, str, bool]:
    """``build()``'s programs, or those stored under the same key (``slot``: which program, for
    saying why a miss compiles; ``structure``: ``describe``'s; ``shapes``: the arguments' shapes,
    the chunk and the mesh; ``objects``, ``registered``: ``storable``'s). Returns ``(programs,
    what to say, loaded)``; a program built here is stored."""
    if folder() is None:
        return build(), "", False
    if why := storable(objects, registered):
        return build(), why, False
    parts = {"slot": slot, "structure": describe(structure), "shapes": shapes, **context()}
    if " at 0x" in json.dumps(parts):  # an object named by its address: no later process would match it
        return build(), "not stored: its key names an object by its address", False
    t0 = time.perf_counter()
    value, why = load(parts)
    if value is not None:
        return value, f"loaded compiled program ({time.perf_counter() - t0:.1f} s)", True
    with executables.capturing() as seen:
        value = build()
    return value, "; ".join(x for x in (why, save(parts, value, seen)) if x), False


class Stored:
    """``jitted`` (a ``jax.jit`` function) compiled per argument shapes, its program loaded from
    the store or built (``jitted.lower(...).compile()``) and stored (``slot``, ``structure``,
    ``registered``: ``load_or_build``'s); without a store, ``jitted`` itself."""

    def __init__(self, jitted, slot: str, structure: dict, registered=()):
        if static := executables.static_arguments(jitted):  # each would be traced as an array
            raise ValueError(f"Stored: jitted has static arguments {static}; a stored program takes arrays and "
                             "numbers only: close over the static ones (jax.jit(functools.partial(f, n=3)))")  # fmt: skip
        self.jitted, self.slot, self.structure, self.registered = jitted, slot, structure, registered
        self.programs: dict = {}
        self.loaded, self.note = False, ""  # whether the last program came from the store; what its store said

    def __call__(self, *args):
        import jax

        if folder() is None:  # no store: jit's own path
            return self.jitted(*args)

        def spec(x):
            sharding = x.sharding if isinstance(x, jax.Array) and x.committed else None  # as jit places it
            dtype = jax.dtypes.canonicalize_dtype(x.dtype if hasattr(x, "dtype") else np.result_type(x))
            weak = getattr(x, "weak_type", False) or type(x) in (int, float, complex)  # a Python number: as jit
            return jax.ShapeDtypeStruct(np.shape(x), dtype, sharding=sharding, weak_type=weak)

        specs = jax.tree.map(spec, args)
        leaves = [(s.shape, str(s.dtype), s.weak_type, str(s.sharding)) for s in jax.tree.leaves(specs)]
        shapes = f"{jax.tree.structure(specs)} {leaves}"
        if shapes not in self.programs:
            build = lambda: self.jitted.lower(*specs).compile()  # noqa: E731
            stored = load_or_build(self.slot, self.structure, shapes, build, (), self.registered)
            program, self.note, self.loaded = stored
            if self.note.startswith("the stored program"):  # damaged: compiled again, and said
                print(f"rcmdp_jax: note: {self.slot}: {self.note}", file=sys.stderr)
            self.programs[shapes] = program
        return self.programs[shapes](*args)


def policy_program(what: str, env: str, built_from: tuple, **more):
    """What wraps the jitted program ``what`` (``sweep``, ``search``) of a trained policy in a
    ``Stored``: keyed on ``built_from`` (the environment, the policy's shape: the runner's
    ``chunked.policy_key``) and ``more``."""
    names = ("env", "policy_hidden", "dropout_rng", "init")
    registered = [env] if isinstance(built_from[0], tuple) else []  # envs.register's: by identity
    return lambda jitted: Stored(jitted, f"{what} {env}", {**dict(zip(names, built_from)), **more}, registered)

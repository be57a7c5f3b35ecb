"""Compiled JAX programs to bytes and back (``dumps``, ``loads``), for ``program_store``: a
program serialized in one process runs in another without being traced or compiled again.

``jax.experimental.serialize_executable`` as of JAX 0.10 does not round-trip on the CPU:
measured on jaxlib 0.10.2, a program serialized with it and loaded in a new process failed
with ``Function ..._fusion not found`` when run, and one that calls LAPACK (the orthogonal
init's QR) crashed the process. Three differences from it make it work, each what JAX's own
persistent cache does:

* an executable is written with ``LoadedExecutable.serialize()`` (the cache's writer), not
  ``Client.serialize_executable``;
* an executable that XLA did not compile but read from the persistent cache serializes
  without its object code (measured: 9.9 kB against 18.0 kB for a small program, and the same
  ``not found`` error when loaded), so the bytes the cache read are kept for it while
  ``capturing`` (a hook on the cache's reader, ``_hook``);
* LAPACK's function table is filled before loading (JAX fills it when it lowers a LAPACK call,
  which a loaded program never does).

Every use of JAX's private names is here; if they move, ``dumps`` raises and the program is
compiled, not stored."""

from __future__ import annotations

import contextlib
import io
import pickle
import threading

_local = threading.local()  # the bytes the persistent cache read in this thread, while capturing


def _hook() -> None:
    """Wrap the persistent cache's reader once, to keep the bytes of each executable it loads."""
    from jax._src import compilation_cache as cc

    if getattr(cc.get_executable_and_time, "_rcmdp_hook", False):
        return
    original = cc.get_executable_and_time

    def reading(cache_key, compile_options, backend, executable_devices):
        executable, compile_time = original(cache_key, compile_options, backend, executable_devices)
        seen = getattr(_local, "seen", None)
        if executable is not None and seen is not None:
            try:
                entry = cc.decompress_executable(cc._get_cache(backend).get(cache_key))
                seen[id(executable)] = (executable, cc.extract_executable_and_time(entry)[0])
            except Exception:  # the entry went (evicted) or JAX moved: this executable is not stored
                seen[id(executable)] = (executable, None)
        return executable, compile_time

    reading._rcmdp_hook = True
    cc.get_executable_and_time = reading


@contextlib.contextmanager
def capturing():
    """While the block compiles, keep the bytes of every executable the cache reads (``dumps``
    needs them); yields the record for ``dumps``."""
    try:
        _hook()
    except (ImportError, AttributeError):  # JAX moved its cache's reader: nothing can be stored
        yield None
        return
    _local.seen = seen = {}
    try:
        yield seen
    finally:
        _local.seen = None


def static_arguments(jitted) -> tuple:
    """The static arguments (``static_argnums``, then ``static_argnames``) ``jax.jit`` gave
    ``jitted``; none where JAX keeps them elsewhere."""
    info = getattr(jitted, "_jit_info", None)
    return (*getattr(info, "static_argnums", ()), *getattr(info, "static_argnames", ()))


def _classes():
    from jax._src.lib import xla_client as xc

    return xc


def dumps(value, seen: dict) -> bytes:
    """``value`` (a ``jax.stages.Compiled``, or tuples and lists of them) as bytes; ``seen``:
    ``capturing``'s record of the executables the cache read (None: it could not record)."""
    import jax

    if seen is None:
        raise ValueError("this JAX's persistent cache cannot be read back (executables._hook)")
    xc = _classes()

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, xc.LoadedExecutable):
                kept = seen.get(id(obj))
                if kept is None or kept[0] is not obj:
                    return ("exec", obj.serialize())  # compiled here: whole
                if kept[1] is None:
                    raise ValueError("the persistent cache's bytes of a program could not be read back")
                return ("exec", kept[1])
            if isinstance(obj, xc.Device):
                return ("device", obj.id)
            if isinstance(obj, xc.Client):
                return ("client",)
            return None

    def pack(v):
        if isinstance(v, jax.stages.Compiled):
            unloaded = v._executable._unloaded_executable
            if unloaded is None or v._params.const_args or getattr(getattr(unloaded, "mut", None), "in_mut", None):
                raise ValueError("this program cannot be serialized")
            flat, in_tree = jax.tree.flatten(v.args_info)
            devices = [d.id for d in v.runtime_executable().local_devices()]
            with io.BytesIO() as f:
                Pickler(f).dump((unloaded, flat, v._no_kwargs))
                return ("compiled", f.getvalue(), in_tree, v.out_tree, devices)
        return type(v)(pack(x) for x in v)

    return pickle.dumps(pack(value))


def loads(data: bytes):
    """``dumps``' value again, its programs loaded onto this process's devices."""
    import jax
    from jax._src.lax import linalg

    xc = _classes()
    linalg.initialize_lapack()  # LAPACK's function table: a loaded QR would call through nulls
    backend = jax.devices()[0].client
    by_id = {d.id: d for d in jax.devices()}

    def unpack(v):
        if not (isinstance(v, tuple) and v and v[0] == "compiled"):
            return type(v)(unpack(x) for x in v)
        payload, in_tree, out_tree, ids = v[1:]
        devices = xc.DeviceList(tuple(by_id[i] for i in ids))

        class Unpickler(pickle.Unpickler):
            def persistent_load(self, pid):
                if pid[0] == "exec":
                    return backend.deserialize_executable(pid[1], devices, None)
                if pid[0] == "device":
                    return by_id[pid[1]]
                if pid[0] == "client":
                    return backend
                raise pickle.UnpicklingError(f"unknown persistent id {pid[0]!r}")

        unloaded, flat, no_kwargs = Unpickler(io.BytesIO(payload)).load()
        return jax.stages.Compiled(unloaded.load(), [], in_tree.unflatten(flat), out_tree, no_kwargs=no_kwargs)

    return unpack(pickle.loads(data))

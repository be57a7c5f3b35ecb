"""Compiled programs: a family of algorithms compiled ahead of time and trained in chunks
with progress (the lane layout over devices, ``Prepared``; the chunked loop,
``train_prepared``; ``ticking``, the line while a program compiles), and the compiled
programs kept for the life of the process (``cached``, keyed on what they are built from;
``counts``, ``clear``) that the family, the sweep, the search and ``policy`` share."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np


def fmt(seconds: float) -> str:
    return f"{seconds:5.1f}s" if seconds < 120 else f"{seconds / 60:5.1f}min"


# seconds between the lines that say a program is still compiling (none for a shorter compile)
TICK_S = 15.0


@contextlib.contextmanager
def ticking(label: str, what: str, since: float | None = None, every: float | None = None):
    """While the block runs (a compile, or waiting for one), a line every ``every`` seconds
    (``TICK_S``): ``{label} {what}: 45.0s so far``, counted from ``since`` (a
    ``time.perf_counter()``; default now). Nothing is printed for a block that ends sooner."""
    t0 = time.perf_counter() if since is None else since
    every = TICK_S if every is None else every
    done = threading.Event()

    def tick():
        while not done.wait(every):
            print(f"{label} {what}: {fmt(time.perf_counter() - t0)} so far", flush=True)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


# iteration slots per chunk, whatever the budget: the program runs one chunk and takes the run's
# iterations as an argument (the last chunk's slots past the end do nothing), so the short and
# the long budget run one program. An episodic learner's slot is one episode (MCPMD), a batch
# learner's one batch of n_envs x n_steps.
CHUNK_SLOTS = {"episodic": 100, "batch": 5}


def chunk_size(cfg) -> int:
    """The iteration slots of one chunk of ``cfg``'s runs (``CHUNK_SLOTS``)."""
    return CHUNK_SLOTS["episodic" if cfg.episodic else "batch"]


class Prepared:
    """A family of algorithms (``rcmdp_jax.family``) compiled and ready to train. With
    ``--vmap`` all members x seeds run in one vmapped program; with ``--no-vmap`` each
    algorithm and seed runs alone.

    It is built in a background thread while the previous family trains, so building
    only traces, lowers and compiles (from abstract shapes): it executes nothing and
    moves no data (device work from two threads at once was one of the places the
    init program's LAPACK deadlock showed: docs/known_issues.md); ``start`` (main
    thread) makes the arrays and the initial state.

    The compiled programs are kept per process under the family's structure
    (``family.structure``): its members' hyperparameters, ``Variant``s and budget are arguments
    (``tables``, ``total``), and a chunk is ``CHUNK_SLOTS`` iterations whatever the budget, so
    a family whose only changes are numbers or the budget runs a program compiled before (in
    this process, or loaded untraced from the program store by a new one: ``program_store``).

    On a mesh, each device runs the program on its own lanes (``on_devices``), which
    are dealt out to the devices in turn (``order``). ``make_family``, ``on_devices``
    and ``order`` are methods so that ``experiments/bench_families.py`` can time the
    program without them."""

    def __init__(self, cfgs, keys: np.ndarray, use_vmap: bool, mesh=None):
        t0 = time.perf_counter()
        self.cfgs, self.keys, self.use_vmap, self.mesh = cfgs, np.asarray(keys), use_vmap, mesh
        self.n_iter = cfgs[0].num_iterations
        self.chunk = chunk_size(cfgs[0])
        self.total = np.int32(self.n_iter)  # the program's argument: slots from here on do nothing
        self.loaded, self.store_note = False, ""  # from the program store (rcmdp_jax/program_store.py), what it said
        (self._compile_vmapped if use_vmap else self._compile_loop)()
        self.compile_s = time.perf_counter() - t0

    def _spec(self, x, sharded: bool, padded: bool = True):
        """Abstract value of a host array: with a mesh, its leading axis padded to the
        mesh size, and split across the mesh when ``sharded``."""
        import jax

        from rcmdp_jax.sharding import batch_sharding

        if x is None:
            return None
        shape, mesh = x.shape, self.mesh
        if mesh is None or not padded:
            return jax.ShapeDtypeStruct(shape, x.dtype)
        shape = (-(-shape[0] // mesh.size) * mesh.size,) + shape[1:]
        return jax.ShapeDtypeStruct(shape, x.dtype, sharding=batch_sharding(mesh) if sharded else None)

    def make_family(self, cfgs):
        """The family's program (``rcmdp_jax.family``)."""
        from rcmdp_jax.family import make_family

        return make_family(cfgs)

    def on_devices(self, step):
        """``step`` run by each device of the mesh on its own lanes (``shard_map``), so a
        device whose lanes all hit PPO's KL stop moves on, and ``only_where`` (LTMA)
        sorts the device's own lanes."""
        import jax
        from jax.sharding import PartitionSpec

        from rcmdp_jax.sharding import AXIS

        lanes, whole = PartitionSpec(AXIS), PartitionSpec()
        return jax.shard_map(step, mesh=self.mesh, in_specs=(lanes, lanes, whole, whole, whole), out_specs=lanes,
                             check_vma=False)  # fmt: skip

    def _compile_vmapped(self) -> None:
        """All members x seeds in one vmapped program (sharded over the mesh if any)."""
        import jax

        from rcmdp_jax.family import tables as family_tables
        from rcmdp_jax.sharding import batch_sharding

        cfgs, keys, mesh, chunk, spec = self.cfgs, self.keys, self.mesh, self.chunk, self._spec
        members = np.repeat(np.arange(len(cfgs), dtype=np.int32), keys.shape[0])
        batch_keys = np.tile(keys, (len(cfgs), 1))
        self.batches = [(batch_keys, members)]
        tables = family_tables(cfgs)  # the members' hyperparameters and Variants: the programs' argument

        def build():
            # sharded: every leaf (state, metrics, keys, members) is split on its leading axis
            split = {} if mesh is None else {"out_shardings": batch_sharding(mesh)}
            family = self.make_family(cfgs)  # one algorithm is a family of one
            init_fn = jax.vmap(lambda k, m, t: family.using(*t).init(k, m), in_axes=(0, 0, None))
            step = jax.vmap(lambda s, m, start, t, total: family.using(*t).run(s, m, start, chunk, total),
                            in_axes=(0, 0, None, None, None))  # fmt: skip
            # the initial state is computed unsharded, then split across the mesh: a sharded
            # init program (orthogonal init = LAPACK QR) also deadlocks XLA CPU on several devices
            t_spec = jax.tree.map(lambda x: spec(x, False, padded=False), tables)
            init_args = (spec(batch_keys, False), spec(members, False), t_spec)
            lowered = jax.jit(init_fn).lower(*init_args)
            init, state = lowered.compile(), lowered.out_info  # the state's shapes: init traced once
            if mesh is not None:
                sharded = batch_sharding(mesh)
                state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharded), state)
                step = self.on_devices(step)
            scalar = jax.ShapeDtypeStruct((), np.int32)
            return init, jax.jit(step, **split).lower(state, spec(members, True), scalar, t_spec, scalar).compile()

        init, step = self._compiled("vmap", build)
        self.init = lambda k, m: init(k, m, tables)
        self.step = lambda state, m, start: step(state, m, start, tables, self.total)

    def _compile_loop(self) -> None:
        """A Python loop over algorithms and seeds; the step is compiled per algorithm."""
        import jax

        from rcmdp_jax.family import tables as family_tables

        keys, chunk, spec = self.keys, self.chunk, self._spec
        self.batches = [(keys[i], m) for m in range(len(self.cfgs)) for i in range(keys.shape[0])]
        tables = [family_tables([c]) for c in self.cfgs]  # each algorithm a family of one

        def build():
            families = [self.make_family([c]) for c in self.cfgs]
            scalar = jax.ShapeDtypeStruct((), np.int32)
            inits, steps = [], []
            for f, t in zip(families, tables):
                t_spec = jax.tree.map(lambda x: spec(x, False, padded=False), t)
                init_fn = lambda k, t, f=f: f.using(*t).init(k, 0)
                lowered = jax.jit(init_fn).lower(spec(keys[0], False), t_spec)
                inits.append(lowered.compile())
                state = lowered.out_info
                run = lambda s, start, t, total, f=f: f.using(*t).run(s, 0, start, chunk, total)
                steps.append(jax.jit(run).lower(state, scalar, t_spec, scalar).compile())
            return inits, steps

        inits, steps = self._compiled("loop", build)
        self.init = lambda k, m: inits[m](k, tables[m])
        self.step = lambda state, m, start: steps[m](state, start, tables[m], self.total)

    def _compiled(self, layout: str, build):
        """``build()``, kept for the process (``cached``) under what it is built
        from; a subclass (a benchmark's variant) builds its own each time."""
        if type(self) is not Prepared:
            return build()
        from rcmdp_jax.family import plugins, structure

        envs_ = tuple(env_identity(c.env) for c in self.cfgs)
        shape = structure(self.cfgs) if layout == "vmap" else tuple(structure([c]) for c in self.cfgs)
        used = plugins(self.cfgs)  # the plug-ins its lanes run, not every registered one
        key = ("family", layout, shape, envs_, used, self.keys.shape, str(self.keys.dtype), self.mesh,
               self.chunk)  # fmt: skip
        return cached(key, lambda: self._stored(layout, shape, envs_, used, build))

    def _stored(self, layout: str, shape, envs_, used, build):
        """``build()``, or the programs a process built before (``program_store``)."""
        from rcmdp_jax import program_store

        mesh = None if self.mesh is None else (self.mesh.axis_names, [d.id for d in self.mesh.devices.flat])
        slot = f"{layout} {' '.join(dict.fromkeys(c.env for c in self.cfgs))} {self.cfgs[0].learner}"
        shapes = f"keys {self.keys.shape} {self.keys.dtype}, chunk {self.chunk}, mesh {mesh}"
        objects = [obj for kind in used for _, obj in kind]
        registered = [e[0] for e in envs_ if isinstance(e, tuple)]
        value, self.store_note, self.loaded = program_store.load_or_build(slot, shape, shapes, build, objects,
                                                                          registered)  # fmt: skip
        return value

    def start(self, keys, members):
        """(main thread) The initial state of one batch and the members argument of the step."""
        import jax

        from rcmdp_jax.sharding import batch_sharding, pad_leading

        if not self.use_vmap or self.mesh is None:
            return self.init(keys, members), members

        def pad(x):
            return None if x is None else pad_leading(x, self.mesh.size)[self.order]

        # through the host: the init program finishes, then host memory is split across the
        # devices (a sharded init program can hang XLA CPU: docs/known_issues.md)
        state = jax.tree.map(np.asarray, self.init(pad(keys), pad(members)))
        state = jax.device_put(state, batch_sharding(self.mesh))
        placed = None if members is None else jax.device_put(pad(members), batch_sharding(self.mesh))
        return state, placed

    @functools.cached_property
    def order(self) -> np.ndarray:
        """The lanes (members x seeds, padded to the mesh) in the order the devices take
        them in blocks: dealt out in turn (device ``d`` gets lanes ``d, d + D, ...``), so
        every device gets its share of each member and of the robust lanes' LTMA work."""
        n = len(self.batches[0][0]) if self.use_vmap else 1
        d = 1 if self.mesh is None else self.mesh.size
        n = -(-n // d) * d
        return np.concatenate([np.arange(i, n, d) for i in range(d)])


def by_member(prep: Prepared, tree) -> list:
    """A tree of the vmapped layout (leading axis: the lanes, members x seeds, in the
    devices' order on a mesh) as one tree per member, leading axis the seeds."""
    import jax

    from rcmdp_jax.sharding import unshard

    n_seeds, n_members = prep.keys.shape[0], len(prep.cfgs)
    tree = jax.tree.map(host, tree)
    if prep.mesh is not None:  # back from the devices' order (Prepared.order), then trimmed
        back = np.argsort(prep.order)
        tree = unshard(jax.tree.map(lambda x: x[back], tree), n_seeds * n_members)
    return [jax.tree.map(lambda x, i=i: x[i * n_seeds : (i + 1) * n_seeds], tree) for i in range(n_members)]


def host(x):
    """``x`` in host memory (NumPy) when this process holds all of it: the reordering, slicing and
    joining of the results then run no small compiled programs (one per leaf shape, 0.1-0.3 s each)."""
    return np.asarray(x) if getattr(x, "is_fully_addressable", True) else x


def log_chunk(prep: Prepared, log, metrics, start: int, batch: int) -> None:
    """One chunk's metrics to the training log (``orchestrate.TrainingLog``): every member's
    seeds (vmapped), or batch ``batch``'s one member and seed (a loop). A run of several
    processes holds only its own lanes here: its log is written whole at the end."""
    import jax

    if log is None or jax.process_count() > 1:
        return
    host = jax.tree.map(np.asarray, metrics)
    if prep.use_vmap:
        for member, tree in enumerate(by_member(prep, host)):
            log.chunk(member, tree, start)
    else:
        n_seeds = prep.keys.shape[0]
        log.chunk(batch // n_seeds, jax.tree.map(lambda x: x[None], host), start, [batch % n_seeds])


def train_prepared(prep: Prepared, label: str, log=None):
    """Train all members and seeds, printing progress per chunk and writing each chunk's
    metrics to ``log`` (an ``orchestrate.TrainingLog``, or None).

    Returns ``([TrainResult per member, leading axis = seed], train seconds)``."""
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import TrainResult

    n_iter, chunk = prep.n_iter, prep.chunk
    how = prep.store_note if prep.loaded else f"compiled in {fmt(prep.compile_s)}"
    note = f"; {prep.store_note}" if prep.store_note and not prep.loaded else ""
    print(f"{label} {how} ({n_iter} iterations, {chunk} per chunk{note})", flush=True)
    results, t_train = [], time.perf_counter()
    total_chunks = -(-n_iter // chunk) * len(prep.batches)
    done, next_report = 0, 0.0
    axis = 1 if prep.use_vmap else 0  # the metrics' iteration axis
    for batch, (keys, members) in enumerate(prep.batches):
        state, members = prep.start(keys, members)
        chunks = []
        for start in range(0, n_iter, chunk):
            state, metrics = prep.step(state, members, np.int32(start))
            metrics = jax.tree.map(host, metrics)
            if start + chunk > n_iter:  # the last chunk's slots past the run's end did nothing
                metrics = jax.tree.map(lambda x: x[(slice(None),) * axis + (slice(n_iter - start),)], metrics)
            chunks.append(metrics)
            log_chunk(prep, log, metrics, start, batch)
            done += 1
            frac = done / total_chunks
            if frac >= next_report or done == total_chunks:
                jax.block_until_ready(state)
                elapsed = time.perf_counter() - t_train
                eta = elapsed / frac - elapsed
                print(f"{label} {100 * frac:5.1f}%  elapsed {fmt(elapsed)}  ETA {fmt(eta)}", flush=True)
                next_report = frac + 0.2
        metrics = jax.tree.map(
            lambda *xs: (np if isinstance(xs[0], np.ndarray) else jnp).concatenate(xs, axis), *chunks
        )
        results.append(TrainResult(state=state, metrics=metrics))
    n_seeds, n_members = prep.keys.shape[0], len(prep.cfgs)
    if prep.use_vmap:
        per_member = by_member(prep, results[0])
    else:
        per_member = [jax.tree.map(lambda *xs: np.stack([host(x) for x in xs]), *results[i * n_seeds : (i + 1) * n_seeds])
                      for i in range(n_members)]  # fmt: skip
    jax.block_until_ready(per_member)
    return per_member, time.perf_counter() - t_train


# --- compiled programs kept for the life of the process ---
# A second study in the same process (a notebook running ``main`` again, a ``--resume``, the test
# suite) takes the compiled family, sweep, search and checkpoint layout from here instead of
# tracing, lowering and compiling them again. A key holds everything a program is built from: the
# configurations (for a family its structure, ``family.structure``), the shapes, the devices,
# each environment's identity (``envs.register`` may give a name another environment) and, for a
# family, the plug-ins its lanes run (``family.plugins``), by identity: one changed in place is
# not seen (call ``clear()``).

MAX_PROGRAMS = 32  # the oldest are dropped beyond this (a compiled family is a few MB)

_programs: OrderedDict = OrderedDict()
_lock = threading.Lock()  # families are compiled in a background thread
counts = {"built": 0, "reused": 0}  # for tests and curious users
_specs: dict[int, Any] = {}  # registered specs that keys name by id, kept alive so no id is reused


def env_identity(name: str) -> Any:
    """What an environment name stands for now: the registered spec itself (by identity)
    for ``envs.register``'s names, the name for the others (built from it alone)."""
    from rcmdp_jax import envs

    registered = envs.registered_spec(name)
    if registered is None:
        return name
    _specs[id(registered)] = registered
    return name, id(registered)


def policy_key(env: str, cfg) -> tuple:
    """What a program that runs ``cfg``'s trained policy is built from (the sweep, the
    search): the environment and the actor's shape, not the training (the discount: an argument)."""
    return env_identity(env), cfg.policy_hidden, cfg.dropout_rng, cfg.init


def cached(key: tuple, build: Callable[[], Any]) -> Any:
    """``build()``'s value under ``key``, built once per process (``MAX_PROGRAMS`` kept)."""
    with _lock:
        if key in _programs:
            _programs.move_to_end(key)
            counts["reused"] += 1
            return _programs[key]
    value = build()  # outside the lock: compiling takes seconds to minutes
    with _lock:
        counts["built"] += 1
        _programs[key] = value
        while len(_programs) > MAX_PROGRAMS:
            _programs.popitem(last=False)
    return value


def clear() -> None:
    with _lock:
        _programs.clear()
        _specs.clear()

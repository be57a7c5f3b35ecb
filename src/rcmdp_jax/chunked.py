"""A family compiled once and trained in chunks: ``Prepared`` (the programs, the lanes over the
devices), ``train_prepared`` (the chunks, a callback after each, a snapshot now and then that a
stopped run continues from); and the compiled programs kept for the life of the process
(``cached``) that the family, the sweep, the search and ``load_policy`` share. The study's runner
and ``--budget auto`` (``auto_budget``) train this way."""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from rcmdp_jax.envs.numbers import program_key, program_numbers

# iteration slots per chunk, whatever the budget: the program takes the run's iterations as an
# argument (the last chunk's slots past the end do nothing), so every budget runs one program.
# An episodic learner's slot is one episode (MCPMD), a batch learner's one batch.
CHUNK_SLOTS = {"episodic": 100, "batch": 5}


def fmt(seconds: float) -> str:
    return f"{seconds:5.1f}s" if seconds < 120 else f"{seconds / 60:5.1f}min"


class Prepared:
    """A family of ``cfgs`` (``rcmdp_jax.family``) compiled for the seeds ``keys``, ``chunk``
    iterations a call (default ``CHUNK_SLOTS``): with ``use_vmap`` all members x seeds in one
    vmapped program, split over ``mesh``'s devices if any; else each algorithm and seed alone.

    Building only traces, lowers and compiles (from abstract shapes; a background thread may
    build while another family trains: device work from two threads was one of the places the
    LAPACK deadlock showed, docs/known_issues.md); ``start`` makes the arrays. The programs are
    kept under the family's structure (``family.structure``): the members' numbers and the budget
    are arguments, so a family that changes only those runs a program built before (``cached``,
    ``program_store``). ``make_family``, ``on_devices`` and ``order`` are methods so that
    ``experiments/bench_families.py`` can time the program without them."""

    def __init__(self, cfgs, keys: np.ndarray, use_vmap: bool, mesh=None, chunk: int | None = None):
        t0 = time.perf_counter()
        self.cfgs, self.keys, self.use_vmap, self.mesh = cfgs, np.asarray(keys), use_vmap, mesh
        self.n_iter = cfgs[0].num_iterations
        self.chunk = chunk or CHUNK_SLOTS["episodic" if cfgs[0].episodic else "batch"]
        self.total = np.int32(self.n_iter)  # the program's argument: slots from here on do nothing
        self.loaded, self.store_note = False, ""  # from the program store, and what it said
        self.numbers = env_numbers(cfgs[0].env)  # the environment's numbers: the initial state's argument
        (self._compile_vmapped if use_vmap else self._compile_loop)()
        self.compile_s = time.perf_counter() - t0

    def _spec(self, x, sharded: bool, padded: bool = True):
        """Abstract value of a host array: with a mesh, its leading axis padded to the mesh size,
        and split across the mesh when ``sharded``."""
        import jax

        from rcmdp_jax.sharding import batch_sharding

        if x is None or self.mesh is None or not padded:
            return None if x is None else jax.ShapeDtypeStruct(x.shape, x.dtype)
        shape = (-(-x.shape[0] // self.mesh.size) * self.mesh.size,) + x.shape[1:]
        return jax.ShapeDtypeStruct(shape, x.dtype, sharding=batch_sharding(self.mesh) if sharded else None)

    def make_family(self, cfgs):
        from rcmdp_jax.family import make_family

        return make_family(cfgs)

    def on_devices(self, step):
        """``step`` run by each device on its own lanes (``shard_map``): a device whose lanes all
        hit PPO's KL stop moves on, and ``only_where`` (LTMA) sorts the device's own lanes."""
        import jax
        from jax.sharding import PartitionSpec as P

        from rcmdp_jax.sharding import AXIS

        specs = (P(AXIS), P(AXIS), P(), P(), P())
        return jax.shard_map(step, mesh=self.mesh, in_specs=specs, out_specs=P(AXIS), check_vma=False)

    def _compile_vmapped(self) -> None:
        import jax

        from rcmdp_jax.family import tables as family_tables
        from rcmdp_jax.sharding import batch_sharding

        cfgs, keys, mesh, chunk, spec = self.cfgs, self.keys, self.mesh, self.chunk, self._spec
        members = np.repeat(np.arange(len(cfgs), dtype=np.int32), keys.shape[0])
        batch_keys = np.tile(keys, (len(cfgs), 1))
        self.batches = [(batch_keys, members)]
        tables = family_tables(cfgs)  # the members' hyperparameters and Variants: the programs' argument
        numbers = self.numbers

        def build():
            split = {} if mesh is None else {"out_shardings": batch_sharding(mesh)}  # every leaf split
            family = self.make_family(cfgs)
            init_fn = jax.vmap(lambda k, m, t, e: family.using(*t).init_at(k, m, e), in_axes=(0, 0, None, None))
            run = lambda s, m, start, t, total: family.using(*t).run(s, m, start, chunk, total)
            step = jax.vmap(run, in_axes=(0, 0, None, None, None))
            # the initial state is computed unsharded, then split across the mesh: a sharded init
            # program (orthogonal init = LAPACK QR) deadlocks XLA CPU on several devices
            t_spec = jax.tree.map(lambda x: spec(x, False, padded=False), tables)
            e_spec = jax.tree.map(lambda x: spec(x, False, padded=False), numbers)
            lowered = jax.jit(init_fn).lower(spec(batch_keys, False), spec(members, False), t_spec, e_spec)
            state = lowered.out_info  # the state's shapes: init traced once
            if mesh is not None:
                sharded = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=split["out_shardings"])
                state, step = jax.tree.map(sharded, state), self.on_devices(step)
            scalar = jax.ShapeDtypeStruct((), np.int32)
            with ThreadPoolExecutor(1) as beside:  # XLA compiles the initial state while the chunk is traced
                init = beside.submit(lowered.compile)
                train = jax.jit(step, **split).lower(state, spec(members, True), scalar, t_spec, scalar).compile()
            return init.result(), train

        init, step = self._compiled("vmap", build)
        self.init = lambda k, m: init(k, m, tables, numbers)
        self.step = lambda state, m, start: step(state, m, start, tables, self.total)

    def _compile_loop(self) -> None:
        """A Python loop over algorithms and seeds; a program per algorithm."""
        import jax

        from rcmdp_jax.family import tables as family_tables

        keys, spec = self.keys, self._spec
        self.batches = [(keys[i], m) for m in range(len(self.cfgs)) for i in range(keys.shape[0])]
        tables = [family_tables([c]) for c in self.cfgs]  # each algorithm a family of one
        numbers = self.numbers

        def build():
            scalar, inits, steps = jax.ShapeDtypeStruct((), np.int32), [], []
            e_spec = jax.tree.map(lambda x: spec(x, False, padded=False), numbers)
            with ThreadPoolExecutor(1) as beside:  # XLA compiles each initial state while its chunk is traced
                for f, t in zip([self.make_family([c]) for c in self.cfgs], tables):
                    t_spec = jax.tree.map(lambda x: spec(x, False, padded=False), t)
                    start = lambda k, t, e, f=f: f.using(*t).init_at(k, 0, e)
                    lowered = jax.jit(start).lower(spec(keys[0], False), t_spec, e_spec)
                    inits.append(beside.submit(lowered.compile))
                    run = lambda s, start, t, total, f=f: f.using(*t).run(s, 0, start, self.chunk, total)
                    steps.append(jax.jit(run).lower(lowered.out_info, scalar, t_spec, scalar).compile())
            return [i.result() for i in inits], steps

        inits, steps = self._compiled("loop", build)
        self.init = lambda k, m: inits[m](k, tables[m], numbers)
        self.step = lambda state, m, start: steps[m](state, start, tables[m], self.total)

    def _compiled(self, layout: str, build):
        """``build()``, kept for the process (``cached``) and in the program store under what it is
        built from; a subclass (a benchmark's variant) builds its own each time."""
        if type(self) is not Prepared:
            return build()
        from rcmdp_jax import program_store
        from rcmdp_jax.family import plugins, structure

        envs_ = tuple(env_identity(c.env, program=True) for c in self.cfgs)
        shape = structure(self.cfgs) if layout == "vmap" else tuple(structure([c]) for c in self.cfgs)
        used = plugins(self.cfgs)  # the plug-ins its lanes run, not every registered one
        key = ("family", layout, shape, envs_, used, self.keys.shape, str(self.keys.dtype), self.mesh, self.chunk)

        def stored():
            mesh = None if self.mesh is None else (self.mesh.axis_names, [d.id for d in self.mesh.devices.flat])
            slot = f"{layout} {' '.join(dict.fromkeys(program_key(c.env) for c in self.cfgs))} {self.cfgs[0].learner}"
            shapes = f"keys {self.keys.shape} {self.keys.dtype}, chunk {self.chunk}, mesh {mesh}"
            objects = [obj for kind in used for _, obj in kind]
            registered = [e[0] for e in envs_ if isinstance(e, tuple)]
            value, self.store_note, self.loaded = program_store.load_or_build(
                slot, shape, shapes, build, objects, registered
            )
            return value

        return cached(key, stored)

    def start(self, keys, members):
        """(main thread) The initial state of one batch and the members argument of the step."""
        import jax

        from rcmdp_jax.sharding import batch_sharding, pad_leading

        if not self.use_vmap or self.mesh is None:
            return self.init(keys, members), members
        pad = lambda x: None if x is None else pad_leading(x, self.mesh.size)[self.order]
        # through the host: the init program finishes, then host memory is split across the
        # devices (a sharded init program can hang XLA CPU: docs/known_issues.md)
        state = jax.device_put(jax.tree.map(np.asarray, self.init(pad(keys), pad(members))), batch_sharding(self.mesh))
        return state, None if members is None else jax.device_put(pad(members), batch_sharding(self.mesh))

    @functools.cached_property
    def order(self) -> np.ndarray:
        """The lanes (members x seeds, padded to the mesh) dealt out to the devices in turn
        (device ``d`` gets lanes ``d, d + D, ...``): each gets its share of every member."""
        n = len(self.batches[0][0]) if self.use_vmap else 1
        d = 1 if self.mesh is None else self.mesh.size
        return np.concatenate([np.arange(i, -(-n // d) * d, d) for i in range(d)])

    def by_member(self, tree) -> list:
        """A tree of the vmapped layout (leading axis: members x seeds, in the devices' order on a
        mesh) as one tree per member, leading axis the seeds."""
        import jax

        from rcmdp_jax.sharding import unshard

        n_seeds, n_members = self.keys.shape[0], len(self.cfgs)
        tree = jax.tree.map(host, tree)
        if self.mesh is not None:  # back from the devices' order, then trimmed
            tree = unshard(jax.tree.map(lambda x: x[np.argsort(self.order)], tree), n_seeds * n_members)
        return [jax.tree.map(lambda x, i=i: x[i * n_seeds : (i + 1) * n_seeds], tree) for i in range(n_members)]


def host(x):
    """``x`` in host memory (NumPy) when this process holds all of it: cutting and joining the
    results then runs no small compiled programs (one per leaf shape, 0.1-0.3 s each)."""
    return np.asarray(x) if getattr(x, "is_fully_addressable", True) else x


def train_prepared(prep: Prepared, label: str | None = None, on_chunk=None, snapshot=None):
    """Train all members and seeds chunk by chunk. After each, per member, ``on_chunk(member, metrics,
    start, seeds)``: its metrics (leaves ``[seeds, iterations, ...]`` in host memory, no rows past
    the run's end), the first iteration, the seeds (None: all); a true return stops there (the
    members and seeds begun are returned). Only where this process holds every lane (one process).
    ``label``: the progress printed (None: none).

    ``snapshot`` (a file path; the vmapped layout in one process): every ``snapshots.EVERY_S``
    seconds the state and the metrics so far are written there; a call that finds one of this
    family (the same configurations, seeds, chunk and devices) continues from it, its metrics so
    far passed to ``on_chunk`` first, and trains the numbers an uninterrupted call trains, bit for
    bit. Removed when the family is trained; one of another family is said and ignored.

    Returns ``([TrainResult per member, leading axis = seed], train seconds)``."""
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import snapshots
    from rcmdp_jax.train import TrainResult

    n_iter, chunk = prep.n_iter, prep.chunk
    if label is not None:
        how = prep.store_note if prep.loaded else f"compiled in {fmt(prep.compile_s)}"
        note = f"; {prep.store_note}" if prep.store_note and not prep.loaded else ""
        print(f"{label} {how} ({n_iter} iterations, {chunk} per chunk{note})", flush=True)
    keep = snapshot is not None and prep.use_vmap and jax.process_count() == 1
    results, t_train = [], time.perf_counter()
    total_chunks = -(-n_iter // chunk) * len(prep.batches)
    done, next_report, stop = 0, 0.0, False
    axis = 1 if prep.use_vmap else 0  # the metrics' iteration axis
    join = lambda *xs: (np if isinstance(xs[0], np.ndarray) else jnp).concatenate(xs, axis)

    def report(metrics, start, batch):
        if on_chunk is None or jax.process_count() != 1:
            return False
        if prep.use_vmap:
            parts = [(m, tree, None) for m, tree in enumerate(prep.by_member(metrics))]
        else:  # one member and seed
            n = prep.keys.shape[0]
            parts = [(batch // n, jax.tree.map(lambda x: x[None], metrics), [batch % n])]
        return any([on_chunk(m, tree, start, seeds) for m, tree, seeds in parts])

    for batch, (keys, members) in enumerate(prep.batches):
        state, members = prep.start(keys, members)
        chunks, first = [], 0
        if keep and (found := snapshots.read(snapshot, prep, state, label)) is not None:
            state, first, past = found
            chunks.append(past)
            stop = report(past, 0, batch)
            done = first // chunk
        done_here, saved_at = done, time.perf_counter()
        for start in range(first, n_iter if not stop else first, chunk):
            state, metrics = prep.step(state, members, np.int32(start))
            metrics = jax.tree.map(host, metrics)
            if start + chunk > n_iter:  # the last chunk's slots past the run's end did nothing
                metrics = jax.tree.map(lambda x: x[(slice(None),) * axis + (slice(n_iter - start),)], metrics)
            chunks.append(metrics)
            stop = report(metrics, start, batch)
            done += 1
            if keep and start + chunk < n_iter and time.perf_counter() - saved_at >= snapshots.EVERY_S:
                snapshots.write(snapshot, prep, state, start + chunk, jax.tree.map(join, *chunks))
                saved_at = time.perf_counter()
            frac = done / total_chunks
            if label is not None and (frac >= next_report or done == total_chunks):
                jax.block_until_ready(state)
                elapsed = time.perf_counter() - t_train
                eta = elapsed / (done - done_here) * (total_chunks - done)
                print(f"{label} {100 * frac:5.1f}%  elapsed {fmt(elapsed)}  ETA {fmt(eta)}", flush=True)
                next_report = frac + 0.2
            if stop:
                break
        results.append(TrainResult(state=state, metrics=jax.tree.map(join, *chunks)))
        if stop:
            break
    if prep.use_vmap:
        per_member = prep.by_member(results[0])
    else:
        n = prep.keys.shape[0]
        stack = lambda *xs: np.stack([host(x) for x in xs])
        per_member = [jax.tree.map(stack, *results[i * n : (i + 1) * n]) for i in range(-(-len(results) // n))]
    jax.block_until_ready(per_member)
    if keep and not stop:
        Path(snapshot).unlink(missing_ok=True)
    return per_member, time.perf_counter() - t_train


# --- compiled programs kept for the life of the process ---
# A second study in one process (a notebook, a ``--resume``, the tests) takes the compiled family,
# sweep, search and checkpoint layout from here. A key holds everything a program is built from:
# the configurations (a family's structure), the shapes, the devices, each environment's identity
# (``envs.register`` may give a name another environment) and a family's plug-ins by identity:
# one changed in place is not seen (call ``clear()``).

MAX_PROGRAMS = 32  # the oldest are dropped beyond this (a compiled family is a few MB)
_programs: OrderedDict = OrderedDict()
_lock = threading.Lock()  # families are compiled in a background thread
counts = {"built": 0, "reused": 0}  # for tests and curious users
_specs: dict[int, Any] = {}  # registered specs that keys name by id, kept alive so no id is reused


def env_identity(name: str, program: bool = False) -> Any:
    """What an environment name stands for now: the registered spec itself (by identity) for
    ``envs.register``'s names, the name for the others (built from it alone); ``program``: for a
    training program, whose environment numbers are arguments (``envs.numbers.program_key``)."""
    from rcmdp_jax import envs

    registered = envs.registered_spec(name)
    if registered is None:
        return program_key(name) if program else name
    _specs[id(registered)] = registered
    return name, id(registered)


def env_numbers(name: str) -> dict:
    """Environment ``name``'s numbers a training program takes as arguments (``envs.numbers``)."""
    from rcmdp_jax import envs

    return program_numbers(name, envs.make(name)[1])


def policy_key(env: str, cfg, program: bool = False) -> tuple:
    """What a program that runs ``cfg``'s trained policy is built from (the sweep, the search): the
    environment and the actor's shape, not the training (the discount: an argument); ``program``:
    the environment's numbers are arguments too (the sweep's kernels)."""
    return env_identity(env, program), cfg.policy_hidden, cfg.dropout_rng, cfg.init


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

"""The main job: train algorithms on environments (all seeds in one vmapped call
per algorithm family), run the robustness sweep, write a run folder with tables and
plots. ``experiments/run.py`` is the command users call; the logic lives here so it
is importable and testable (``rcmdp_jax.runner.main(argv)``).

    python experiments/run.py --seeds 10 --vmap
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import functools
import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from rcmdp_jax.config import (
    ALGORITHMS,
    BUDGETS,
    ENV_NAMES,
    config_from_dict,
    config_to_dict,
    parse_algorithm,
    preset,
    schedule_variants,
    split_variant,
)
from rcmdp_jax.report import write_env_report


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2, nothing written."""


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="run.py",
        description="Train robust-constrained RL algorithms and run the robustness test.",
    )
    p.add_argument(
        "--env",
        default="cartpole",
        help=f"one of {', '.join(ENV_NAMES)}, 'all' (the three; default cartpole), or a gymnax preset "
        "gymnax:ID (CartPole-v1, Pendulum-v1, Acrobot-v1, MountainCarContinuous-v0)",
    )
    p.add_argument(
        "--uncertain",
        default=None,
        metavar="FIELD=WIDTH,...",
        help="gymnax presets: the uncertain EnvParams fields and their box half-widths, relative "
        "(g=0.2: ±20%%) or absolute (g=abs:1.5); replaces the preset's box",
    )
    p.add_argument("--costs", default=None, metavar="NAME,...",
                   help="gymnax presets: which of the preset's constraint costs to keep (default: its first)")  # fmt: skip
    p.add_argument(
        "--algos",
        default="all",
        help="comma-separated algorithm names (SPEC §2), or 'all' (default); a name may carry an alpha "
        "schedule variant, e.g. MDPO-Robust-Lag:restart-batch",
    )
    p.add_argument(
        "--schedules",
        action="store_true",
        help="the schedules study: MDPO-Robust, MDPO-Robust-Lag and MDPO-Robust-Augmented-Lag under every "
        "alpha schedule ticking per epoch and per batch (one compiled program); replaces --algos",
    )
    p.add_argument("--budget", default="short", help="short|long: the SPEC §3 number of policy steps")
    p.add_argument("--steps", type=int, default=None, help="policy steps per run (overrides --budget)")
    p.add_argument("--seeds", type=int, default=10, help="number of seeds (default 10)")
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    p.add_argument(
        "--vmap", dest="vmap", action="store_true", default=True, help="all seeds in one vmapped call (default)"
    )
    p.add_argument("--no-vmap", dest="vmap", action="store_false", help="a Python loop over seeds (for comparison)")
    p.add_argument("--out", default=None, help="run folder (default runs/<timestamp>); never overwritten")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any Config/HParams field, e.g. --set eta_xi=1e-6 (repeatable)",
    )
    p.add_argument("--n-test", type=int, default=None, help="episodes per test kernel (default SPEC §4)")
    p.add_argument("--worst-case", action="store_true",
                   help="after the grid, search the uncertainty box for each seed's worst kernel by projected "
                        "gradient steps (rcmdp_jax.worst_case); adds a grid-vs-search table")  # fmt: skip
    p.add_argument("--resume", action="store_true", help="continue the run in --out, skipping finished algorithms")
    p.add_argument(
        "--eval-only", metavar="RUN_DIR", default=None, help="re-run the sweep of RUN_DIR from its checkpoints"
    )
    p.add_argument(
        "--devices",
        default="auto",
        help="'auto' (default: on a CPU one XLA device per core, else all devices), 'all' or N: "
        "shard the seeds across them",
    )
    p.add_argument(
        "--distributed",
        action="store_true",
        help="one of several processes (jax.distributed): each trains its share of the seeds, process 0 "
        "writes the run folder; under SLURM or Open MPI the next three options are found automatically",
    )
    p.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="--distributed: the coordinator (process 0) address (default: JAX_COORDINATOR_ADDRESS or "
                        "the cluster's)")  # fmt: skip
    p.add_argument("--num-processes", type=int, default=None, help="--distributed: how many processes")
    p.add_argument("--process-id", type=int, default=None, help="--distributed: this process's index, 0 .. N-1")
    p.add_argument(
        "--compile-cache",
        default=None,
        metavar="DIR|off",
        help="persistent XLA compilation cache: a re-run compiles nothing (default: JAX's own setting "
        "(JAX_COMPILATION_CACHE_DIR) if it has one, else ~/.cache/rcmdp_jax/xla)",
    )
    return p.parse_args(argv)


# fields that choose the algorithm or the run: set by --algos / --env / --steps, never by --set
ALGORITHM_FIELDS = {"learner": "--algos", "constraint": "--algos", "robust": "--algos", "name": "--algos",
                    "env": "--env"}  # fmt: skip


def parse_sets(sets) -> dict:
    out = {}
    for item in sets:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise UsageError(f"--set expects KEY=VALUE, got {item!r}")
        key, raw = (x.strip() for x in item.split("=", 1))
        if key in ALGORITHM_FIELDS:
            raise UsageError(f"--set {key}=...: {key} is chosen by {ALGORITHM_FIELDS[key]}, not --set")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = float(raw) if raw.lower() in ("inf", "+inf", "-inf") else raw
        out[key] = value
    return out


def build_plan(args) -> dict:
    """Validate every input and build all configs; raises ``UsageError``. Compiles nothing."""
    from rcmdp_jax import envs

    envs_ = list(ENV_NAMES) if args.env == "all" else [args.env]
    gymnax_env = args.env.startswith(envs.GYMNAX_PREFIX)
    if (args.uncertain is not None or args.costs is not None) and not gymnax_env:
        raise UsageError("--uncertain and --costs apply to a gymnax preset (--env gymnax:ID)")
    if "@" in args.env and (args.uncertain is not None or args.costs is not None):
        raise UsageError("--env names its box and costs with @...; drop --uncertain/--costs, or give gymnax:ID")
    for e in envs_:
        try:
            envs.check_name(e)
        except ValueError:
            from rcmdp_jax.envs.gymnax_presets import PRESETS

            presets = ", ".join(envs.GYMNAX_PREFIX + k for k in PRESETS)
            raise UsageError(f"--env {e!r} is not allowed; choose one of: {', '.join(ENV_NAMES)}, all, "
                             f"{presets}") from None  # fmt: skip
    if gymnax_env and "@" not in args.env:
        from rcmdp_jax.envs.gymnax_presets import gymnax_name

        try:
            envs_ = [gymnax_name(args.env, args.uncertain, args.costs)]
        except ValueError as err:
            raise UsageError(f"--env {args.env}: {err}") from None
    if args.schedules:
        if args.algos != "all":
            raise UsageError("--schedules chooses the algorithms itself; drop --algos")
        algos = list(schedule_variants())
    else:
        algos = list(ALGORITHMS) if args.algos == "all" else [a.strip() for a in args.algos.split(",") if a.strip()]
    if not algos:
        raise UsageError("--algos is empty")
    repeated = sorted({a for a in algos if algos.count(a) > 1})
    if repeated:
        raise UsageError(f"--algos names {', '.join(repeated)} more than once")
    for a in algos:
        try:
            parse_algorithm(split_variant(a)[0])
        except ValueError as err:
            raise UsageError(f"--algos: {err}") from None
    if args.budget not in BUDGETS:
        raise UsageError(f"--budget {args.budget!r} is not allowed; choose one of: {', '.join(BUDGETS)}")
    if args.seeds < 1:
        raise UsageError(f"--seeds must be a positive integer, got {args.seeds}")
    if not 0 <= args.seed < 2**32:
        raise UsageError(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps must be a positive integer, got {args.steps}")
    if args.n_test is not None and args.n_test < 1:
        raise UsageError(f"--n-test must be a positive integer, got {args.n_test}")
    if args.devices not in ("all", "auto") and not (args.devices.isdigit() and int(args.devices) >= 1):
        raise UsageError(f"--devices must be 'auto', 'all' or a positive integer, got {args.devices!r}")
    if args.devices.isdigit() and not args.distributed:
        from rcmdp_jax.sharding import available_cores

        limit = max(available_cores(), 1)
        if int(args.devices) > limit and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
            raise UsageError(f"--devices {args.devices}: this host has {limit} CPU core(s); ask for at most {limit}")
    overrides = parse_sets(args.sets)
    if args.steps is not None:
        if "total_timesteps" in overrides:
            raise UsageError("--steps and --set total_timesteps=... both set the budget; give one")
        overrides["total_timesteps"] = args.steps
    configs, will_run = {}, {}
    for e in envs_:
        configs[e], will_run[e] = {}, {}
        for a in algos:
            try:
                cfg = preset(e, a, args.budget, **overrides)
            except (ValueError, TypeError) as err:
                raise UsageError(f"--set: {err}") from None
            if args.steps is not None and cfg.num_iterations * cfg.batch_size != args.steps and not cfg.episodic:
                print(f"note: --steps {args.steps}: {a} on {e} runs {cfg.num_iterations} iteration(s) of "
                      f"{cfg.batch_size} policy steps = {cfg.num_iterations * cfg.batch_size} steps", file=sys.stderr)  # fmt: skip
            configs[e][a] = config_to_dict(cfg)
            # what will run, recorded in run.json: MCPMD stops once its episodes have spent the budget
            steps = cfg.total_timesteps if cfg.episodic else cfg.num_iterations * cfg.batch_size
            will_run[e][a] = {"iterations": cfg.num_iterations, "policy_steps": steps}
    return {
        "envs": envs_,
        "algos": algos,
        "seeds": args.seeds,
        "seed": args.seed,
        "vmap": args.vmap,
        "n_test": args.n_test,
        "worst_case": args.worst_case,
        "devices": args.devices,
        "configs": configs,
        "will_run": will_run,
    }


def _fmt(seconds: float) -> str:
    return f"{seconds:5.1f}s" if seconds < 120 else f"{seconds / 60:5.1f}min"


def chunk_size(n_iter: int, target_chunks: int = 10) -> int:
    """Largest divisor of ``n_iter`` not above ``n_iter / target_chunks`` (at least 1)."""
    limit = max(1, n_iter // target_chunks)
    return max(d for d in range(1, limit + 1) if n_iter % d == 0)


class Prepared:
    """A family of algorithms (``rcmdp_jax.family``) compiled and ready to train. With
    ``--vmap`` all members x seeds run in one vmapped program; with ``--no-vmap`` each
    algorithm and seed runs alone.

    It is built in a background thread while the previous family trains, so building
    only traces, lowers and compiles (from abstract shapes): it executes nothing and
    moves no data (device work from two threads at once was one of the places the
    init program's LAPACK deadlock showed: docs/known_issues.md); ``start`` (main
    thread) makes the arrays and the initial state.

    ``per_device``: on a mesh, each device runs the program on its own lanes
    (``shard_map``), so a device whose lanes all hit PPO's KL stop moves on; else one
    SPMD program over all lanes (``jit`` with shardings; they wait for each other).
    ``skip_idle_lanes``: see ``train.Step``. Both off: the program before they existed
    (``experiments/bench_families.py`` times all three)."""

    def __init__(self, cfgs, keys: np.ndarray, use_vmap: bool, mesh=None, per_device: bool = True,
                 skip_idle_lanes: bool = True):  # fmt: skip
        import jax
        from jax.sharding import PartitionSpec

        from rcmdp_jax import make_train
        from rcmdp_jax.family import make_family
        from rcmdp_jax.sharding import AXIS, batch_sharding

        t0 = time.perf_counter()
        keys = np.asarray(keys)
        self.cfgs, self.keys, self.use_vmap, self.mesh = cfgs, keys, use_vmap, mesh
        self.skip_idle_lanes = skip_idle_lanes
        self.n_iter = cfgs[0].num_iterations
        self.chunk = chunk_size(self.n_iter)
        n_seeds, chunk = keys.shape[0], self.chunk
        # sharded: every leaf (state, metrics, keys, members) is split on its leading axis
        split = {} if mesh is None else {"out_shardings": batch_sharding(mesh)}

        def spec(x, sharded: bool, padded: bool = True):
            """Abstract value of a host array: with a mesh, its leading axis padded to the
            mesh size, and split across the mesh when ``sharded``."""
            if x is None:
                return None
            shape = x.shape
            if mesh is None or not padded:
                return jax.ShapeDtypeStruct(shape, x.dtype)
            shape = (-(-shape[0] // mesh.size) * mesh.size,) + shape[1:]
            return jax.ShapeDtypeStruct(shape, x.dtype, sharding=batch_sharding(mesh) if sharded else None)

        start_spec = jax.ShapeDtypeStruct((), np.int32)
        if use_vmap:
            if len(cfgs) > 1:
                family = make_family(cfgs, skip_idle_lanes)
                members = np.repeat(np.arange(len(cfgs), dtype=np.int32), n_seeds)
                init_fn = jax.vmap(family.init)
                step = jax.vmap(lambda s, m, start: family.run(s, m, start, chunk), in_axes=(0, 0, None))
            else:
                train = make_train(cfgs[0])
                members = None
                init_fn = jax.vmap(lambda k, m: train.init(k), in_axes=(0, None))
                step = jax.vmap(lambda s, m, start: train.run(s, None, start, chunk), in_axes=(0, None, None))
            batch_keys = np.tile(keys, (len(cfgs), 1)) if members is not None else keys
            self.batches = [(batch_keys, members)]
            # the initial state is computed unsharded, then split across the mesh: a sharded
            # init program (orthogonal init = LAPACK QR) also deadlocks XLA CPU on several devices
            self.init = jax.jit(init_fn).lower(spec(batch_keys, False), spec(members, False)).compile()
            state = jax.eval_shape(init_fn, spec(batch_keys, False), spec(members, False))
            if mesh is not None:
                state = jax.tree.map(
                    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=batch_sharding(mesh)), state
                )
            if mesh is not None and per_device:
                # each device runs its own lanes: a device whose lanes all hit PPO's KL stop
                # moves on, and only_where (LTMA) sorts the device's own lanes
                lanes, whole = PartitionSpec(AXIS), PartitionSpec()
                step = jax.shard_map(step, mesh=mesh, in_specs=(lanes, lanes, whole), out_specs=lanes, check_vma=False)
            self.step = jax.jit(step, **split).lower(state, spec(members, True), start_spec).compile()
        else:  # a Python loop over algorithms and seeds; the step is compiled per algorithm
            trains = [make_train(c) for c in cfgs]
            self.batches = [(keys[i], m) for m in range(len(cfgs)) for i in range(n_seeds)]
            inits = [jax.jit(t.init).lower(spec(keys[0], False)).compile() for t in trains]
            self.init = lambda k, m: inits[m](k)
            compiled = [
                jax.jit(lambda s, start, t=t: t.run(s, None, start, chunk))
                .lower(jax.eval_shape(t.init, spec(keys[0], False)), start_spec).compile()
                for t in trains
            ]  # fmt: skip
            self.step = lambda state, m, start: compiled[m](state, start)
        self.compile_s = time.perf_counter() - t0

    def start(self, keys, members):
        """(main thread) The initial state of one batch and the members argument of the step."""
        import jax

        from rcmdp_jax.sharding import batch_sharding, pad_leading

        if not self.use_vmap or self.mesh is None:
            return self.init(keys, members), members
        pad = lambda x: None if x is None else pad_leading(x, self.mesh.size)[self.order]  # noqa: E731
        # through the host: the init program finishes, then host memory is split across the
        # devices (the init program used to hang XLA CPU: docs/known_issues.md)
        state = jax.tree.map(np.asarray, self.init(pad(keys), pad(members)))
        state = jax.device_put(state, batch_sharding(self.mesh))
        placed = None if members is None else jax.device_put(pad(members), batch_sharding(self.mesh))
        return state, placed

    @functools.cached_property
    def order(self) -> np.ndarray:
        """The lanes (members x seeds, padded to the mesh) in the order the devices take
        them in blocks: with ``skip_idle_lanes``, dealt out in turn (device ``d`` gets
        lanes ``d, d + D, ...``), so every device gets its share of each member and of
        the robust lanes' LTMA work; else in order."""
        n = len(self.batches[0][0]) if self.use_vmap else 1
        d = 1 if self.mesh is None else self.mesh.size
        n = -(-n // d) * d
        if not self.skip_idle_lanes or d == 1:
            return np.arange(n)
        return np.concatenate([np.arange(i, n, d) for i in range(d)])


def train_prepared(prep: Prepared, label: str):
    """Train all members and seeds, printing progress per chunk.

    Returns ``([TrainResult per member, leading axis = seed], train seconds)``."""
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import TrainResult
    from rcmdp_jax.sharding import unshard

    n_iter, chunk = prep.n_iter, prep.chunk
    print(f"{label} compiled in {_fmt(prep.compile_s)} ({n_iter} iterations, {chunk} per chunk)", flush=True)
    results, t_train = [], time.perf_counter()
    total_chunks = n_iter // chunk * len(prep.batches)
    done, next_report = 0, 0.0
    for keys, members in prep.batches:
        state, members = prep.start(keys, members)
        chunks = []
        for start in range(0, n_iter, chunk):
            state, metrics = prep.step(state, members, jnp.int32(start))
            chunks.append(metrics)
            done += 1
            frac = done / total_chunks
            if frac >= next_report or done == total_chunks:
                jax.block_until_ready(state)
                elapsed = time.perf_counter() - t_train
                eta = elapsed / frac - elapsed
                print(f"{label} {100 * frac:5.1f}%  elapsed {_fmt(elapsed)}  ETA {_fmt(eta)}", flush=True)
                next_report = frac + 0.2
        axis = 1 if prep.use_vmap else 0
        metrics = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=axis), *chunks)
        results.append(TrainResult(state=state, metrics=metrics))
    n_seeds, n_members = prep.keys.shape[0], len(prep.cfgs)
    if prep.use_vmap:
        result = results[0]
        if prep.mesh is not None:  # back from the devices' order (Prepared.order), then trimmed
            back = np.argsort(prep.order)
            result = unshard(jax.tree.map(lambda x: x[back], result), n_seeds * n_members)
        per_member = [jax.tree.map(lambda x, i=i: x[i * n_seeds : (i + 1) * n_seeds], result) for i in range(n_members)]
    else:
        per_member = [
            jax.tree.map(lambda *xs: jnp.stack(xs), *results[i * n_seeds : (i + 1) * n_seeds]) for i in range(n_members)
        ]
    jax.block_until_ready(per_member)
    return per_member, time.perf_counter() - t_train


def run(plan: dict, out: Path, resume: bool, eval_only: bool, mesh=None, worst_case: bool = False) -> int:
    import jax
    import numpy as np

    from rcmdp_jax import checkpoint, envs, family, make_train
    from rcmdp_jax.divergence import diverged_seeds, nonfinite_episodes
    from rcmdp_jax.evaluate import make_eval
    from rcmdp_jax.sharding import gather_blocks, process_block, sharded_blocks
    from rcmdp_jax.worst_case import corner_starts, make_worst_case

    all_keys = jax.random.split(jax.random.PRNGKey(plan["seed"]), plan["seeds"])
    block = process_block(plan["seeds"])  # this process's seeds (all of them on one host)
    keys = np.asarray(all_keys[block])  # host data: the background compile thread must not touch devices
    writer = jax.process_index() == 0

    def local(result):
        return jax.tree.map(lambda x: x[block], result)

    sweeps: dict = {}
    finders: dict = {}
    diverged_report: dict = {}
    missing_ckpt: list = []
    damaged: list = []
    plan_cfgs = {e: {a: config_from_dict(plan["configs"][e][a]) for a in plan["algos"]} for e in plan["envs"]}
    groups = {e: family.group(plan_cfgs[e]) for e in plan["envs"]}

    def ckpt_dir(e, a):
        return out / e / a / "checkpoint"

    # a family is trained (as a whole, so resumed runs give identical numbers) while any
    # member lacks a checkpoint; the next family compiles in a background thread
    todo = [
        (e, tuple(g)) for e in plan["envs"] for g in groups[e]
        if not eval_only and not all(checkpoint.exists(ckpt_dir(e, a)) for a in g)
    ]  # fmt: skip
    pool = ThreadPoolExecutor(max_workers=1)
    pending = {}

    def prepare(i):
        if i < len(todo) and todo[i] not in pending:
            e, g = todo[i]
            pending[todo[i]] = pool.submit(Prepared, [plan_cfgs[e][a] for a in g], keys, plan["vmap"], mesh)

    prepare(0)
    tables = {}
    t_start = time.perf_counter()
    n_alg = len(plan["algos"])
    for env_name in plan["envs"]:
        env, params = envs.make(env_name)
        env_dir = out / env_name
        if writer:
            env_dir.mkdir(parents=True, exist_ok=True)
        for group in groups[env_name]:
            numbers = "+".join(str(plan["algos"].index(a) + 1) for a in group)
            label = f"[{env_name} {numbers}/{n_alg}] {', '.join(group)}:"
            missing = [a for a in group if not checkpoint.exists(ckpt_dir(env_name, a))]
            trained = {}
            if missing and not eval_only:
                idx = todo.index((env_name, tuple(group)))
                prepare(idx)
                prepared = pending.pop((env_name, tuple(group))).result()
                prepare(idx + 1)
                compile_s = prepared.compile_s
                per_member, train_s = train_prepared(prepared, label)
                del prepared
                for algo, result in zip(group, per_member):
                    if algo not in missing:  # trained again only to keep the family whole
                        continue
                    result = gather_blocks(result, plan["seeds"])
                    trained[algo] = result
                    algo_dir = env_dir / algo
                    if writer:
                        algo_dir.mkdir(parents=True, exist_ok=True)
                        np.savez_compressed(algo_dir / "train_metrics.npz", **jax.tree.map(np.asarray, result.metrics))
                        if ckpt_dir(env_name, algo).exists():  # incomplete (no metadata): keep it aside
                            print(f"{label} incomplete checkpoint of {algo} moved to "
                                  f"{checkpoint.set_aside(ckpt_dir(env_name, algo))}", flush=True)  # fmt: skip
                    # every process: orbax writes from process 0 and keeps the others in step
                    checkpoint.save(ckpt_dir(env_name, algo), jax.tree.map(np.asarray, result))
                    if writer:
                        timing = {"compile_s": compile_s, "train_s": train_s, "family": list(group)}
                        (algo_dir / "timing.json").write_text(json.dumps(timing))
            for algo in group:
                cfg = plan_cfgs[env_name][algo]
                algo_dir = env_dir / algo
                alabel = f"[{env_name} {plan['algos'].index(algo) + 1}/{n_alg}] {algo}:"
                if algo in trained:
                    result = trained[algo]
                elif checkpoint.exists(ckpt_dir(env_name, algo)):
                    if not (resume or eval_only):
                        raise RuntimeError(f"{ckpt_dir(env_name, algo)} exists")  # guarded earlier; never overwrite
                    if not eval_only and (algo_dir / "test_results.npz").exists():
                        continue  # finished before: nothing to load
                    abstract = checkpoint.abstract_result(make_train(cfg), all_keys)
                    try:
                        result = checkpoint.restore(ckpt_dir(env_name, algo), abstract)
                    except Exception as err:  # a truncated or foreign checkpoint
                        aside = checkpoint.set_aside(ckpt_dir(env_name, algo))
                        print(f"{alabel} damaged checkpoint ({type(err).__name__}); moved to {aside}; "
                              f"run again with --resume to retrain {algo}", flush=True)  # fmt: skip
                        damaged.append(f"{env_name}/{algo}")
                        continue
                    print(f"{alabel} restored from {ckpt_dir(env_name, algo)}", flush=True)
                else:
                    print(f"{alabel} no checkpoint in {algo_dir}; skipped", flush=True)
                    missing_ckpt.append(f"{env_name}/{algo}")
                    continue
                # robustness sweep: one vmapped, jit-compiled call per algorithm
                sweep_key = (env_name, cfg.policy_hidden, cfg.dropout, cfg.hparams.gamma, plan["n_test"])
                if sweep_key not in sweeps:
                    sweep = make_eval(cfg, plan["n_test"])
                    fn = sharded_blocks(sweep.from_keys, mesh) if mesh is not None else jax.jit(sweep.from_keys)
                    sweeps[sweep_key] = (fn, sweep.levels)
                sweep_fn, levels = sweeps[sweep_key]
                t0 = time.perf_counter()
                seed_keys = jax.random.split(jax.random.PRNGKey(plan["seed"] + 1), plan["seeds"])[block]
                res = gather_blocks(sweep_fn(local(result).state.params["actor"], seed_keys), plan["seeds"])
                V, C, bound = np.asarray(res["V"]), np.asarray(res["C"]), np.asarray(res["bound"])
                # a diverged seed (non-finite training state or test episodes) is never a result
                bad = diverged_seeds(result) | nonfinite_episodes(V, C)
                if writer:
                    np.savez_compressed(
                        algo_dir / "test_results.npz", V=V, C=C, bound=bound, diverged=bad, levels=levels
                    )
                    (algo_dir / "diverged.json").write_text(json.dumps({"seeds": np.flatnonzero(bad).tolist()}))
                at_bound = f", {100 * bound.mean():.1f}% of episodes at the state bound" if bound.any() else ""
                if bad.any():
                    diverged_report[f"{env_name}/{algo}"] = (int(bad.sum()), int(bad.size))
                if bad.all():
                    print(f"{alabel} DIVERGED: every seed has non-finite numbers; no result", flush=True)
                    continue
                if bad.any():
                    print(f"{alabel} WARNING: seed(s) {np.flatnonzero(bad).tolist()} diverged (non-finite "
                          f"numbers); left out of the statistics", flush=True)  # fmt: skip
                print(f"{alabel} sweep {V.shape} in {_fmt(time.perf_counter() - t0)}: "
                      f"mean test return {V[~bad].mean():.2f}{at_bound}", flush=True)  # fmt: skip
                if worst_case:
                    wc_key = sweep_key[:4]
                    if wc_key not in finders:
                        finders[wc_key] = jax.jit(make_worst_case(cfg))
                    t0 = time.perf_counter()
                    # starts: the centre and the corners the grid found worst (level 1) for each seed
                    starts = corner_starts(env, params, V[:, int(np.argmax(levels))].mean(-1))
                    found = finders[wc_key](result.state.params["actor"], starts, jax.random.PRNGKey(plan["seed"] + 2))
                    found = jax.tree.map(np.asarray, found)
                    if writer:
                        np.savez_compressed(algo_dir / "worst_case.npz", **{
                            f"{name}/{field}": value for name, d in found.items() for field, value in d.items()
                        })  # fmt: skip
                    ret = found["return"]["episodes"][..., 0].mean(-1).min(1)[~bad]  # each seed's lowest return
                    grid = V.mean(-1).reshape(V.shape[0], -1).min(1)[~bad]
                    print(f"{alabel} worst case in {_fmt(time.perf_counter() - t0)}: lowest return per seed "
                          f"{grid.mean():.2f} on the grid, {ret.mean():.2f} by the search "
                          f"(lower in {int((ret < grid).sum())}/{ret.size} seeds)", flush=True)  # fmt: skip
        if writer:
            stale = {a.split("/", 1)[1] for a in missing_ckpt + damaged if a.startswith(env_name + "/")}
            tables[env_name] = write_env_report(
                env_dir,
                env_name,
                [a for a in plan["algos"] if a not in stale],
                env.lambda_max,
                params.xi_c,
                params.kappa,
            )
    pool.shutdown(wait=True, cancel_futures=True)
    print(f"\nfinished in {_fmt(time.perf_counter() - t_start)}; results in {out}\n")
    for env_name, md in tables.items():
        print(f"## {env_name}\n\n{md}")
    if damaged:
        print(f"run.py: error: damaged checkpoint(s) of {', '.join(damaged)} set aside; --resume retrains them",
              file=sys.stderr)  # fmt: skip
        return 5
    if missing_ckpt:
        print(f"run.py: error: no checkpoint for {', '.join(missing_ckpt)}: their sweep was not run and they are "
              "left out of the tables", file=sys.stderr)  # fmt: skip
        return 5
    if diverged_report:
        print("DIVERGED seeds (left out of every statistic): "
              + ", ".join(f"{k} {n}/{t}" for k, (n, t) in diverged_report.items()), flush=True)  # fmt: skip
        if any(n == t for n, t in diverged_report.values()):
            return 4  # an algorithm has no result at all
    return 0


def _config_differences(saved: dict, current: dict) -> str:
    """The config fields in which a saved run's configs differ from this command's, as
    ``env/algo: field, ...`` ("" if none). A field the saved run.json lacks (written by
    an older version) counts as its default, the value that version ran."""

    def flat(d):  # one level: the config's fields and its hyperparameters
        d = json.loads(json.dumps(d))
        return {**d.pop("hparams"), **d}

    out = []
    for env in current:
        for algo, cfg in current[env].items():
            try:
                old = flat(config_to_dict(config_from_dict(saved.get(env, {}).get(algo, {}))))
            except (TypeError, ValueError):  # fields this version does not know
                out.append(f"{env}/{algo}: unreadable")
                continue
            new = flat(cfg)
            if fields := [k for k in new if old.get(k) != new[k]]:
                out.append(f"{env}/{algo}: {', '.join(fields)}")
    return "; ".join(out[:3]) + (f"; and {len(out) - 3} more" if len(out) > 3 else "")


def _read_plan(out: Path, flag: str) -> dict:
    """``out/run.json`` of a run folder, or a ``UsageError`` naming what is wrong."""
    path = out / "run.json"
    if not path.exists():
        raise UsageError(f"{flag}: {out} is not a run folder (no run.json)")
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"{flag}: cannot read {path}: {err}") from None
    missing = [k for k in ("envs", "algos", "seeds", "seed", "vmap", "configs", "n_test") if k not in plan]
    if not isinstance(plan, dict) or missing:
        raise UsageError(f"{flag}: {path} is not a run.json of this runner (missing {', '.join(missing)})")
    return plan


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    first = True  # the process that checks and writes the run folder
    try:
        if not args.distributed and any(x is not None for x in (args.coordinator, args.num_processes, args.process_id)):
            raise UsageError("--coordinator, --num-processes and --process-id need --distributed")
        if args.distributed:  # before anything starts JAX's backends
            import jax

            from rcmdp_jax.sharding import init_distributed

            try:
                init_distributed(args.coordinator, args.num_processes, args.process_id)
            except (ValueError, RuntimeError) as err:
                raise UsageError(f"--distributed: {err}") from None
            first = jax.process_index() == 0
        if args.eval_only:
            out = Path(args.eval_only)
            plan = _read_plan(out, "--eval-only")
            if args.n_test is not None and args.n_test != plan["n_test"]:
                raise UsageError(
                    f"--eval-only reruns the sweep of {out} as it was run (--n-test {plan['n_test'] or 'default'}); "
                    "to test with another --n-test, train into a new --out"
                )
        else:
            if args.out is not None and not args.out.strip():
                raise UsageError("--out is empty; name a run folder (or leave --out out for runs/<timestamp>)")
            if args.compile_cache not in (None, "off"):
                try:  # the cache folder itself (not the run folder) may be made now
                    Path(args.compile_cache).mkdir(parents=True, exist_ok=True)
                except OSError as err:
                    raise UsageError(f"--compile-cache {args.compile_cache}: cannot use it as a folder "
                                     f"({err.strerror or err}); name a folder or 'off'") from None  # fmt: skip
            plan = build_plan(args)
            out = Path(args.out) if args.out else Path("runs") / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            if args.resume:
                saved = _read_plan(out, "--resume")
                differ = [
                    k for k in ("envs", "algos", "seeds", "seed", "vmap", "n_test")
                    if json.loads(json.dumps(saved.get(k))) != json.loads(json.dumps(plan[k]))
                ]  # fmt: skip
                if not differ and (fields := _config_differences(saved["configs"], plan["configs"])):
                    differ.append(f"configs: {fields}")
                if differ:
                    raise UsageError(
                        f"--resume: the options differ from the run in {out} ({', '.join(differ)}); use the same options"
                    )
                plan = saved
            elif out.exists() and first:
                raise UsageError(
                    f"output folder {out} already exists; use --resume to continue it or choose another --out"
                )
        mesh = None
        if args.distributed or args.devices != "1":
            from rcmdp_jax.sharding import setup_devices

            try:
                mesh = setup_devices(args.devices, args.distributed)
            except ValueError as err:
                raise UsageError(f"--devices: {err}") from None
            if mesh.size == 1 and not args.distributed:
                mesh = None  # nothing to split
        if not args.eval_only and not args.resume and first:
            try:
                out.mkdir(parents=True)
                (out / "run.json").write_text(json.dumps(plan, indent=2))
            except OSError as err:
                raise UsageError(f"--out {out}: cannot create the run folder: {err.strerror or err}") from None
    except UsageError as err:
        print(f"run.py: error: {err}", file=sys.stderr)
        return 2
    from rcmdp_jax import cpu_prng

    cpu_prng.apply_default()  # same random bits, faster CPU code (rcmdp_jax.cpu_prng)
    if args.compile_cache != "off":
        import jax

        if args.compile_cache is not None or not jax.config.jax_compilation_cache_dir:
            cache = args.compile_cache or str(Path.home() / ".cache" / "rcmdp_jax" / "xla")
            jax.config.update("jax_compilation_cache_dir", cache)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    n_runs = len(plan["envs"]) * len(plan["algos"])
    where = f", sharded over {mesh.size} {mesh.devices.flat[0].platform.upper()} devices" if mesh is not None else ""
    if args.distributed:
        import jax

        where += f"; process {jax.process_index()} of {jax.process_count()}"
    print(f"rcmdp_jax: {n_runs} algorithm run(s) x {plan['seeds']} seed(s) "
          f"({'vmapped' if plan['vmap'] else 'loop over seeds'}{where}) -> {out}", flush=True)  # fmt: skip

    def interrupted(*_):
        print(f"\ninterrupted: finished algorithms are saved; continue with --resume --out {out}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(130)  # now: don't wait for a background compile

    # a handler rather than ``except KeyboardInterrupt``: a library that catches the
    # exception (or checks signals inside a long XLA call) cannot swallow Ctrl-C
    previous = (
        signal.signal(signal.SIGINT, interrupted) if threading.current_thread() is threading.main_thread() else None
    )
    try:
        return run(plan, out, args.resume, bool(args.eval_only), mesh, args.worst_case)
    except KeyboardInterrupt:
        interrupted()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)

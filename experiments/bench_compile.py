"""Where a family program's compile time goes, and what XLA CPU's compile options save (a
benchmark, not a test). In one process, for each family of a job (``--job quick``: the quick
start's PPO family on ``gymnax:CartPole-v1``, 3 seeds; ``--job main``: the CartPole grid's three
families, 10 seeds), built as the runner builds it (``chunked.Prepared``, on the CPU's
two devices):

* the seconds of tracing, lowering and XLA's compile of its training chunk (JAX's compile events, wall), the CPU seconds of the whole build (``build_cpu_s``) and of XLA's compiles, and the program's
  size (StableHLO characters, optimised HLO characters);
* ``--options``: the same lowered program compiled again with each set of compiler options
  (``OPTIONS``), interleaved over ``--repeats`` rounds so that every set meets the same load,
  each compile's wall and CPU seconds; then each compiled program trains ``--chunks`` chunks
  from one initial state (seconds per chunk after the first) and its metrics and state are
  compared bit for bit with those of XLA's defaults;
* ``--before CHECKOUT``: the build of another checkout's code (its ``src/rcmdp_jax``, as
  ``bench_rerun.py`` puts it first on the path) and of this one, in turn, each in a fresh process;
* ``--knockout``: the training chunk compiled with one phase of the iteration replaced by zeros
  of its shapes (``PHASES``; the state passed through), each in a fresh process: what that
  phase costs XLA's compile.
* ``--random-bits``: the family built with each lowering of JAX's random bits (``threefry2x32``;
  ``LOWERINGS``), each in a fresh process, interleaved: ``straight`` (the runner's), ``rolled``
  (JAX's CPU default), ``barrier`` (the runner's, its outputs behind an optimisation barrier: no
  copy fused into each consumer) and ``stub`` (a few integer ops instead: wrong numbers, only what
  the random bits cost the compile).

    python experiments/bench_compile.py --job quick --options default,O0 --repeats 2 --json FILE
    python experiments/bench_compile.py --job quick --knockout --json FILE
    python experiments/bench_compile.py --job main --before CHECKOUT --repeats 2 --json FILE

Nothing is read from or written to JAX's persistent cache or the program store.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

# compiler options (``Lowered.compile(compiler_options=...)``: XLA's DebugOptions by name, and
# the build options' efforts)
OPTIONS = {
    "default": {},
    "O0": {"xla_backend_optimization_level": 0},
    "O1": {"xla_backend_optimization_level": 1},
    "no_expensive_llvm": {"xla_llvm_disable_expensive_passes": True},
    "effort_low": {"exec_time_optimization_effort": -1.0},
    "no_fusion_emitters": {"xla_cpu_use_fusion_emitters": False},
    "O0_no_fusion_emitters": {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False},
    "fast_compile": {"xla_cpu_opt_preset": "CPU_OPT_PRESET_FAST_COMPILE"},
}
PHASES = ("collect", "update", "adversary", "dual", "curve")
LOWERINGS = ("straight", "rolled", "barrier", "stub")
MORE_PHASES = ("search", "starts")  # parts of the search method's phase (``--phases``)


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def job_families(job: str, steps: int | None):
    """``[(name, [Config, ...])]`` and the seeds of a job, as the command builds them."""
    from rcmdp_jax import family, preset
    from rcmdp_jax.presets import ALGORITHMS

    if job == "quick":
        algos, env, seeds = ("PPO-Lag", "PPO-Robust-Lag"), "gymnax:CartPole-v1", 3
    else:
        algos, env, seeds = ALGORITHMS, "cartpole", 10
    extra = {} if steps is None else {"total_timesteps": steps}
    cfgs = {a: preset(env, a, **extra) for a in algos}
    return [(cfgs[g[0]].learner, [cfgs[a] for a in g]) for g in family.group(cfgs)], seeds


def stub_phase(family, phase: str) -> None:
    """Replace ``phase`` of ``family``'s train step by zeros of its outputs' shapes (the state
    passed through): its program then holds no code of that phase."""
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import step as step_module

    def zeros(tree):
        return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), tree)

    s = family.step
    if phase == "curve":
        real = step_module.curve_point
        step_module.curve_point = lambda *a: zeros(jax.eval_shape(lambda: real(*a)))
    elif phase == "dual":
        real = step_module.dual_phase

        def dual(key, env, actor, critic, params, dual_state, *rest):
            out = jax.eval_shape(lambda: real(key, env, actor, critic, params, dual_state, *rest))
            return (dual_state, *zeros(out[1:]))

        step_module.dual_phase = dual
    elif phase == "adversary":
        real = s.lanes.step

        def lanes_step(key, env_params, env_xi, actor, lam, hp, which, method_state):
            out = jax.eval_shape(lambda: real(key, env_params, env_xi, actor, lam, hp, which, method_state))
            return env_params, env_xi, zeros(out[2]), zeros(out[3]), method_state

        s.lanes.step = lanes_step
    elif phase == "update":  # on the class: ``Step.at`` builds the learner again at the program's hp
        cls = type(s.learner)
        real = cls.update

        def update(self, key, state, *rest):
            out = jax.eval_shape(lambda: real(self, key, state, *rest))
            return (state, *zeros(out[1:]))

        cls.update = update
    elif phase == "collect":
        cls = type(s.learner)
        real = cls.collect

        def collect(self, key, state, *rest):
            out = jax.eval_shape(lambda: real(self, key, state, *rest))
            return zeros(out[0]), state, zeros(out[2])

        cls.collect = collect
    elif phase == "search":  # the search method's searches (``worst_case.search``), its restarts kept
        from rcmdp_jax.adversary import search as search_module

        real = search_module.search
        search_module.search = lambda *a: zeros(jax.eval_shape(lambda: real(*a)))
    elif phase == "starts":  # the search method's restarts (valuing its points and corners)
        from rcmdp_jax.adversary.search import GradientSearch

        real = GradientSearch.starts

        def starts(self, ctx, key, params, points, *rest):
            out = jax.eval_shape(lambda: real(self, ctx, key, params, points, *rest))
            return points, zeros(out[1])

        GradientSearch.starts = starts
    else:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")


def lower_random_bits(how: str) -> None:
    """Lower JAX's ``threefry2x32`` on the CPU as ``how`` (``LOWERINGS``) in this process."""
    import jax.numpy as jnp
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir.dialects import hlo
    from jax._src.random import threefry2x32 as t

    from rcmdp_jax import cpu_prng

    def barrier(ctx, *args, **kw):  # the straight-line bits, then an optimisation barrier
        return list(hlo.OptimizationBarrierOp(list(t._threefry2x32_lowering_rule(ctx, *args, **kw))).results)

    def stub(k1, k2, x1, x2):  # integer mixing of the same shapes: not random bits
        shape = jnp.broadcast_shapes(k1.shape, k2.shape, x1.shape, x2.shape)
        a = (x1 * jnp.uint32(2654435761)) ^ k1 ^ (x2 >> 3)
        b = (x2 * jnp.uint32(2246822519)) ^ k2 ^ (x1 << 5)
        return [jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape)]

    if how not in LOWERINGS:
        raise ValueError(f"random bits' lowering must be one of {', '.join(LOWERINGS)}, got {how!r}")
    if how == "rolled":
        cpu_prng.use_rolled_threefry()
    elif how != "straight":
        rule = barrier if how == "barrier" else mlir.lower_fun(stub, multiple_results=True)
        mlir.register_lowering(t.threefry2x32_p, rule, platform="cpu")


def build(cfgs, keys, mesh, phase: str | None = None):
    """``Prepared`` of ``cfgs`` (a subclass: nothing cached or stored), with its lowered init and
    training programs and the seconds JAX's compile events gave per stage."""
    import jax
    import jax.monitoring

    try:
        from rcmdp_jax.chunked import Prepared
    except ImportError:  # the code before (--before): the runner's own module
        from rcmdp_jax.study.compiled import Prepared

    class Bench(Prepared):
        def make_family(self, cfgs):
            fam = super().make_family(cfgs)
            if phase:
                stub_phase(fam, phase)
            return fam

    lowered, seconds = [], {"trace_s": 0.0, "lower_s": 0.0, "xla_s": 0.0}
    names = {"jaxpr_trace_duration": "trace_s", "jaxpr_to_mlir_module_duration": "lower_s",
             "backend_compile_duration": "xla_s"}  # fmt: skip

    def add(event, secs, **_):
        name = names.get(event.rsplit("/", 1)[1])
        if name and listening:
            seconds[name] += secs

    listening = True
    jax.monitoring.register_event_duration_secs_listener(add)
    original = jax.stages.Lowered.compile

    def recording(self, *a, **k):
        t0, c0 = time.perf_counter(), cpu_s()
        compiled = original(self, *a, **k)
        lowered.append(dict(lowered=self, compiled=compiled, wall_s=time.perf_counter() - t0, cpu_s=cpu_s() - c0))
        return compiled

    jax.stages.Lowered.compile = recording
    t0, c0 = time.perf_counter(), cpu_s()
    try:
        prep = Bench(cfgs, keys, True, mesh)
    finally:
        jax.stages.Lowered.compile = original
        listening = False
    seconds["build_cpu_s"] = cpu_s() - c0  # tracing, lowering and XLA's compiles, every thread's
    return prep, lowered, {k: round(v, 2) for k, v in seconds.items()}, time.perf_counter() - t0


def compile_with(lowered, options: dict):
    """``lowered`` compiled again with ``options`` (JAX's in-memory cache of compiled programs
    cleared first): ``(compiled, wall seconds, CPU seconds)``."""
    from jax._src.interpreters import pxla

    pxla._cached_compilation.cache_clear()
    t0, c0 = time.perf_counter(), cpu_s()
    compiled = lowered.compile(compiler_options=dict(options))
    return compiled, time.perf_counter() - t0, cpu_s() - c0


def train_chunks(prep, step_compiled, chunks: int):
    """``chunks`` chunks of ``prep``'s first batch through ``step_compiled``: the seconds of
    each chunk after the first, and the final state and every chunk's metrics on the host."""
    import jax
    import numpy as np

    from rcmdp_jax.family import tables

    t = tables(prep.cfgs)
    keys, members = prep.batches[0]
    state, members = prep.start(keys, members)
    out, times = [], []
    for i in range(chunks):
        t0 = time.perf_counter()
        state, metrics = step_compiled(state, members, np.int32(i * prep.chunk), t, prep.total)
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - t0)
        out.append(jax.tree.map(np.asarray, metrics))
    return times[1:], jax.tree.map(np.asarray, state), out


def differences(a, b) -> dict:
    """How two trees of host arrays differ: leaves compared, leaves not bit-identical, the
    largest absolute difference."""
    import jax
    import numpy as np

    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    diff = [float(np.nanmax(np.abs(x.astype(np.float64) - y.astype(np.float64))) if x.size else 0.0)
            for x, y in zip(la, lb) if x.tobytes() != y.tobytes()]  # fmt: skip
    return dict(leaves=len(la), differ=len(diff), max_abs=max(diff, default=0.0))


def one_process(args) -> list[dict]:
    """The measurements of one process (``main`` starts one per knockout phase)."""
    from rcmdp_jax.study.runtime import split_in_process

    split_in_process("auto", 2)
    import jax
    import numpy as np

    from rcmdp_jax import cpu_prng

    cpu_prng.apply_default()  # the random bits' lowering the runner compiles with
    if args.lowering:
        lower_random_bits(args.lowering)
    jax.config.update("jax_enable_compilation_cache", False)
    from rcmdp_jax.sharding import local_mesh

    mesh = local_mesh() if len(jax.devices()) > 1 else None
    families, seeds = job_families(args.job, args.steps)
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(0), seeds))
    names = [n for n in args.options.split(",") if n] if args.options else []
    records = []
    for name, cfgs in families:
        if args.family and name not in args.family.split(","):
            continue
        prep, lowered, seconds, total = build(cfgs, keys, mesh, args.phase)
        # the initial state's program compiles beside the chunk's tracing: the smaller of the two
        init, step = sorted(lowered, key=lambda r: len(r["lowered"].as_text()))[-2:]
        rec = dict(job=args.job, label=args.label, family=name, members=len(cfgs), seeds=seeds, phase_removed=args.phase,
                   random_bits=args.lowering or "straight",
                   build_s=round(total, 2), **seconds, step_xla_wall_s=round(step["wall_s"], 2),
                   step_xla_cpu_s=round(step["cpu_s"], 2), init_xla_wall_s=round(init["wall_s"], 2),
                   init_xla_cpu_s=round(init["cpu_s"], 2),
                   stablehlo_chars=len(step["lowered"].as_text()),
                   optimised_hlo_chars=len(step["compiled"].as_text()))  # fmt: skip
        print(json.dumps(rec), flush=True)
        records.append(rec)
        if not names:
            continue
        runs = {n: [] for n in names}
        compiled = {}
        for _ in range(args.repeats):
            for n in names:
                c, wall, cpu = compile_with(step["lowered"], OPTIONS[n])
                compiled[n] = c
                runs[n].append(dict(wall_s=round(wall, 2), cpu_s=round(cpu, 2)))
                print(name, n, runs[n][-1], flush=True)
        trained = {}
        if args.chunks:
            for _ in range(2):  # twice, interleaved: the chunk seconds of the second round
                for n in names:
                    trained[n] = train_chunks(prep, compiled[n], args.chunks)
        base = trained.get(names[0])
        for n in names:
            out = dict(job=args.job, family=name, options=n, settings=OPTIONS[n], compiles=runs[n],
                       compile_cpu_s_mean=round(sum(r["cpu_s"] for r in runs[n]) / len(runs[n]), 2),
                       compile_wall_s_mean=round(sum(r["wall_s"] for r in runs[n]) / len(runs[n]), 2),
                       optimised_hlo_chars=len(compiled[n].as_text()))  # fmt: skip
            if n in trained:
                times, state, metrics = trained[n]
                out["chunk_s"] = [round(t, 3) for t in times]
                out["vs_" + names[0]] = differences((base[1], base[2]), (state, metrics))
            print(json.dumps(out), flush=True)
            records.append(out)
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", choices=("quick", "main"), default="quick")
    p.add_argument("--family", default=None, help="only these families (learners, comma-separated)")
    p.add_argument("--steps", type=int, default=None, help="the budget (default: the preset's)")
    p.add_argument("--options", default=None, help=f"compiler option sets, comma-separated: {', '.join(OPTIONS)}")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--chunks", type=int, default=4, help="training chunks per option set (0: none)")
    p.add_argument("--knockout", action="store_true", help=f"one process per phase removed: {', '.join(PHASES)}")
    p.add_argument("--before", default=None, help="another checkout: its build and this one's, interleaved, "
                   "each in a fresh process (labels 'before' and 'after')")
    p.add_argument("--label", default=None, help=argparse.SUPPRESS)
    p.add_argument("--phases", default=None, help=f"with --knockout, these phases: {', '.join(PHASES + MORE_PHASES)}")
    p.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    p.add_argument("--random-bits", action="store_true", help=f"one process per lowering: {', '.join(LOWERINGS)}")
    p.add_argument("--lowering", default=None, choices=LOWERINGS, help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help="append each record as a JSON line")
    args = p.parse_args(argv)
    os.environ["RCMDP_JAX_PROGRAM_STORE"] = "off"
    if args.before:  # before's build, this one's, in turn, each in a fresh process
        import tempfile
        from pathlib import Path

        from bench_rerun import package_path

        path = package_path(args.before, Path(tempfile.mkdtemp(prefix="bench_compile_")))
        base = [sys.executable, __file__, "--job", args.job, "--chunks", "0"]
        base += ["--family", args.family] if args.family else []
        base += ["--json", args.json] if args.json else []
        for _ in range(args.repeats):
            for label in ("before", "after"):
                env = dict(os.environ, PYTHONPATH=path) if label == "before" else os.environ
                subprocess.run(base + ["--label", label], check=True, env=env)
        return 0
    if args.knockout:
        base = [sys.executable, __file__, "--job", args.job, "--chunks", "0"]
        base += ["--family", args.family] if args.family else []
        base += ["--steps", str(args.steps)] if args.steps else []
        base += ["--json", args.json] if args.json else []
        for _ in range(args.repeats):
            for phase in (None, *(args.phases.split(",") if args.phases else PHASES)):
                subprocess.run(base + (["--phase", phase] if phase else []), check=True)
        return 0
    if args.random_bits:
        base = [sys.executable, __file__, "--job", args.job, "--chunks", "0"]
        base += ["--family", args.family] if args.family else []
        base += ["--json", args.json] if args.json else []
        for _ in range(args.repeats):
            for how in LOWERINGS:
                subprocess.run(base + ["--lowering", how], check=True)
        return 0
    records = one_process(args)
    if args.json:
        load = os.getloadavg()
        with open(args.json, "a") as f:
            for r in records:
                f.write(json.dumps(r | {"load_average": load}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-family training time, before and after the per-device program and the LTMA
lane selection, in one run (a benchmark, not a test).

    python experiments/bench_families.py [--budget long] [--chunks 2] [--json docs/bench_families_cpu_2core.json]

For every domain and algorithm family of the study (10 seeds, the runner's program
and sharding, ``--devices auto``), three programs are compiled and timed on the same
first ``--chunks`` chunks of the runner's (``chunked.CHUNK_SLOTS``: 5 batches or 100 episodes each) of training:

* ``before``: one SPMD program over all lanes (jit with shardings), LTMA on every lane;
* ``per-device``: each device runs its own lanes (``shard_map``);
* ``after``: per-device, LTMA only on the robust members' lanes (``batching.only_where``),
  and the lanes dealt out to the devices in turn (``chunked.Prepared.order``): the
  runner's program.

The first two are ``chunked.Prepared`` without those steps (``BenchPrepared`` below).

Reported: compile seconds and training seconds of the timed chunks, scaled to the
whole budget (iterations / timed iterations; MCPMD's first chunks are its dearest, as
its budget of steps runs out unevenly later), and for PPO the share of minibatch steps the lanes
really used (a lane that hit the KL stop waits for the others of its program).
Numbers of the three programs agree up to float rounding (checked here on ``xi``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
from launch import machine  # experiments/launch.py (imports no JAX)

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {"before": (False, False), "per-device": (True, False), "after": (True, True)}


def variant_class():
    """``chunked.Prepared`` with its per-device program and its lane selection optional
    (imported late: the devices are split first)."""
    import jax

    from rcmdp_jax.adversary.lanes import Lanes
    from rcmdp_jax.chunked import Prepared
    from rcmdp_jax.step import Step

    class EveryLane(Lanes):
        """Every lane of a family runs every robust method and discards what is not its
        own (a plain ``lax.cond``)."""

        @staticmethod
        def on_lanes(fn, keep):
            return lambda flag, *args: jax.lax.cond(flag, fn, keep, *args)

    class EveryLaneStep(Step):
        lanes_class = EveryLane

    class BenchPrepared(Prepared):
        def __init__(self, cfgs, keys, mesh, per_device: bool, skip_idle_lanes: bool):
            self.per_device, self.skip_idle_lanes = per_device, skip_idle_lanes
            super().__init__(cfgs, keys, True, mesh)

        def make_family(self, cfgs):
            family = super().make_family(cfgs)
            if self.skip_idle_lanes:
                return family
            return dataclasses.replace(family, step=EveryLaneStep(family.configs[0], family.step.methods))

        def on_devices(self, step):  # else one SPMD program over all lanes (they wait for each other)
            return super().on_devices(step) if self.per_device else step

        @property
        def order(self):  # else the lanes in order
            order = super().order
            return order if self.skip_idle_lanes else np.arange(len(order))

    return BenchPrepared


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", default="cartpole,inventory,inventory3d")
    p.add_argument("--budget", default="long", choices=("short", "long"))
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--chunks", type=int, default=2, help="the runner's chunks timed per program (chunked.CHUNK_SLOTS iterations each)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--json", default="bench_results/bench_families.json")
    args = p.parse_args(argv)

    from rcmdp_jax.sharding import setup_devices

    mesh = setup_devices("auto")
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import cpu_prng
    from rcmdp_jax.family import group
    from rcmdp_jax.presets import ALGORITHMS, preset

    cpu_prng.apply_default()
    BenchPrepared = variant_class()
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(0), args.seeds))
    rows = []
    for env in args.envs.split(","):
        cfgs = {a: preset(env, a, args.budget) for a in ALGORITHMS}
        for names in group(cfgs):
            fam_cfgs = [cfgs[a] for a in names]
            label = f"{env} {'+'.join(names)}"
            row = {"env": env, "family": names, "iterations": fam_cfgs[0].num_iterations}
            xis = {}
            for variant in args.variants.split(","):
                per_device, skip = VARIANTS[variant]
                prep = BenchPrepared(fam_cfgs, keys, mesh, per_device, skip)
                ((batch_keys, members),) = prep.batches
                state, placed = prep.start(batch_keys, members)
                jax.block_until_ready(state)
                t0 = time.perf_counter()
                metrics = []
                for c in range(args.chunks):
                    state, m = prep.step(state, placed, jnp.int32(c * prep.chunk))
                    metrics.append(m)
                jax.block_until_ready(state)
                train_s = time.perf_counter() - t0
                n_lanes = len(names) * args.seeds
                on_devices = jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=1), *metrics)
                m = jax.tree.map(lambda x: x[np.argsort(prep.order)][:n_lanes], on_devices)  # lanes in order
                xis[variant] = m["xi"]
                scale = prep.n_iter / (args.chunks * prep.chunk)
                row[variant] = {
                    "compile_s": round(prep.compile_s, 1),
                    "train_s_whole_budget": round(train_s * scale, 1),
                }
                if fam_cfgs[0].learner == "ppo":
                    used = on_devices["n_updates"]  # [lanes as the devices hold them, iterations]
                    total = fam_cfgs[0].epochs * fam_cfgs[0].num_minibatches
                    per_dev = used.reshape(mesh.size, -1, used.shape[1]) if per_device else used[None]
                    trips = np.minimum(per_dev.max(axis=1) + 1, total)  # the loop runs to its last lane's stop
                    row[variant]["ppo_steps_used"] = round(float(used.mean() / trips.mean()), 3)
                    row[variant]["ppo_minibatch_steps_per_iteration"] = {
                        "lane_mean": round(float(used.mean()), 1), "loop_trips_mean": round(float(trips.mean()), 1),
                        "of": total}  # fmt: skip
                print(f"{label} [{variant}]: compile {prep.compile_s:.1f}s, training (whole budget, from "
                      f"{args.chunks} chunks) {train_s * scale:.1f}s {row[variant].get('ppo_steps_used', '')}",
                      flush=True)  # fmt: skip
            if len(xis) > 1:
                ref = next(iter(xis.values()))
                row["max_abs_xi_difference"] = float(max(np.nanmax(np.abs(x - ref)) for x in xis.values()))
            rows.append(row)
    out = {
        "machine": machine(devices=True),
        "budget": args.budget, "seeds": args.seeds, "chunks_timed": args.chunks, "rows": rows,
    }  # fmt: skip
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print("wrote", path)
    totals = {v: sum(r[v]["train_s_whole_budget"] + r[v]["compile_s"] for r in rows if v in r) for v in VARIANTS}
    print("compile + training, all families:", {k: f"{v / 60:.1f} min" for k, v in totals.items() if v})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

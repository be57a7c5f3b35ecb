"""A wrapped env's step against gymnax's raw step, measured in the same run.

    python experiments/bench_gymnax_step.py [--envs 1024] [--steps 200] [--repeats 5]
        [--out docs/bench_gymnax_step.json]

Each preset: ``envs`` auto-resetting environments stepped ``steps`` times with random
actions, as one jitted ``vmap``/``lax.scan`` program, for gymnax's own ``step`` (its
nominal ``EnvParams``) and for the ``gymnax:`` preset's wrapped ``step`` (nominal ``xi``,
the preset's noise), with the runner's random-bit lowering (``cpu_prng``). Best of ``repeats`` timed calls after a warm-up; the ratio is
wrapped / raw.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
from launch import describe, machine  # experiments/launch.py
from rcmdp_jax.envs import GYMNAX_PREFIX as PREFIX
from rcmdp_jax.envs.gymnax_presets import PRESETS

from rcmdp_jax import cpu_prng, envs


def program(env, params, n_envs: int, n_steps: int):
    space = env.action_space(params)

    def run(key):
        keys = jax.random.split(key, n_envs)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)

        def body(state, k):
            ka, ks = jax.random.split(k)
            actions = jax.vmap(space.sample)(jax.random.split(ka, n_envs))
            _, state, reward, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(ks, n_envs), state, actions, params
            )
            return state, reward.sum()

        return jax.lax.scan(body, state, jax.random.split(key, n_steps))[1].sum()

    return jax.jit(run)


def best_time(fn, repeats: int) -> float:
    jax.block_until_ready(fn(jax.random.key(0)))
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(jax.random.key(i + 1)))
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", type=int, default=1024)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    cpu_prng.apply_default()  # the random-bit lowering the runner uses
    rows = {}
    for key in PRESETS:
        wrapped, wp = envs.make(PREFIX + key)
        raw = best_time(program(wrapped.inner, wrapped.inner_params, args.envs, args.steps), args.repeats)
        wrap = best_time(program(wrapped, wp, args.envs, args.steps), args.repeats)
        n = args.envs * args.steps
        rows[key] = {"raw_steps_per_s": n / raw, "wrapped_steps_per_s": n / wrap, "ratio": wrap / raw}
        print(f"{key:26s} gymnax {n / raw / 1e6:7.2f} M steps/s   wrapped {n / wrap / 1e6:7.2f} M steps/s   "
              f"wrapped/raw time {wrap / raw:.2f}", flush=True)  # fmt: skip
    report = {
        "machine": describe(machine(devices=True)),
        "envs": args.envs,
        "steps": args.steps,
        "presets": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

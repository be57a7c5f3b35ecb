"""Do the gymnax presets' learner settings learn? PPO and MDPO (and their -Lag variants)
at the short budget against the uniform random policy, on the nominal kernel.

    python experiments/gymnax_learning.py [--envs gymnax:Pendulum-v1,...] [--seeds 5]
        [--out docs/gymnax_learning.json]

For each preset: the random policy's discounted return ``V`` and constraint values ``C``
(500 episodes; uniform over the actions, or over the action box), and each algorithm's
deterministic evaluation (``eval_return``/``eval_costs`` of the last three iterations,
averaged over seeds, ± the standard error over seeds). "Beats random" means the seeds'
mean exceeds the random policy's mean by more than 3 standard errors of both.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from launch import mean_se  # experiments/launch.py
from rcmdp_jax.envs import GYMNAX_PREFIX as PREFIX
from rcmdp_jax.envs.gymnax_presets import PRESETS

from rcmdp_jax import envs, make_train
from rcmdp_jax.presets import preset
from rcmdp_jax.rollout import episode_values


def random_policy(env):
    space = env.action_space()
    if env.discrete:
        return lambda obs, key: jax.random.randint(key, (), 0, env.action_dim)
    low, high = jnp.broadcast_to(space.low, space.shape), jnp.broadcast_to(space.high, space.shape)
    return lambda obs, key: jax.random.uniform(key, space.shape, minval=low, maxval=high)


def random_values(name: str, n: int = 500):
    env, params = envs.make(name)
    one = lambda k: episode_values(k, env, params, random_policy(env), env.gamma, env.episode_length)[:2]  # noqa: E731
    v, c = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(123), n))
    v, c = np.asarray(v), np.asarray(c)
    mean, se = mean_se(v)
    return {"V": mean, "V_se": se, "C": c.mean(0).tolist()}


def trained_values(name: str, algo: str, seeds: int):
    cfg = preset(name, algo, "short")
    t0 = time.perf_counter()
    out = jax.jit(jax.vmap(make_train(cfg)))(jax.random.split(jax.random.key(0), seeds))
    ret = np.asarray(out.metrics["eval_return"])  # [S, iterations]
    costs = np.asarray(out.metrics["eval_costs"])  # [S, iterations, m]
    v, v_se = mean_se(np.nanmean(ret[:, -3:], axis=1))
    return {
        "V": v, "V_se": v_se,
        "C": np.nanmean(costs[:, -3:], axis=(0, 1)).tolist(), "seconds": time.perf_counter() - t0,
        "policy_steps": cfg.num_iterations * cfg.batch_size,
    }  # fmt: skip


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default=",".join(PREFIX + k for k in PRESETS))
    p.add_argument("--algos", default="PPO,MDPO,PPO-Lag,MDPO-Lag")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    report = {"machine": "see docs/gymnax_envs.md", "seeds": args.seeds, "envs": {}}
    for name in args.envs.split(","):
        rand = random_values(name)
        row = {"random": rand, "algos": {}}
        print(f"{name}: random V {rand['V']:.2f} ± {rand['V_se']:.2f}, C {np.round(rand['C'], 3).tolist()}")
        for algo in args.algos.split(","):
            r = trained_values(name, algo, args.seeds)
            r["beats_random"] = bool(r["V"] - rand["V"] > 3 * np.hypot(r["V_se"], rand["V_se"]))
            row["algos"][algo] = r
            print(f"  {algo:10s} V {r['V']:9.2f} ± {r['V_se']:6.2f}  C {np.round(r['C'], 3).tolist()}  "
                  f"beats random: {r['beats_random']}  ({r['seconds']:.0f} s)", flush=True)  # fmt: skip
        report["envs"][name] = row
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

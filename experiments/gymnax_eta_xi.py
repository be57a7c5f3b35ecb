"""The adversary's step size of each ``gymnax:`` preset, by one rule: ``eta_xi`` such that
one LTMA step (the score-function direction, the preset's horizon, ``lam~ = lam_init``)
of the untrained policy at the nominal kernel moves ``xi`` by about 1 % of the box's
half-width, in the median over 200 single-episode directions.

    python experiments/gymnax_eta_xi.py

Prints, per preset, the median of ``max_i |d_i| / kappa_i`` over the directions ``d``,
the ``eta_xi`` the rule gives (rounded to a power of ten) and the preset's own.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from rcmdp_jax.envs import GYMNAX_PREFIX as PREFIX
from rcmdp_jax.envs.gymnax_presets import PRESETS

from rcmdp_jax import envs, preset
from rcmdp_jax.ltma import ltma_direction
from rcmdp_jax.networks import build_networks
from rcmdp_jax.rollout import Policy, sample_episode


def median_relative_direction(name: str, n: int = 200) -> float:
    cfg = preset(name, "PPO-Robust-Lag")
    env, params = envs.make(name)
    actor, _ = build_networks(cfg, env)
    actor_params = actor.init(jax.random.key(0), jnp.zeros((env.obs_dim,)))
    policy = Policy(actor, actor_params)
    lam = jnp.full((env.num_constraints,), cfg.hparams.lam_init)

    horizon = cfg.option("ltma_horizon")

    def one(key):
        traj = jax.vmap(lambda k: sample_episode(k, env, params, policy, horizon))(key[None])
        return ltma_direction(env, params, traj, lam, cfg.hparams.gamma)

    d = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(1), n))
    return float(np.median(np.max(np.abs(np.asarray(d)) / np.asarray(params.kappa), axis=1)))


def main():
    for key in PRESETS:
        name = PREFIX + key
        rel = median_relative_direction(name)
        rule = 10 ** round(math.log10(0.01 / rel))
        own = preset(name, "PPO-Robust-Lag").hparams.eta_xi
        print(f"{name:34s} median max|d|/kappa {rel:10.3g}   rule eta_xi {rule:.0e}   preset {own:.0e}", flush=True)


if __name__ == "__main__":
    main()

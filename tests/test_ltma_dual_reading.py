"""Where ltma's dual phase reads C^ (``adversary/ltma.py``, option ``ltma_dual_reading``): at the
kernel the ascent found (the study's), or guarded — at the worse by C of that kernel and the
nominal one — so that a kernel where the constraint is cheap cannot hide a nominal kernel that
breaks it (Inventory's costly-order collapse, docs/robustness_findings.md)."""

import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax import envs, preset
from rcmdp_jax.adversary import get
from rcmdp_jax.adversary.base import Context
from rcmdp_jax.networks import build_networks
from rcmdp_jax.rollout import Policy, episode_values

ENV = "inventory@cost_threshold=0.13"


def _case(reading: str):
    cfg = preset(ENV, "PPO-Robust-Lag", ltma_dual_reading=reading, ltma_iterations=3, adversary_episodes=4)
    env, params = envs.make(cfg.env)
    actor, _ = build_networks(cfg, env)
    hp = jax.tree.map(jnp.float32, cfg.hparams.with_all_numbers())
    ctx = Context(env, actor, cfg, False)
    n_envs = jnp.zeros((4, *params.xi.shape))
    step = jax.jit(lambda k, start, actor_params, lam: get("ltma").step(ctx, k, start, n_envs, actor_params, lam, hp))
    return cfg, env, params, actor, hp, step


def test_the_presets_guard_outside_the_study_and_read_as_the_study_on_its_domains():
    ltma = get("ltma")
    guarded = preset("gymnax:Pendulum-v1", "PPO-Lag+ltma")
    assert guarded.option("ltma_dual_reading") == "guarded"
    assert ltma.separate(guarded) and ltma.own_env_kernels(guarded)
    study = preset("cartpole", "MDPO-Robust-Lag")
    assert not ltma.separate(study) and not ltma.own_env_kernels(study)  # the study's program, unchanged
    one_env = preset("gymnax:Pendulum-v1", "MCPMD-Lag+ltma")  # one rollout env: reads guarded, trains on the kernel found
    assert ltma.reads_cost(one_env) and not ltma.separate(one_env)
    assert preset("cartpole", "MDPO-Robust-Lag").option("ltma_dual_reading") == "found"
    assert get("ltma").reads_cost(preset("gymnax:Pendulum-v1", "PPO-Lag+ltma"))
    assert not get("ltma").reads_cost(preset("cartpole", "MDPO-Robust-Lag"))


def test_guarded_reads_the_worse_by_cost_of_the_kernel_found_and_the_nominal_kernel():
    cfg, env, params, actor, hp, guarded = _case("guarded")
    policy_cost = jax.jit(lambda k, xi, actor_params: jnp.mean(jax.vmap(
        lambda kk: episode_values(kk, env, params.replace(xi=xi), Policy(actor, actor_params, dropout=cfg.act_dropout),
                                  hp.gamma, env.episode_length)[1][0])(jax.random.split(k, cfg.option("adversary_episodes")))))
    lam = jnp.array([0.3])
    seen = set()
    for seed in range(4):
        actor_params = actor.init(jax.random.PRNGKey(seed), jnp.zeros((env.obs_dim,)))
        # start the ascent at a corner, away from the nominal kernel
        start = params.replace(xi=params.xi_c + params.kappa * (1.0 if seed % 2 else -1.0))
        key = jax.random.PRNGKey(11 + seed)
        found, env_xi, steps, dual_xi = guarded(key, start, actor_params, lam)
        # the reference: C at the kernel found and at the nominal one, rolled out here with the guard's keys
        k_guard = jax.random.fold_in(key, 1)
        c_found = float(policy_cost(k_guard, found.xi, actor_params))
        c_nominal = float(policy_cost(k_guard, params.xi_c, actor_params))
        want = found.xi if c_found >= c_nominal else params.xi_c
        np.testing.assert_allclose(dual_xi, want, rtol=1e-6)
        # the separate worst cases: envs 0 and 2 serve the return on the kernel found, 1 and 3 the constraint on its worse
        np.testing.assert_allclose(env_xi[::2], jnp.broadcast_to(found.xi, env_xi[::2].shape))
        np.testing.assert_allclose(env_xi[1::2], jnp.broadcast_to(want, env_xi[1::2].shape))
        # no multiplier yet: every env on the kernel found
        found0, env0, _, _ = guarded(key, start, actor_params, jnp.zeros(1))
        np.testing.assert_allclose(env0, jnp.broadcast_to(found0.xi, env0.shape))
        seen.add(bool(c_found >= c_nominal))
    assert seen == {True, False}, "the cases should exercise both readings"

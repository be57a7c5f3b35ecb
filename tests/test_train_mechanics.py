"""Behaviour that carries through training: PPO's early stop, the restart schedule,
the LTMA direction against NumPy, truncation through the rollout, the state bound,
the exact KL estimator."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny

from rcmdp_jax import envs, make_train, preset
from rcmdp_jax.ltma import ltma_direction
from rcmdp_jax.networks import Actor
from rcmdp_jax.rollout import Trajectory, collect_rollout, episode_values, init_accumulator

KEY = jax.random.PRNGKey(11)


@pytest.mark.parametrize("kl_check,tiny_steps", [("dropout_off", 1), ("sb3", 0)])
def test_ppo_early_stop_counts(kl_check, tiny_steps):
    """A tiny target KL stops PPO at once: the dropout-off check passes the first
    minibatch (the policy has not moved), the SB3 check (dropout on) does not;
    with an infinite target every one of epochs x minibatches steps runs."""
    cfg = tiny("cartpole", "PPO", kl_check=kl_check)
    hp = jax.tree.map(lambda x: jnp.full((2,), x, jnp.float32), cfg.hparams)
    hp = hp.replace(target_kl=jnp.array([1e-12, math.inf], jnp.float32))
    m = jax.jit(jax.vmap(make_train(cfg), in_axes=(None, 0)))(KEY, hp).metrics  # both targets, one compile
    np.testing.assert_array_equal(m["n_updates"][0], tiny_steps)
    np.testing.assert_array_equal(m["policy_epochs"][0], 1)
    np.testing.assert_array_equal(m["n_updates"][1], cfg.epochs * cfg.num_minibatches)
    np.testing.assert_array_equal(m["policy_epochs"][1], cfg.epochs)


def _restart_alphas(starts, ends, kappa, alpha0, big_k):
    """NumPy: per-batch ticks k = iteration; a restart at iteration j (its LTMA phase moved
    some xi_i from ``starts[j]`` to ``ends[j]`` by more than kappa_i / 2) re-bases k' = j
    for the iterations after it."""
    out, kp = [], 0
    for k in range(len(ends)):
        out.append(alpha0 / (1 - (k - kp) / (big_k - kp)))
        if np.any(np.abs(ends[k] - starts[k]) > 0.5 * kappa):
            kp = k
    return np.array(out)


@pytest.mark.parametrize("env_name,restarts", [("inventory", True), ("cartpole", False)])
def test_restart_schedule_inside_training(env_name, restarts):
    cfg = tiny(env_name, "MDPO-Robust:restart-batch", iterations=6)
    _, params = envs.make(env_name)
    m = jax.jit(make_train(cfg))(KEY).metrics
    ends = np.asarray(m["xi"]).reshape(cfg.num_iterations, -1)
    starts = np.concatenate([np.asarray(params.xi).reshape(1, -1), ends[:-1]])
    kappa = np.asarray(params.kappa).ravel()
    # Inventory's eta_xi = 0.1 moves xi far within a phase; CartPole's 1e-7 never does
    assert np.any(np.abs(ends - starts) > 0.5 * kappa) == restarts
    np.testing.assert_allclose(m["alpha"], _restart_alphas(starts, ends, kappa, 2.0, cfg.num_iterations), rtol=1e-5)
    linear = 2.0 / (1 - np.arange(cfg.num_iterations) / cfg.num_iterations)
    assert np.allclose(m["alpha"], linear) != restarts


def test_ltma_direction_against_numpy():
    """Inventory 1-D, a hand-built batch of 2 episodes x 4 steps, one masked after step 2,
    lam~ = 0.7: ``mean_e sum_t gamma^t G_t (s' - mu) zeta``, ``G_t`` the cost-to-go of
    ``cL = -r + lam~ c``."""
    env, params = envs.make("inventory")
    xi = np.array([-3.0, 2.0])
    params = params.replace(xi=jnp.asarray(xi))
    rng = np.random.default_rng(0)
    s = rng.normal(0, 2, (2, 4, 1))
    a = rng.integers(0, 4, (2, 4))
    s_next = rng.normal(0, 2, (2, 4, 1))
    r, c = rng.normal(size=(2, 4)), rng.normal(size=(2, 4, 1))
    alive = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], np.float64)
    gamma, lam = 0.9, 0.7
    traj = Trajectory(*(jnp.asarray(x, jnp.float32) for x in (s, a, s_next, r, c, alive)))
    traj = traj.replace(action=jnp.asarray(a))
    got = ltma_direction(env, params, traj, jnp.array([lam]), gamma)

    k = 1.0 / math.sqrt(8 * math.pi)
    orders, centres, sigmas = (
        np.array([-8.0, -4.0, 3.0, 6.0]),
        np.array([[-4.0, 5.0], [-2.0, 8.0]]),
        np.array([10.0, 5.0]),
    )
    want = np.zeros(2)
    for e in range(2):
        cost = (-r[e] + lam * c[e, :, 0]) * alive[e]
        for t in range(4):
            g = sum(gamma ** (u - t) * cost[u] for u in range(t, 4))
            z = np.array([s[e, t, 0], orders[a[e, t]]])
            zeta = -k * ((z - centres) ** 2).sum(1) / (2 * sigmas**2)
            want += alive[e, t] * gamma**t * g * (s_next[e, t, 0] - xi @ zeta) * zeta
    np.testing.assert_allclose(got, want / 2, rtol=2e-4)


def test_truncation_through_the_rollout_at_the_inventory_time_limit():
    env, params = envs.make("inventory")
    actor = Actor(4, (8,))
    actor_params = actor.init(jax.random.PRNGKey(0), jnp.zeros((1,)))
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(KEY, 1), params)
    traj, *_ = jax.jit(
        lambda o, st: collect_rollout(KEY, env, params, actor, actor_params, st, o, init_accumulator(1, 1), 100, 0.95)
    )(obs, state)
    term, done = np.asarray(traj.terminated[:, 0]), np.asarray(traj.done[:, 0])
    assert not term.any()  # a time limit is never a termination
    assert np.flatnonzero(done).tolist() == [79]
    # next_obs at the boundary is the state the episode reached, not the reset state
    assert float(traj.obs[80, 0, 0]) == 0.0 and float(traj.next_obs[79, 0, 0]) != 0.0
    np.testing.assert_array_equal(traj.next_obs[:79, 0], traj.obs[1:80, 0])


def test_a_diverging_kernel_gives_finite_values_and_reaches_the_bound():
    env, params = envs.make("inventory")
    params = params.replace(xi=jnp.array([13.0, -11.5]))  # a corner where s grows like s^2
    v, c, n, hit = episode_values(KEY, env, params, lambda o, k: 0, env.gamma, env.episode_length)
    assert np.isfinite(float(v)) and np.all(np.isfinite(np.asarray(c))) and float(n) == 80
    assert float(hit) == 1.0
    v0, _, _, hit0 = episode_values(KEY, env, env.default_params, lambda o, k: 3, env.gamma, env.episode_length)
    assert float(hit0) == 0.0 and np.isfinite(float(v0))


@pytest.mark.parametrize("estimator", ["exact", "reference"])
def test_mdpo_kl_term_by_estimator_against_numpy(estimator):
    """With zero advantages MDPO's policy loss is ``alpha * mean KL``: the exact
    ``KL(pi_theta || pi_k)`` per state, or the reference ``exp(r) - 1 - r`` per sample."""
    from rcmdp_jax.learners import Batch, make_learner
    from rcmdp_jax.networks import build_networks

    cfg = preset("cartpole", "MDPO", kl_estimator=estimator, dropout=0.0, normalize_advantages=False)
    env, _ = envs.make("cartpole")
    actor, critic = build_networks(cfg, env)
    obs = jax.random.normal(KEY, (6, 4))
    new = actor.init(jax.random.PRNGKey(1), obs[0])
    old = actor.init(jax.random.PRNGKey(2), obs[0])
    old = jax.tree.map(lambda x: x * 50.0, old)  # far from the new policy
    params = {"actor": new, "critic": critic.init(jax.random.PRNGKey(3), obs[0])}
    action = jnp.array([0, 1, 1, 0, 1, 0])
    old_lp = actor.apply(old, obs).log_prob(action)
    mb = Batch(obs, action, old_lp, jnp.zeros(6), jnp.zeros((6, 2)))
    _, aux = make_learner(cfg, env, actor, critic).loss(params, mb, KEY, 3.0, old, cfg.hparams)
    p = np.asarray(jax.nn.softmax(actor.apply(new, obs).logits), np.float64)
    q = np.asarray(jax.nn.softmax(actor.apply(old, obs).logits), np.float64)
    if estimator == "exact":
        kl = np.sum(p * np.log(p / q), axis=1)
    else:
        r = np.log(p[np.arange(6), action]) - np.log(q[np.arange(6), action])
        kl = np.exp(r) - 1 - r
    np.testing.assert_allclose(aux["policy_loss"], 3.0 * kl.mean(), rtol=1e-4)

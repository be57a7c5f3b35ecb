"""The data margin (``dual.reading``): each constraint's margin ``z sigma_j / sqrt(n)`` from the
spread of C its dual's own whole episodes show, applied once, on the reading every rule gets;
checked against plain NumPy re-derivations and a toy whose fixed point the margin moves."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax import HParams, constraints, dual, envs, preset
from rcmdp_jax.networks import build_networks


def numpy_episode_values(costs, done, gammas):
    """The discounted C of every episode that starts and ends inside the batch, by hand, per env."""
    T, B, m = costs.shape
    out = []
    for b in range(B):
        start = 0
        for t in range(T):
            if done[t, b]:
                out.append([sum(gammas[j] ** (k - start) * costs[k, b, j] for k in range(start, t + 1))
                            for j in range(m)])  # fmt: skip
                start = t + 1
    return np.array(out)


def test_the_batch_episodes_are_the_whole_ones_with_their_own_discounts():
    rng = np.random.default_rng(0)
    T, B = 9, 3
    costs = rng.normal(size=(T, B, 2)).astype(np.float32) * np.array([1.0, 50.0], np.float32)
    done = np.zeros((T, B), bool)
    done[[2, 6], 0] = True  # two whole episodes, then a cut one
    done[8, 1] = True  # one episode, the whole batch
    # env 2 never ends: its one episode is cut by the batch's end, no whole episode
    gammas = np.array([0.9, 1.0], np.float32)
    values, weights = dual.batch_episodes(jnp.asarray(costs), jnp.asarray(done), jnp.asarray(gammas))
    got = np.asarray(values)[np.asarray(weights) > 0]
    want = numpy_episode_values(costs, done, gammas)
    assert np.asarray(weights).sum() == 3
    np.testing.assert_allclose(np.sort(got, 0), np.sort(want, 0), rtol=1e-5)


def test_the_margin_against_a_hand_computation_two_scales():
    """Two constraints, one 100 times the other's scale: margins in the same ratio, each
    ``z * std / sqrt(n)`` of the batch (the running moments' first step holds the batch alone)."""
    c = np.array([[0.1, 10.0], [0.4, 40.0], [-0.2, -20.0], [0.3, 30.0], [0.0, 0.0]], np.float32)
    hp = HParams(margin_z=2.0, margin_n=25.0, cost_margin=0.5)
    spread = dual.track_spread(jnp.zeros((3, 2)), jnp.asarray(c), jnp.ones(5))
    got = np.asarray(dual.margin_of(spread, hp))
    want = 0.5 + 2.0 * c.std(0) / np.sqrt(25.0)  # the population standard deviation
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert got[1] - 0.5 == pytest.approx(100 * (got[0] - 0.5), rel=1e-4)
    # episodes of weight 0 do not count; a second batch moves the moments by 1 - decay
    more = dual.track_spread(spread, jnp.asarray(c * 3), jnp.array([1.0, 1.0, 1.0, 1.0, 0.0]))
    d = dual.SPREAD_DECAY
    w = np.array([1, 1, 1, 1, 0.0])
    n = d * (1 - d) * 5 + (1 - d) * 4
    s1 = d * (1 - d) * c.sum(0) + (1 - d) * (w[:, None] * c * 3).sum(0)
    s2 = d * (1 - d) * (c**2).sum(0) + (1 - d) * (w[:, None] * (c * 3) ** 2).sum(0)
    np.testing.assert_allclose(np.asarray(dual.spread_sigma(more)), np.sqrt(s2 / n - (s1 / n) ** 2), rtol=1e-4)


def test_no_episodes_no_data_margin_and_z_zero_is_the_fixed_margin():
    spread = dual.track_spread(jnp.zeros((3, 2)), jnp.ones((4, 2)) * 7.0, jnp.zeros(4))
    assert np.all(np.asarray(dual.spread_sigma(spread)) == 0.0)
    c = jnp.asarray(np.random.default_rng(1).normal(size=(8, 2)), jnp.float32)
    spread = dual.track_spread(jnp.zeros((3, 2)), c, jnp.ones(8))
    np.testing.assert_array_equal(np.asarray(dual.margin_of(spread, HParams(cost_margin=0.25))), [0.25, 0.25])


@pytest.mark.parametrize("rule", ["lagrangian", "pid"])
@pytest.mark.parametrize("per_step", [False, True])
def test_the_margin_moves_the_converged_target(rule, per_step):
    """A toy dual: the constraint value falls with the multiplier, ``C(lam) = 2 - lam``, its
    episodes ``C +- s``. Read through ``dual.reading`` (the batch ``C^`` alone, or per-step
    estimates, the study's cost_to_go path), the rule settles where ``C = -z s / sqrt(n)``."""
    s, z, n = 3.0, 2.0, 9.0
    hp = HParams(eta_lam=0.005, lam_init=0.0, lam_clip=50.0, margin_z=z, margin_n=n).with_all_numbers()
    r = constraints.get(rule)
    state = constraints.init_dual(1, hp.lam_init, [r], hp)

    @jax.jit
    def one(state):
        c = 2.0 - state.lam
        episodes = (jnp.stack([c - s, c + s]), jnp.ones(2))
        estimates = jnp.tile(c, (4, 1)) if per_step else None
        c_hat, est, spread, margin = dual.reading(state, c, estimates, episodes, hp)
        return r.update(state.replace(spread=spread, margin=margin), c_hat, hp, 4, est)

    for _ in range(3000):
        state = one(state)
    c_final = 2.0 - float(state.lam[0])
    assert c_final == pytest.approx(-z * s / np.sqrt(n), abs=1e-2)  # -2, not the limit 0
    assert float(state.margin[0]) == pytest.approx(z * s / np.sqrt(n), rel=1e-4)


@pytest.mark.parametrize("estimator", ["start_value", "cost_to_go"])
def test_the_dual_phase_reads_the_margin_its_episodes_show(estimator):
    """In a real dual phase on CartPole: the stored ``C^`` is the batch's mean plus the margin of the
    spread of the episodes it sampled, the same on the per-step path and the start-value path."""
    cfg = preset("cartpole", "PPO-Lag", dual_estimator=estimator, n_dual_episodes=4, margin_z=2.0, margin_n=4.0)
    env, params0 = envs.make(cfg.env)
    actor, critic = build_networks(cfg, env)
    obs0 = jnp.zeros((env.obs_dim,))
    params = {"actor": actor.init(jax.random.PRNGKey(1), obs0), "critic": critic.init(jax.random.PRNGKey(2), obs0)}
    hp = jax.tree.map(jnp.float32, cfg.hparams.with_all_numbers())
    start = constraints.init_dual(env.num_constraints, hp.lam_init, [constraints.get(cfg.constraint)], hp)
    key = jax.random.PRNGKey(3)
    d, _, _ = dual.dual_phase(key, env, actor, critic, params, start, params0, cfg, hp,
                              constraints.code(cfg.constraint), jnp.int32(cfg.dual_epochs))  # fmt: skip
    c_hat, _, _, (values, weights) = dual.dual_estimates(key, env, params0, actor, critic, params, cfg, hp)
    v, w = np.asarray(values, np.float64), np.asarray(weights, np.float64)
    assert w.sum() >= 2  # whole episodes were seen
    mean = (w[:, None] * v).sum(0) / w.sum()
    sigma = np.sqrt((w[:, None] * (v - mean) ** 2).sum(0) / w.sum())
    np.testing.assert_allclose(np.asarray(d.margin), 2.0 * sigma / 2.0, rtol=1e-3)
    np.testing.assert_allclose(np.asarray(d.c_hat), np.asarray(c_hat) + np.asarray(d.margin), rtol=1e-5)
    assert float(d.margin[0]) > 0


def test_presets_margin_outside_the_study_only():
    assert float(preset("gymnax:Pendulum-v1", "PPO-Lag").hparams.margin_z) > 0
    assert float(preset("gymnax:Pendulum-v1", "PPO-Lag").hparams.cost_margin) == 0  # no hand-measured margin
    assert float(preset("gymnax:Pendulum-v1", "PPO-Lag").hparams.margin_n) == envs.spec("gymnax:Pendulum-v1").n_test
    assert float(preset("cartpole", "PPO-Lag").hparams.margin_z) == 0  # the study's domain: the study's method
    with pytest.raises(ValueError, match="margin_n must be a finite number >= 1"):
        preset("gymnax:Pendulum-v1", "PPO-Lag", margin_n=0.0)

"""The dual phase's readings of C^ (``Config.dual_estimator``, docs/method.md §2a.4): each reading
against a NumPy re-derivation, the shuffled minibatches, the ascent over them, the
wiring in training, bad input; and ``ALGO@FIELD=VALUE`` hyperparameter lanes. Divergence
(``rcmdp_jax.divergence``) on lanes of one tiny program: blow-ups, and a seed that diverged."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny

from rcmdp_jax import HParams, constraints, dual, make_train, preset
from rcmdp_jax.family import group
from rcmdp_jax.presets import split_variant

KEY = jax.random.PRNGKey(3)


def test_minibatch_means_shuffle_every_epoch_into_a_partition():
    """Values 2^i identify the time steps: each minibatch mean times its size is a sum
    of distinct powers of two, so the steps of every minibatch can be read back."""
    n, b, epochs = 10, 4, 3
    values = (2.0 ** np.arange(n))[:, None].astype(np.float32)
    means = np.asarray(dual.minibatch_means(KEY, jnp.asarray(values), epochs, b))
    assert means.shape == (epochs * 3, 1)
    sizes = [4, 4, 2]
    orders = []
    for e in range(epochs):
        seen = []
        for j, size in enumerate(sizes):
            total = int(round(means[e * 3 + j, 0] * size))
            members = [i for i in range(n) if total >> i & 1]
            assert len(members) == size, (e, j, members)
            seen += members
        assert sorted(seen) == list(range(n))  # every step once per epoch
        orders.append(tuple(seen))
    assert len(set(orders)) > 1  # a fresh shuffle per epoch


def test_ascent_over_minibatch_estimates_by_hand():
    hp = preset("inventory", "MDPO-Lag").hparams.replace(eta_lam=0.5, lam_clip=3.0)
    dual = constraints.DualState(lam=jnp.array([1.0]), c_hat=jnp.zeros(1))
    est = np.array([[2.0], [-1.0], [3.0], [-8.0], [1.0], [1.0]], np.float32)
    for mode in ("lagrangian", "augmented"):
        for n in (6, 4):  # steps past n are skipped; n may be traced
            lam = 1.0
            for c in est[:n, 0]:
                lam = np.clip(lam + 0.5 * c, 0, 3.0) if mode == "lagrangian" else max(-0.5 * c, lam + 0.5 * c)
            run = jax.jit(lambda k, m=mode: constraints.get(m).update(dual, jnp.array([0.7]), hp, k, jnp.asarray(est)))
            out = run(n)
            np.testing.assert_allclose(out.lam, [lam], rtol=1e-6)
            np.testing.assert_allclose(out.c_hat, [0.7])  # the batch estimate is what is stored


def _numpy_readings(costs, term, done, v, v_next, gamma, lam):
    T = costs.shape[0]
    g, a = np.zeros_like(costs), np.zeros_like(costs)
    g_next, a_next = np.zeros_like(costs[0]), np.zeros_like(costs[0])
    for t in reversed(range(T)):
        nd = (1.0 - done[t])[:, None]
        g[t] = costs[t] + gamma * nd * g_next
        delta = costs[t] + gamma * (1.0 - term[t])[:, None] * v_next[t] - v[t]
        a[t] = delta + gamma * lam * nd * a_next
        g_next, a_next = g[t], a[t]
    return {"step_cost": costs, "cost_to_go": g, "gae": a + v}


def test_batch_readings_match_numpy():
    rng = np.random.default_rng(0)
    T, B, m = 12, 3, 2
    costs = rng.normal(size=(T, B, m)).astype(np.float32)
    term = (rng.random((T, B)) < 0.1).astype(np.float32)
    done = np.maximum(term, (rng.random((T, B)) < 0.1)).astype(np.float32)  # truncations too
    v, v_next = (rng.normal(size=(T, B, m)).astype(np.float32) for _ in range(2))
    want = _numpy_readings(costs, term, done, v, v_next, 0.9, 0.8)
    for name, ref in want.items():
        got = dual.batch_readings(name, *map(jnp.asarray, (costs, term, done, v, v_next)), 0.9, 0.8)
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5, err_msg=name)
    with pytest.raises(ValueError, match="start_value"):
        dual.batch_readings("start_value", costs, term, done)


@pytest.mark.parametrize("estimator", ["step_cost", "cost_to_go", "gae"])
def test_minibatch_readings_in_training(estimator):
    """With 384 = 12 x 32 steps in the multiplier batch and no clip reached, every epoch's
    minibatch means sum to 12 x the batch mean, whatever the shuffle: lam moves by
    eta x 5 x 12 x C^ per iteration (C^ = the batch mean, the metric ``c_hat``)."""
    cfg = preset("inventory", "MDPO-Lag", total_timesteps=3 * 64, n_steps=16, minibatch_size=16, epochs=2,
                 eval_every=100, dual_estimator=estimator, dual_batch=384, lam_init=100.0, lam_clip=1e6)  # fmt: skip
    m = jax.jit(make_train(cfg))(KEY).metrics
    lam, c_hat = np.asarray(m["lam"])[:, 0], np.asarray(m["c_hat"])[:, 0]
    np.testing.assert_array_equal(np.asarray(m["dual_updates"]), 60)
    np.testing.assert_allclose(np.diff(np.asarray(m["dual_steps"])), 384)  # the multiplier batch's steps
    prev = np.concatenate([[100.0], lam[:-1]])
    np.testing.assert_allclose(lam, prev + cfg.hparams.eta_lam * 60 * c_hat, rtol=1e-5)
    assert np.all(np.isfinite(c_hat)) and np.any(c_hat != 0)


# CartPole's MDPO-Lag, tiny (2 iterations): one program of three lanes, each its own seed and
# hyperparameters, that three tests run (the dropout and blow-up checks, the diverged seed)
TINY_LAG = tiny(algo="MDPO-Lag", iterations=2)
SEEDS = jax.random.split(KEY, 3)


@functools.cache
def three_lanes():
    """``TINY_LAG``'s program, vmapped: ``(keys [3, 2], hparams with [3] leaves) -> TrainResult``."""
    return jax.jit(jax.vmap(make_train(TINY_LAG)))


def lanes_of(**numbers) -> HParams:
    """``TINY_LAG``'s hyperparameters in three lanes, ``numbers`` (``field=[3 values]``) changed."""
    return jax.tree.map(lambda x: jnp.full((3,), x, jnp.float32), TINY_LAG.hparams).replace(
        **{k: jnp.asarray(v, jnp.float32) for k, v in numbers.items()}
    )


@functools.cache
def three_seeds():
    """``TINY_LAG`` trained on ``SEEDS``: the ``TrainResult``."""
    return three_lanes()(SEEDS, lanes_of())


def test_dual_dropout_collects_the_estimate_with_dropout_on():
    """Seed 0's ``c_hat`` with ``dual_dropout`` on differs from the same seed's with it off
    (a lane of ``three_seeds``), and the multiplier batch's rollout with dropout on keeps
    the actions and changes the log-probabilities."""
    from rcmdp_jax.rollout import collect_rollout, init_accumulator

    cfg = TINY_LAG
    plain = np.asarray(three_seeds().metrics["c_hat"][0])
    on = np.asarray(jax.jit(make_train(cfg.replace(dual_dropout=True)))(SEEDS[0]).metrics["c_hat"])
    assert np.all(np.isfinite(plain)) and np.all(np.isfinite(on)) and not np.allclose(plain, on)
    # the multiplier batch's rollout: the same actions (the same keys), the log-probabilities
    # of the dropout-perturbed network
    train = make_train(cfg)
    state = train.init(KEY)
    env, params = train.env, state.env_params
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(KEY, 4), params)
    runs = [collect_rollout(KEY, env, params, train.step.actor, state.params["actor"], env_state, obs,
                            init_accumulator(4, 1), 20, 0.99, d)[0] for d in (False, True)]  # fmt: skip
    assert not np.allclose(np.asarray(runs[0].log_prob), np.asarray(runs[1].log_prob))


def test_bad_dual_estimator_input():
    with pytest.raises(ValueError, match="dual_estimator='mean'.*start_value, step_cost, cost_to_go, gae"):
        preset("cartpole", "MDPO-Lag", dual_estimator="mean")
    with pytest.raises(ValueError, match="MCPMD does not train"):
        preset("cartpole", "MCPMD-Lag", dual_estimator="gae")
    with pytest.raises(ValueError, match="n_dual_episodes=3 must divide dual_batch=400"):
        preset("cartpole", "MDPO-Lag", dual_estimator="cost_to_go", n_dual_episodes=3)
    with pytest.raises(ValueError, match="dual_dropout must be True or False"):
        preset("cartpole", "MDPO-Lag", dual_dropout="yes")


def test_hyperparameter_lanes_in_algorithm_names():
    assert split_variant("MDPO-Lag@lam_init=0@eta_lam=1e-4") == ("MDPO-Lag", {"lam_init": 0.0, "eta_lam": 1e-4})
    algo, over = split_variant("MDPO-Robust-Lag:restart-batch@eta_xi=0.01")
    assert algo == "MDPO-Robust-Lag" and over == {"alpha_schedule": "restart", "alpha_tick": "batch", "eta_xi": 0.01}
    cfg = preset("inventory", "MDPO-Lag@lam_init=0", lam_init=3.0)  # the name's value wins
    assert cfg.hparams.lam_init == 0.0 and cfg.name == "MDPO-Lag@lam_init=0"
    configs = {a: preset("cartpole", a) for a in ("MDPO-Lag", "MDPO-Lag@lam_init=0", "MDPO-Robust@eta_xi=1e-8")}
    assert group(configs) == [list(configs)]  # one family: lanes of one program
    for bad in ("MDPO-Lag@epochs=3", "MDPO-Lag@lam_init", "MDPO-Lag@lam_init=zero", "MDPO-Lag@=1"):
        with pytest.raises(ValueError, match="ALGO@FIELD=NUMBER"):
            preset("cartpole", bad)


def test_finite_blow_ups_count_as_divergence_and_the_exit_status_says_so():
    import types

    from rcmdp_jax.divergence import BLOW_UP, diverged_seeds
    from rcmdp_jax.study.orchestrate import Study

    result = three_seeds()
    assert not diverged_seeds(result).any()
    for key, seed, value in (("critic_loss", 1, 1e31), ("lam", 2, 10 * BLOW_UP)):
        m = dict(result.metrics)
        m[key] = np.asarray(m[key]).copy()
        m[key][seed, -1] = value  # finite, far beyond any domain's scale
        bad = diverged_seeds(result.replace(metrics=m))
        np.testing.assert_array_equal(bad, np.arange(3) == seed)
    # a multiplier step behind lam's clip: |C^| * eta_lam beyond BLOW_UP on an iteration, read from the config
    c_hat = np.asarray(result.metrics["c_hat"]).copy()
    c_hat[1] = 1e-6  # seed 1: every entry of its C^ small enough
    steps = dict(result.metrics, c_hat=c_hat)
    wild = dataclasses.replace(TINY_LAG, hparams=TINY_LAG.hparams.replace(eta_lam=1e17))
    assert np.abs(c_hat[[0, 2]]).max() * 1e17 > BLOW_UP and np.abs(c_hat[1]).max() * 1e17 <= BLOW_UP
    np.testing.assert_array_equal(diverged_seeds(result.replace(metrics=steps), wild), [True, False, True])
    assert not diverged_seeds(result.replace(metrics=steps), TINY_LAG).any()
    unconstrained = dataclasses.replace(wild, constraint="none")  # its lam is never read
    assert not diverged_seeds(result.replace(metrics=steps), unconstrained).any()
    status = lambda d: Study.exit_status(types.SimpleNamespace(diverged=d, missing=[], damaged=[]))  # noqa: E731
    assert (
        status({}) == 0 and status({"inventory/MDPO-Lag": (1, 3)}) == 3 and status({"inventory/MDPO-Lag": (3, 3)}) == 4
    )


def test_one_diverged_seed_of_a_batch_is_found_and_the_others_kept():
    from rcmdp_jax.divergence import diverged_seeds

    result = three_lanes()(jax.random.split(jax.random.PRNGKey(0), 3), lanes_of(lr=[3e-4, 1e30, 3e-4]))
    np.testing.assert_array_equal(diverged_seeds(result), [False, True, False])


@pytest.mark.parametrize("estimator", ["start_value", "cost_to_go"])
def test_dual_deterministic_reads_the_tested_policys_constraint(estimator):
    """``dual_deterministic``: the dual phase's C^ is the deterministic policy's (the robustness
    test's): with ``start_value`` the mean C of deterministic episodes on the same keys."""
    from rcmdp_jax import envs
    from rcmdp_jax.networks import build_networks
    from rcmdp_jax.rollout import run_episodes

    cfg = preset("gymnax:Pendulum-v1", "PPO-Lag", dual_estimator=estimator, n_dual_episodes=4)
    env, params0 = envs.make(cfg.env)
    actor, critic = build_networks(cfg, env)
    obs0 = jnp.zeros((env.obs_dim,))
    params = {"actor": actor.init(jax.random.PRNGKey(1), obs0), "critic": critic.init(jax.random.PRNGKey(2), obs0)}
    hp = jax.tree.map(jnp.float32, cfg.hparams.with_all_numbers())
    read = lambda c: np.asarray(dual.dual_estimates(KEY, env, params0, actor, critic, params, c, hp)[0])
    sampled, det = read(cfg), read(cfg.replace(dual_deterministic=True))
    assert not np.allclose(sampled, det)
    if estimator == "start_value":
        _, c_eps, _ = run_episodes(KEY, env, params0, actor, params["actor"], 4, hp.gamma, True)
        np.testing.assert_allclose(det, np.asarray(c_eps).mean(0), rtol=1e-5)

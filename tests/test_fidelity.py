"""Fidelity to the study (docs/method.md §2a.4, §2b, §2d, §3): the dual phase's step count and
result, MCPMD's one-episode REINFORCE, SB3 initialisation and optimizer, the
geometric schedule's factor, traced schedules in one family."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tiny_configs import tiny

from rcmdp_jax import constraints, envs, make_train, preset
from rcmdp_jax.learners import make_optimizer
from rcmdp_jax.losses import normalise_episode, reinforce_loss
from rcmdp_jax.networks import build_networks
from rcmdp_jax.presets import schedule_variants
from rcmdp_jax.rollout import collect_episode

KEY = jax.random.PRNGKey(5)


def _iterate(step, lam, n):
    for _ in range(n):
        lam = step(lam)
    return lam


# ----------------------------------------------------------------- dual phase
def test_dual_step_rules_by_hand():
    hp = preset("inventory", "MDPO-Lag").hparams.replace(eta_lam=0.01, lam_clip=6.0)
    dual = constraints.DualState(lam=jnp.array([5.0]), c_hat=jnp.zeros(1))
    # lagrangian: 65 steps of +0.01 * 2 from 5 -> 6.3, clipped at 6 on the way
    out = constraints.get("lagrangian").update(dual, jnp.array([2.0]), hp, 65)
    np.testing.assert_allclose(out.lam, [6.0], rtol=1e-5)
    out = constraints.get("lagrangian").update(dual, jnp.array([-1.0]), hp.replace(lam_clip=50.0), 65)
    np.testing.assert_allclose(out.lam, [5.0 - 0.65], rtol=1e-5)
    out = constraints.get("lagrangian").update(dual, jnp.array([-100.0]), hp, 65)
    np.testing.assert_allclose(out.lam, [0.0])
    # augmented, no clip: 5 + 65 * 0.01 * 2 = 6.3; with C = -1: 5 - 0.01 k stops at
    # -eta C = 0.01 once lam + eta C would fall below it -> 4.35 after 65 steps
    out = constraints.get("augmented").update(dual, jnp.array([2.0]), hp, 65)
    np.testing.assert_allclose(out.lam, [6.3], rtol=1e-5)
    out = constraints.get("augmented").update(dual, jnp.array([-1.0]), hp, 65)
    np.testing.assert_allclose(out.lam, [4.35], rtol=1e-5)
    out = constraints.get("augmented").update(dual, jnp.array([-10.0]), hp, 65)  # 5 - 0.1 k -> floor 0.1
    np.testing.assert_allclose(out.lam, [0.1], rtol=1e-5)
    np.testing.assert_allclose(out.c_hat, [-10.0])
    out = constraints.get("none").update(dual, jnp.array([2.0]), hp, 65)
    np.testing.assert_allclose(out.lam, [5.0])
    # a traced step count (PPO's KL-tied count) gives the same as a static one
    traced = jax.jit(lambda n: constraints.get("augmented").update(dual, jnp.array([-1.0]), hp, n).lam)(65)
    np.testing.assert_allclose(traced, [4.35], rtol=1e-5)


# the augmented rule for each learner: MDPO and PPO (lanes of their Inventory families), RMCPMD
DUAL_CASES = [("inventory", "MDPO-Lag", 65), ("inventory", "MDPO-Augmented-Lag", 65), ("inventory", "PPO-Lag", 65),
              ("inventory", "PPO-Augmented-Lag", 65), ("cartpole", "MCPMD-Lag", 1),
              ("cartpole", "RMCPMD-Augmented-Lag", 1), ("cartpole", "PPO-Lag", None)]  # fmt: skip
SCHEDULES = list(schedule_variants(("MDPO-Robust-Lag",)))
# every configuration this file trains: the dual cases, MDPO-Robust-Lag under every alpha schedule
# on Inventory (lanes of the MDPO-Lag cases' family) and RMCPMD-Lag (a lane of the MCPMD cases' family)
CASES = [(e, a) for e, a, _ in DUAL_CASES] + [("inventory", n) for n in SCHEDULES] + [("cartpole", "RMCPMD-Lag")]


def _config(env_name, algo):
    """MCPMD: a budget of 600 steps (whole episodes), 2 LTMA iterations; MDPO: ``tiny``
    (3 iterations); PPO: 4 iterations of 4 epochs over 4 minibatches (room for the KL stop)."""
    if preset(env_name, algo).episodic:
        return preset(env_name, algo, total_timesteps=600, ltma_iterations=2, eval_every=1000, dual_estimator="start_value")
    if algo.startswith("PPO"):
        return tiny(env_name, algo, minibatch_size=32, n_steps=32, epochs=4, total_timesteps=4 * 128, eval_every=100)
    return tiny(env_name, algo, eval_every=100)


@functools.cache
def runs() -> dict:
    """Every configuration of ``CASES`` trained on ``KEY``, those of one program shape as
    members of one family (Inventory's MDPO-Lag, MDPO-Augmented-Lag and the 7 schedules;
    Inventory's PPO-Lag and PPO-Augmented-Lag; CartPole's MCPMD-Lag, RMCPMD-Augmented-Lag and
    RMCPMD-Lag; CartPole's PPO-Lag: four programs for fifteen configurations):
    ``{(env, algo): (config, metrics)}``."""
    from rcmdp_jax.family import group, make_family

    out = {}
    for env_name in dict.fromkeys(e for e, _ in CASES):
        configs = {a: _config(env_name, a) for e, a in CASES if e == env_name}
        for names in group(configs):
            family = make_family([configs[a] for a in names])
            result = jax.jit(jax.vmap(family, in_axes=(None, 0)))(KEY, jnp.arange(len(names)))
            for i, a in enumerate(names):
                out[env_name, a] = (configs[a], jax.tree.map(lambda x, i=i: np.asarray(x[i]), result.metrics))
    return out


@pytest.mark.parametrize("env_name,algo,expected", DUAL_CASES)
def test_dual_phase_in_training_matches_a_hand_computation(env_name, algo, expected):
    """Per iteration, ``K`` steps of the mode's rule from the previous ``lam`` with this
    iteration's ``C^``; K = 5 x 13 (PPO/MDPO), 1 (MCPMD), 13 x policy epochs run (PPO, CartPole)."""
    cfg = preset(env_name, algo)
    assert cfg.dual_steps_per_epoch == (1 if cfg.episodic else math.ceil(400 / 32))
    cfg, m = runs()[env_name, algo]
    active = np.asarray(m["active"]) > 0
    lam, c_hat, k = (np.asarray(m[x])[active] for x in ("lam", "c_hat", "dual_updates"))
    assert len(k) >= 3
    if expected is None:  # PPO on CartPole: 13 steps per policy epoch begun before the KL stop
        n_upd, n_mb = np.asarray(m["n_updates"]), cfg.num_minibatches
        epochs_run = np.where(n_upd < cfg.epochs * n_mb, n_upd // n_mb + 1, cfg.epochs)
        np.testing.assert_array_equal(k, 13 * epochs_run)
        assert cfg.dual_epochs_from_policy and cfg.dual_epochs == 50
    else:
        np.testing.assert_array_equal(k, expected)
    hp = cfg.hparams
    if cfg.constraint == "lagrangian":
        step = lambda c: lambda x: np.clip(x + hp.eta_lam * c, 0.0, hp.lam_clip)  # noqa: E731
    else:
        step = lambda c: lambda x: np.maximum(-hp.eta_lam * c, x + hp.eta_lam * c)  # noqa: E731
    prev = np.concatenate([[hp.lam_init], lam[:-1, 0]])
    want = [_iterate(step(c), p, int(n)) for p, c, n in zip(prev, c_hat[:, 0], k)]
    np.testing.assert_allclose(lam[:, 0], want, rtol=1e-5, atol=1e-6)
    assert np.any(np.abs(lam[:, 0] - prev) > 0)
    for key in ("lam", "lam_tilde", "c_hat", "policy_loss"):  # every active iteration (the rules above compare values)
        assert np.all(np.isfinite(np.asarray(m[key])[active])), key
    if cfg.constraint == "augmented":  # the policy's multiplier: lam~_k = lam_{k-1} + eta_lam * C^_{k-1}
        lam_tilde = np.asarray(m["lam_tilde"])[active][:, 0]
        np.testing.assert_allclose(lam_tilde[1:], lam[:-1, 0] + hp.eta_lam * c_hat[:-1, 0], rtol=1e-5)


# ----------------------------------------------------------------- MCPMD
def test_reinforce_loss_by_hand():
    log_prob = jnp.array([-0.5, -1.0, -2.0, -7.0])
    returns = jnp.array([3.0, 2.0, 1.0, 99.0])
    mask = jnp.array([1.0, 1.0, 1.0, 0.0])
    g = normalise_episode(returns, mask)  # mean 2, unbiased std 1 over the 3 live steps
    np.testing.assert_allclose(g, [1.0, 0.0, -1.0, 0.0], atol=1e-6)
    # -sum_t log pi * G = -(-0.5 * 1 + -1 * 0 + -2 * -1) = -1.5
    np.testing.assert_allclose(reinforce_loss(log_prob, g, mask), -1.5, rtol=1e-5)
    one = normalise_episode(jnp.array([4.0, 0.0]), jnp.array([1.0, 0.0]))
    np.testing.assert_allclose(one, [0.0, 0.0])  # a one-step episode has nothing to normalise


def test_mcpmd_acts_with_dropout_on_whole_episodes():
    cfg = preset("cartpole", "MCPMD")
    env, params = envs.make("cartpole")
    actor, _ = build_networks(cfg, env)
    actor_params = actor.init(jax.random.PRNGKey(0), jnp.zeros((4,)))
    eps = jax.jit(jax.vmap(lambda k: collect_episode(k, env, params, actor, actor_params, 100, True)))(
        jax.random.split(KEY, 64)
    )
    alive = np.asarray(eps.alive)
    # each buffer is one episode from a fresh reset: live steps first, then masked
    assert np.all(np.diff(alive, axis=1) <= 0) and np.all(alive[:, 0] == 1)
    lengths = alive.sum(1)
    assert lengths.min() < 100  # some episodes end by falling, not all by the time limit
    # the stored log-probabilities are those of the dropout-perturbed policy that acted
    redo = jax.vmap(jax.vmap(lambda o, a, k: actor.apply(actor_params, o, train=True, rngs={"dropout": k}).log_prob(a)))
    np.testing.assert_allclose(redo(eps.obs, eps.action, eps.dropout_key), eps.log_prob, rtol=1e-5, atol=1e-6)
    plain = jax.vmap(jax.vmap(lambda o, a: actor.apply(actor_params, o).log_prob(a)))(eps.obs, eps.action)
    assert not np.allclose(plain, eps.log_prob, atol=1e-3)


def test_mcpmd_trains_on_whole_episodes_and_counts_the_steps_taken():
    """RMCPMD-Lag on CartPole with a budget of 600 steps (a lane of the file's MCPMD family
    program, ``runs``): one whole episode per iteration, the budget counts steps taken."""
    cfg, m = runs()["cartpole", "RMCPMD-Lag"]
    assert (cfg.n_envs, cfg.n_steps, cfg.option("ltma_iterations"), cfg.dual_steps) == (1, 100, 2, 1)
    assert cfg.total_timesteps == 600 and cfg.robust and cfg.constraint == "lagrangian"
    active = np.asarray(m["active"]) > 0
    steps = np.asarray(m["policy_steps"])
    ret = np.asarray(m["episode_return"])[active]
    # one whole episode per iteration: CartPole pays 1 per step, so the steps taken in an
    # iteration are that episode's return, and every episode has its full length (<= 100)
    np.testing.assert_array_equal(np.diff(np.concatenate([[0.0], steps[active]])), ret)
    assert np.all((ret >= 6) & (ret <= 100))
    # the budget counts steps actually taken: iterations run until it is spent, then stop
    assert steps[active][-2] < 600 <= steps[active][-1]
    assert np.all(~active[np.argmax(~active) :]) and np.all(steps[~active] == steps[active][-1])
    assert np.all(np.asarray(m["dual_updates"])[active] == 1)
    assert np.all(np.isnan(np.asarray(m["policy_loss"])[~active]))


# ----------------------------------------------------------------- SB3 conventions
def _singular_values(w):
    return np.linalg.svd(np.asarray(w), compute_uv=False)


def test_sb3_initialisation_and_optimizer():
    cfg = preset("cartpole", "PPO-Lag")
    assert (cfg.init, cfg.hparams.adam_eps, cfg.hparams.max_grad_norm) == ("orthogonal", 1e-5, 0.5)
    env, _ = envs.make("cartpole")
    actor, critic = build_networks(cfg, env)
    a = actor.init(jax.random.PRNGKey(1), jnp.zeros((4,)))["params"]["MLP_0"]
    c = critic.init(jax.random.PRNGKey(2), jnp.zeros((4,)))["params"]["MLP_0"]
    # orthogonal W (128 x 2 or 4 x 128): all singular values equal the gain; biases zero
    np.testing.assert_allclose(_singular_values(a["Dense_0"]["kernel"]), math.sqrt(2.0), rtol=1e-5)
    np.testing.assert_allclose(_singular_values(a["Dense_1"]["kernel"]), 0.01, rtol=1e-5)
    np.testing.assert_allclose(_singular_values(c["Dense_1"]["kernel"]), 1.0, rtol=1e-5)
    assert all(np.all(np.asarray(layer["bias"]) == 0) for layer in (*a.values(), *c.values()))
    # MCPMD: PyTorch's nn.Linear default, weights and biases uniform in +-1/sqrt(fan_in)
    mc = preset("cartpole", "MCPMD")
    assert (mc.init, mc.hparams.adam_eps, mc.hparams.max_grad_norm, mc.act_dropout) == ("torch", 1e-8, math.inf, True)
    p = build_networks(mc, env)[0].init(jax.random.PRNGKey(1), jnp.zeros((4,)))["params"]["MLP_0"]
    for layer, fan_in in (("Dense_0", 4), ("Dense_1", 128)):
        for leaf in p[layer].values():
            leaf = np.asarray(leaf)
            assert np.abs(leaf).max() <= 1 / math.sqrt(fan_in) and np.any(leaf != 0)
            if leaf.size >= 64:  # uniform: std = bound / sqrt(3)
                assert abs(leaf.std() * math.sqrt(3 * fan_in) - 1) < 0.15
    # the optimizer clips the global gradient norm at 0.5 before the step, and Adam has eps 1e-5
    params = {"w": jnp.ones((4,))}
    grads = {"w": jnp.full((4,), 5.0)}  # global norm 10
    sgd_cfg = preset("inventory3d", "MDPO").replace(max_grad_norm=0.5, lr=1.0)
    sgd = make_optimizer(sgd_cfg, sgd_cfg.hparams)
    upd, _ = sgd.update(grads, sgd.init(params), params)
    np.testing.assert_allclose(optax.tree.norm(upd), 0.5, rtol=1e-5)
    adam_state = make_optimizer(cfg, cfg.hparams).init(params)
    assert float(adam_state[1].hyperparams["eps"]) == pytest.approx(1e-5)


def test_geometric_alpha_decays_by_the_domains_gamma():
    for env_name, gamma in (("cartpole", 0.99), ("inventory", 0.95), ("inventory3d", 0.95)):
        cfg = preset(env_name, "MDPO-Robust-Lag", alpha_schedule="geometric", alpha_tick="batch")
        assert cfg.hparams.alpha_decay == pytest.approx(gamma) and cfg.hparams.alpha == 2.0
    cfg, m = runs()["inventory", "MDPO-Robust-Lag:geometric-batch"]  # alpha_0 = 2, one tick of gamma an iteration
    np.testing.assert_allclose(m["alpha"], 2.0 * 0.95 ** np.arange(cfg.num_iterations), rtol=1e-5)


def test_schedules_are_traced_in_one_family():
    """MDPO-Robust-Lag under the 7 alpha schedules on Inventory: one family (lanes of
    ``runs``' Inventory MDPO program), two of them equal to the algorithm trained alone, and
    each schedule's alpha against its closed form."""
    from rcmdp_jax.family import group

    names = SCHEDULES
    configs = {n: runs()["inventory", n][0] for n in names}
    assert names[0] == "MDPO-Robust-Lag:fixed" and len(names) == 7
    assert group(configs) == [names]  # one compiled program for every schedule
    for i in (3, 6):  # restart-epoch and geometric-batch against their algorithm alone
        alone = jax.jit(make_train(configs[names[i]]))(KEY)
        lane = runs()["inventory", names[i]][1]
        np.testing.assert_allclose(lane["alpha"], alone.metrics["alpha"], rtol=1e-5)
        np.testing.assert_allclose(lane["lam"], alone.metrics["lam"], rtol=1e-4, atol=1e-5)
    alpha = np.stack([runs()["inventory", n][1]["alpha"] for n in names])
    assert np.all(alpha[0] == 2.0) and np.all(np.diff(alpha[2]) > 0) and np.all(np.diff(alpha[6]) < 0)
    # per-batch ticks: alpha_0 = 2 and one tick per iteration, K = the iterations (linear-batch) ...
    k, big_k = np.arange(3), configs[names[2]].num_iterations
    np.testing.assert_allclose(alpha[2], 2.0 / (1 - k / big_k), rtol=1e-5)
    # ... per-epoch ticks: 2 ticks (epochs) per iteration, geometric's alpha_0 = 5 (docs/method.md §2d)
    np.testing.assert_allclose(alpha[5], 5.0 * 0.95 ** (2 * k), rtol=1e-5)
    np.testing.assert_allclose(alpha[1], 2.0 / (1 - 2 * k / (2 * big_k)), rtol=1e-5)  # linear: alpha_0 = 2

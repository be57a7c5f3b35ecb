"""make_train learns: better than a random policy; the constraints lower the constraint
cost (lam rises when it is violated; the augmented rule for every learner is checked in
test_fidelity.py); the adversary (LTMA) moves xi to the hand-derived worst corner, stays
in the box and lowers the Lagrangian return."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from train_helpers import SEEDS

from rcmdp_jax import envs, make_train, preset
from rcmdp_jax.ltma import ltma_phase
from rcmdp_jax.networks import build_networks
from rcmdp_jax.rollout import episode_values, run_episodes


def random_policy_return(env_name, n=200):
    env, params = envs.make(env_name)

    def policy(obs, key):
        return jax.random.randint(key, (), 0, env.action_dim)

    def one(k):
        return episode_values(k, env, params, policy, env.gamma, env.episode_length)[0]

    return float(jax.vmap(one)(jax.random.split(jax.random.PRNGKey(7), n)).mean())


def deterministic_return(cfg, result, n=50):
    """Mean discounted return and constraint-costs of each seed's deterministic policy."""
    train = make_train(cfg)
    env = train.env
    actor, _ = build_networks(cfg, env)

    def one(actor_params, key):
        v, c, _ = run_episodes(key, env, env.default_params, actor, actor_params, n, env.gamma, True)
        return v.mean(), c.mean(0)

    n_seeds = result.metrics["lam"].shape[0]
    keys = jax.random.split(jax.random.PRNGKey(3), n_seeds)
    return jax.vmap(one)(result.state.params["actor"], keys)


@functools.cache
def constrained_family() -> dict:
    """MDPO, MDPO-Lag and MDPO-Augmented-Lag on CartPole, 16,000 steps, four seeds each, as
    lanes of one family program: ``{algo: (config, result)}``. Trained once per test run;
    the learning and the constraint tests assert on it."""
    from rcmdp_jax.family import make_family

    seeds = jax.random.split(jax.random.PRNGKey(42), 4)
    names = ("MDPO", "MDPO-Lag", "MDPO-Augmented-Lag")
    cfgs = [preset("cartpole", a, total_timesteps=16_000) for a in names]
    members = jnp.repeat(jnp.arange(3), len(seeds))
    batched = jax.jit(jax.vmap(make_family(cfgs)))(jnp.tile(seeds, (3, 1)), members)  # one compile
    return {
        algo: (cfg, jax.tree.map(lambda x, i=i: x[i * len(seeds) : (i + 1) * len(seeds)], batched))
        for i, (algo, cfg) in enumerate(zip(names, cfgs))
    }


@pytest.mark.slow
@pytest.mark.parametrize("algo,steps", [("MDPO", 16_000), ("PPO", 8_000)])
def test_learning_beats_random_policy(algo, steps):
    if algo == "MDPO":  # the constraint test's unconstrained lanes (four seeds)
        cfg, result = constrained_family()["MDPO"]
        assert cfg.total_timesteps == steps
    else:
        cfg = preset("cartpole", algo, total_timesteps=steps)
        result = jax.jit(jax.vmap(make_train(cfg)))(SEEDS)
    v, _ = deterministic_return(cfg, result)
    baseline = random_policy_return("cartpole")
    assert 8.0 < baseline < 25.0
    assert float(v.mean()) > baseline + 15.0, (float(v.mean()), baseline)
    assert float(v.min()) > baseline + 5.0


@pytest.mark.slow
def test_constraints_lower_the_constraint_cost_and_lam_rises_when_violated():
    costs, rollout, results = {}, {}, {}
    for algo, (cfg, result) in constrained_family().items():
        results[algo] = result
        costs[algo] = np.asarray(deterministic_return(cfg, results[algo])[1][:, 0])
        # the stochastic policy's discounted constraint-cost over the last 5 iterations
        rollout[algo] = np.nanmean(np.asarray(results[algo].metrics["episode_costs"][:, -5:, 0]))
    for algo in ("MDPO-Lag", "MDPO-Augmented-Lag"):
        assert costs[algo].mean() < costs["MDPO"].mean() - 0.5, costs
        assert rollout[algo] < rollout["MDPO"] - 2.0, rollout
    m = results["MDPO-Lag"].metrics
    lam, c_hat = np.asarray(m["lam"][..., 0]), np.asarray(m["c_hat"][..., 0])
    prev = np.concatenate([np.full((lam.shape[0], 1), 5.0), lam[:, :-1]], axis=1)
    violated = c_hat > 0
    assert violated.any()
    assert np.all(lam[violated] > prev[violated])
    assert np.all(lam[~violated] <= prev[~violated])
    assert np.all(np.asarray(results["MDPO"].metrics["lam"]) == 5.0)


def _fixed_actor(cfg, env, favourite=None):
    """The untrained actor, or one whose *output* layer ignores the state: always action
    ``favourite`` (discrete), or Gaussian mean ``favourite`` in every dimension, std e^-2.

    The params must reach jitted code as arguments, not closed-over constants: XLA CPU
    (jaxlib 0.10.2) miscompiles ``log_softmax(h @ 0 + b)`` with an all-zero constant
    kernel at batch sizes >= ~2000 (it drops ``b``, giving the uniform policy).
    """
    actor, _ = build_networks(cfg, env)
    params = actor.init(jax.random.PRNGKey(0), jnp.zeros((env.state_dim,)))
    if favourite is not None:
        mlp = params["params"]["MLP_0"]
        name = f"Dense_{len(mlp) - 1}"  # the output layer
        bias = jnp.zeros_like(mlp[name]["bias"])
        if env.discrete:
            bias = bias.at[favourite].set(50.0)
        else:
            bias = bias + favourite
            params["params"]["log_std"] = jnp.full_like(params["params"]["log_std"], -2.0)
        mlp[name] = {"kernel": jnp.zeros_like(mlp[name]["kernel"]), "bias": bias}
        # what the LTMA tests' hand-derived claims rest on: the same action (mean) in any state
        obs = jax.random.normal(jax.random.PRNGKey(0), (3000, env.state_dim)) * 3.0
        stat = (lambda d: jnp.exp(d.logits)[favourite]) if env.discrete else (lambda d: d.mean())
        out = jax.jit(jax.vmap(lambda p, o: stat(actor.apply(p, o)), in_axes=(None, 0)))(params, obs)
        np.testing.assert_allclose(out, 1.0 if env.discrete else favourite, rtol=1e-6, atol=1e-6)
    return actor, params


def test_ltma_moves_xi_to_the_hand_derived_worst_corner_on_inventory():
    # Always ordering 6, the return sum_t gamma^t (6 - s_t - s_{t+1}) falls as the next
    # state rises. s' has mean eta . zeta with both features zeta_i < 0, so s' rises
    # as each eta_i falls: the worst corner is xi_c - kappa = (-2 - 15, 3.5 - 15).
    cfg = preset("inventory", "MDPO-Robust")
    env, params = envs.make("inventory")
    actor, actor_params = _fixed_actor(cfg, env, favourite=3)
    phase = jax.jit(lambda k, p, a: ltma_phase(k, env, p, actor, a, jnp.zeros(1), cfg.hparams, cfg))
    corner = np.array([-17.0, -11.5])
    corners = np.asarray(params.xi_c) + np.array([[-1, -1], [-1, 1], [1, -1], [1, 1]]) * 15.0
    xi, visited = params, []
    for i in range(6):  # warm-started phases, as in training
        xi, samples = phase(jax.random.PRNGKey(i), xi, actor_params)
        visited.append(np.asarray(xi.xi))
        nearest = corners[np.argmin(np.abs(corners - visited[-1]).sum(1))]
        np.testing.assert_array_equal(nearest, corner)
    visited = np.array(visited)
    # the Monte-Carlo steps jitter around the corner but reach it and stay close
    assert np.any(np.all(np.abs(visited - corner) < 1e-4, axis=1))
    assert np.all(np.abs(visited[1:].mean(0) - corner) < 0.2 * 15.0)
    assert float(samples) == cfg.option("ltma_iterations") * cfg.option("ltma_horizon")


@functools.cache
def _ltma_phases(env_name):
    """Eight independent LTMA phases from the nominal kernel of ``env_name`` under a fixed
    policy (CartPole's untrained network; on Inventory one that keeps the state in the
    well-behaved region: always order 6 in 1-D, mean order 0 in 3-D)."""
    cfg = preset(env_name, "MDPO-Robust-Lag")
    env, params = envs.make(env_name)
    actor, actor_params = _fixed_actor(cfg, env, favourite={"inventory": 3, "inventory3d": 0.0}.get(env_name))
    lam = jnp.full((env.num_constraints,), 1.0)
    phase = lambda k, a: ltma_phase(k, env, params, actor, a, lam, cfg.hparams, cfg)[0]  # noqa: E731
    adversarial = jax.jit(jax.vmap(phase, in_axes=(0, None)))(jax.random.split(jax.random.PRNGKey(1), 8), actor_params)
    return env, params, actor, actor_params, lam, adversarial


@pytest.mark.parametrize("env_name", envs.ENV_NAMES)
def test_ltma_stays_in_the_box_and_moves_every_phase(env_name):
    """On every domain, each phase keeps ``xi`` in the box and moves it. (On CartPole, with
    sigma2 = 1e-7, the score-function estimate is dominated by noise, its variance scaling
    like 1 / sigma2: a phase is close to a random walk; the scale-free adversary's learning
    test is in test_adversary.py.)"""
    _, params, _, _, _, adversarial = _ltma_phases(env_name)
    dev = np.abs(np.asarray(adversarial.xi - params.xi_c))
    assert np.all(dev <= np.asarray(params.kappa) + 1e-6)
    assert np.all(dev.reshape(8, -1).max(1) > 0)
    if env_name == "cartpole":  # a random walk: every phase ends elsewhere (on Inventory they reach corners)
        assert len({tuple(np.round(x, 6)) for x in np.asarray(adversarial.xi).reshape(8, -1)}) == 8


@pytest.mark.parametrize("env_name", ["inventory", "inventory3d"])
def test_ltma_lowers_the_lagrangian_return_on_the_inventories(env_name):
    env, params, actor, actor_params, lam, adversarial = _ltma_phases(env_name)

    @jax.jit
    def lagrangian_return(p, a):
        v, c, _ = run_episodes(jax.random.PRNGKey(9), env, p, actor, a, 2000, env.gamma, False)
        return jnp.mean(v - c @ lam)

    nominal = float(lagrangian_return(params, actor_params))
    attacked = np.asarray(jax.vmap(lagrangian_return, in_axes=(0, None))(adversarial, actor_params))
    # on average a phase lowers the Lagrangian return clearly; on Inventory 3-D
    # (eta_xi = 0.1 against kappa = 0.5) single phases jump between corners
    assert attacked.mean() < nominal - 5.0, (attacked, nominal)
    assert np.mean(attacked < nominal) >= 0.5, (attacked, nominal)

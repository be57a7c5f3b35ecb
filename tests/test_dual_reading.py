"""The dual's one reading (``dual.reading``, docs/method.md §2a.4): every constraint rule steps on
the same reading of ``C^`` — the per-step estimates and their mean, each constraint's margin added
once and its values discounted by its own ``gamma_c`` — on the study's default reading
(``cost_to_go``, CartPole) and on the gymnax presets' (``start_value``, Pendulum). Every reference
is computed here with plain NumPy from what the phase sampled, not from the rule's code."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax import constraints, dual, envs, preset
from rcmdp_jax.networks import build_networks
from rcmdp_jax.step import Step, Variant, idle_metrics

KEY = jax.random.PRNGKey(3)


def _setup(cfg):
    env, params0 = envs.make(cfg.env)
    actor, critic = build_networks(cfg, env)
    obs0 = jnp.zeros((env.obs_dim,))
    params = {"actor": actor.init(jax.random.PRNGKey(1), obs0), "critic": critic.init(jax.random.PRNGKey(2), obs0)}
    hp = jax.tree.map(jnp.float32, cfg.hparams.with_all_numbers())
    return env, params0, actor, critic, params, hp


def numpy_margin(values, weights, cost_margin, z, n):
    """``cost_margin + z sigma / sqrt(n)``, sigma the weighted population spread of the whole episodes
    (the running moments' first iteration holds this batch alone: its decay cancels)."""
    v, w = np.asarray(values, np.float64), np.asarray(weights, np.float64)
    if w.sum() == 0:
        return np.full(v.shape[1], cost_margin)
    mean = (w[:, None] * v).sum(0) / w.sum()
    sigma = np.sqrt((w[:, None] * (v - mean) ** 2).sum(0) / w.sum())
    return cost_margin + z * sigma / np.sqrt(n)


def numpy_rule(rule, lam, readings, k, eta, lam_clip, kp=10.0, ki=1.0):
    """The multipliers after the dual phase, by hand: ``k`` ascent steps of the plain or the
    augmented rule, step ``i`` on ``readings[i]``; PID once on the readings' first row (the batch
    C^ + margin; the gains at their defaults, first iteration: no derivative term)."""
    lam = np.asarray(lam, np.float64).copy()
    if rule == "pid":
        e, s = readings[0], k * eta
        integral = np.clip(lam + ki * s * e, 0.0, lam_clip)
        return np.clip(integral + kp * s * e, 0.0, lam_clip)
    for i in range(k):
        c = readings[i]
        lam = np.clip(lam + eta * c, 0.0, lam_clip) if rule == "lagrangian" else np.maximum(-eta * c, lam + eta * c)
    return lam


CASES = {  # the study's default reading on its domain, and the gymnax presets' on theirs
    "cost_to_go": ("cartpole", "PPO", dict(dual_epochs=2, dual_estimator="cost_to_go", margin_z=2.0, margin_n=4.0)),
    "start_value": ("gymnax:Pendulum-v1", "PPO", dict(n_dual_episodes=4)),
}
SUFFIX = {"lagrangian": "-Lag", "augmented": "-Augmented-Lag", "pid": "-PID-Lag"}


@pytest.mark.parametrize("rule", ["lagrangian", "augmented", "pid"])
@pytest.mark.parametrize("reading", ["cost_to_go", "start_value"])
def test_every_rule_steps_on_the_estimates_with_the_margin_added_once(reading, rule):
    """A real dual phase with a fixed and a data margin: each rule's multipliers are those of its
    steps, by hand, on the phase's own samples plus the margin (the per-minibatch estimates on
    ``cost_to_go``, C^ on ``start_value``, C^ for PID on both); the stored C^ carries the margin
    once, and the metric ``c_hat`` is the plain estimate."""
    env_name, learner, overrides = CASES[reading]
    cfg = preset(env_name, learner + SUFFIX[rule], cost_margin=0.4, lam_init=1.0, **overrides)
    assert cfg.dual_estimator == reading and float(cfg.hparams.margin_z) > 0
    env, params0, actor, critic, params, hp = _setup(cfg)
    start = constraints.init_dual(env.num_constraints, hp.lam_init, [constraints.get(rule)], hp)
    d, _, k = dual.dual_phase(KEY, env, actor, critic, params, start, params0, cfg, hp, constraints.code(rule),
                              jnp.int32(cfg.dual_epochs))  # fmt: skip
    # what the phase sampled (the same key): C^, the per-step estimates, the whole episodes
    c_hat, estimates, _, (values, weights) = dual.dual_estimates(KEY, env, params0, actor, critic, params, cfg, hp)
    margin = numpy_margin(values, weights, 0.4, float(hp.margin_z), float(hp.margin_n))
    assert np.all(margin > 0.4)  # the data margin is in it
    np.testing.assert_allclose(d.margin, margin, rtol=1e-4)
    np.testing.assert_allclose(d.c_hat, np.asarray(c_hat) + margin, rtol=1e-5, atol=1e-6)
    k = int(k)
    assert k > 1
    if reading == "cost_to_go" and rule != "pid":
        assert estimates is not None and estimates.shape[0] >= k
        readings = np.asarray(estimates, np.float64) + margin
    else:
        readings = np.tile(np.asarray(c_hat, np.float64) + margin, (k, 1))
    eta, clip = float(hp.eta_lam), float(hp.lam_clip)
    want = numpy_rule(rule, start.lam, readings, k, eta, clip)
    np.testing.assert_allclose(d.lam, want, rtol=1e-4, atol=1e-5)
    without = numpy_rule(rule, start.lam, readings - margin, k, eta, clip)
    assert np.max(np.abs(want - without)) > 1e-3  # the margin moved the multipliers: the check can fail


def _spy_rollout(monkeypatch):
    seen = {}
    real = dual.collect_rollout

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen["traj"] = out[0]
        return out

    monkeypatch.setattr(dual, "collect_rollout", spy)
    return seen


def numpy_to_go(costs, done, gamma):
    """``G_t = c_t + gamma (1 - done_t) G_{t+1}`` per env, cut at the batch's end."""
    out, g = np.zeros_like(costs), np.zeros_like(costs[0])
    for t in range(costs.shape[0] - 1, -1, -1):
        g = costs[t] + gamma * (1.0 - done[t])[:, None] * g
        out[t] = g
    return out


def numpy_gae_returns(costs, v, v_next, terminated, done, gamma, lam):
    """GAE's returns (advantage + value) per env: ``delta_t = c_t + gamma (1 - term_t) V(s'_t) -
    V(s_t)``, ``A_t = delta_t + gamma lam (1 - done_t) A_{t+1}``."""
    adv, a = np.zeros_like(costs), np.zeros_like(costs[0])
    for t in range(costs.shape[0] - 1, -1, -1):
        delta = costs[t] + gamma * (1.0 - terminated[t])[:, None] * v_next[t] - v[t]
        a = delta + gamma * lam * (1.0 - done[t])[:, None] * a
        adv[t] = a
    return adv + v


INDICATOR = "gymnax:MountainCar-v0@uncertain=gravity:0.1@costs=velocity>0.04:5"  # gamma_c = 1 (episode cost)


@pytest.mark.parametrize("estimator", ["cost_to_go", "gae"])
def test_the_multiplier_batch_discounts_each_constraint_by_its_own_gamma(monkeypatch, estimator):
    """An indicator budget constraint is undiscounted (gamma_c = 1, gamma 0.99): the multiplier
    batch's per-step readings and its whole episodes' values are discounted by gamma_c, by hand."""
    cfg = preset(INDICATOR, "PPO-Lag", dual_estimator=estimator, n_dual_episodes=2, dual_batch=500)
    env, params0, actor, critic, params, hp = _setup(cfg)
    assert env.cost_gammas == (1.0,) and float(hp.gamma) < 1.0
    seen = _spy_rollout(monkeypatch)
    c_hat, _, _, (values, weights) = dual.dual_estimates(KEY, env, params0, actor, critic, params, cfg, hp)
    traj = seen["traj"]
    costs, done = np.asarray(traj.costs, np.float64), np.asarray(traj.done, np.float64)
    gamma_c = 1.0
    if estimator == "cost_to_go":
        want = numpy_to_go(costs, done, gamma_c)
    else:
        v = np.asarray(critic.apply(params["critic"], traj.obs)[..., 1:], np.float64)
        v_next = np.asarray(critic.apply(params["critic"], traj.next_obs)[..., 1:], np.float64)
        want = numpy_gae_returns(costs, v, v_next, np.asarray(traj.terminated, np.float64), done, gamma_c,
                                 float(hp.gae_lambda))  # fmt: skip
    np.testing.assert_allclose(c_hat, want.reshape(-1, 1).mean(0), rtol=1e-4, atol=1e-4)
    # the whole episodes (MountainCar's 200 steps inside 250): their undiscounted episode cost
    w = np.asarray(weights)
    assert w.sum() == 2
    whole = np.asarray(values)[w > 0, 0]
    np.testing.assert_allclose(np.sort(whole), np.sort(costs[:200, :, 0].sum(0)), rtol=1e-4)
    wrong = numpy_to_go(costs, done, float(hp.gamma))[0, :, 0]
    assert np.min(np.abs(np.sort(whole) - np.sort(wrong))) > 0.1  # gamma instead would show


def test_the_start_value_reading_discounts_each_constraint_by_its_own_gamma():
    """``start_value`` reads each episode's C with gamma_c = 1: the same episodes' episode cost
    (``run_episodes`` with ``ep_cost``: 1 per unsafe step, summed) less the budget of 5."""
    cfg = preset(INDICATOR, "PPO-Lag", n_dual_episodes=3)
    assert cfg.dual_estimator == "start_value"
    env, params0, actor, critic, params, hp = _setup(cfg)
    c_hat, _, _, (values, _) = dual.dual_estimates(KEY, env, params0, actor, critic, params, cfg, hp)
    from rcmdp_jax.rollout import run_episodes

    _, discounted, steps, ep_cost = run_episodes(KEY, env, params0, actor, params["actor"], 3, 0.5,
                                                 cfg.dual_deterministic, cfg.act_dropout or cfg.dual_dropout,
                                                 ep_cost=True)  # fmt: skip
    assert float(steps) == 3 * env.episode_length  # every episode runs to MountainCar's time limit
    want = np.asarray(ep_cost, np.float64) - 5.0
    np.testing.assert_allclose(values, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(c_hat, want.mean(0), rtol=1e-4, atol=1e-4)


def test_idle_slots_report_c_hat_as_active_ones():
    """MCPMD's slots past its budget carry the last reading over (``idle_metrics``): the same
    ``c_hat`` (the plain estimate, without the margin) and margin the active slot reported."""
    cfg = preset("cartpole", "MCPMD-Lag", cost_margin=0.4)
    step = Step(cfg)
    hp = jax.tree.map(jnp.float32, cfg.hparams.with_all_numbers())
    variant = Variant.of(cfg)
    state = step.init(jax.random.PRNGKey(0), hp, step.default_env_params, variant)
    state, active = jax.jit(lambda s: step.iteration(s, 0, hp, variant))(state)
    idle = idle_metrics(state)
    assert float(active["active"]) == 1.0 and float(idle["active"]) == 0.0
    np.testing.assert_allclose(active["margin"], 0.4, rtol=1e-6)
    np.testing.assert_array_equal(idle["margin"], active["margin"])
    np.testing.assert_array_equal(idle["c_hat"], active["c_hat"])
    np.testing.assert_allclose(active["c_hat"], np.asarray(state.dual.c_hat) - 0.4, rtol=1e-5, atol=1e-6)


def test_the_one_env_learner_reads_the_guarded_kernel_on_a_study_domain_at_another_limit():
    """RMCPMD (one rollout env) on the study's Inventory at another limit (``envs.domain.with_limit``)
    takes LTMA's guarded reading: the dual reads C^ at the worse by C of the kernel the ascent found
    and the nominal kernel (by hand: both valued with the guard's keys), while the env runs the kernel
    found; seeds starting at both corners see both cases."""
    from rcmdp_jax.rollout import Policy, episode_values

    cfg = preset("inventory@cost_threshold=0.13", "RMCPMD-Lag", ltma_iterations=3, adversary_episodes=4)
    assert cfg.n_envs == 1 and cfg.adversary == "ltma" and cfg.option("ltma_dual_reading") == "guarded"
    step = Step(cfg)
    hp = jax.tree.map(jnp.float32, cfg.hparams.with_all_numbers())
    env, params = step.env, step.default_env_params
    lanes = step.lanes

    @jax.jit
    def moved(key, start, actor_params, lam):
        env_xi = jnp.broadcast_to(start.xi, (1, *start.xi.shape))
        found, env_xi, _, dual_xi, _ = lanes.step(key, start, env_xi, actor_params, lam, hp, jnp.int32(0), {})
        return found, env_xi, lanes.dual_kernels(found, env_xi, dual_xi, jnp.int32(0))[0]

    @jax.jit
    def cost(key, xi, actor_params):
        policy = Policy(step.actor, actor_params, dropout=cfg.act_dropout)
        one = lambda k: episode_values(k, env, params.replace(xi=xi), policy, hp.gamma, env.episode_length)[1][0]
        return jnp.mean(jax.vmap(one)(jax.random.split(key, cfg.option("adversary_episodes"))))

    seen = set()
    for seed in range(4):
        actor_params = step.actor.init(jax.random.PRNGKey(seed), jnp.zeros((env.obs_dim,)))
        start = params.replace(xi=params.xi_c + params.kappa * (1.0 if seed % 2 else -1.0))
        key = jax.random.PRNGKey(11 + seed)
        found, env_xi, read_at = moved(key, start, actor_params, jnp.array([0.3]))
        k_guard = jax.random.fold_in(key, 1)
        c_found = float(cost(k_guard, found.xi, actor_params))
        c_nominal = float(cost(k_guard, params.xi_c, actor_params))
        want = found.xi if c_found >= c_nominal else params.xi_c
        np.testing.assert_allclose(read_at.xi, want, rtol=1e-6)
        np.testing.assert_allclose(env_xi[0], found.xi, rtol=1e-6)  # the one env trains on the kernel found
        seen.add(bool(c_found >= c_nominal))
    assert seen == {True, False}, "the cases should exercise both readings"

"""The RCMDP's separate worst cases under the candidate methods (``worst-of-n``, ``corners``,
option ``worst_cases="separate"``, ``adversary/candidates.py``): the reward's envs run the
candidates with the lowest return, each constraint's envs that constraint's highest-cost ones,
the learner weights each env's advantages to its objective, and the dual phase reads C^ at the
constraint's own worst candidate."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny
from train_helpers import SEEDS

from rcmdp_jax import envs, make_train, preset
from rcmdp_jax.advantages import gae
from rcmdp_jax.adversary import get
from rcmdp_jax.adversary.base import Context
from rcmdp_jax.adversary.candidates import objective_weights
from rcmdp_jax.learners.batch import lagrangian_gae


def _context(**kw):
    cfg = preset("gymnax:Pendulum-v1", "PPO-Lag+worst-of-n", **kw)
    return Context(None, None, cfg, False), cfg


# two candidates whose returns and costs disagree: A has the lowest return and a low cost, B a
# high return and the highest cost; the Lagrangian ranks A worst while lam~ is small
XIS = jnp.array([[1.0, 1.0], [2.0, 2.0]])
V = np.array([-50.0, -10.0])
C = np.array([[-1.0], [3.0]])


def _ranked(lam):
    costs = jnp.asarray(C @ lam - V, jnp.float32)  # the Lagrangian cost, higher worse
    scores = jnp.asarray(np.stack([-V, C[:, 0]]), jnp.float32)
    return costs, scores


def test_each_objective_trains_on_its_own_worst_candidate():
    ctx, cfg = _context()
    method = get("worst-of-n")
    lam = jnp.array([0.5])
    costs, scores = _ranked(np.asarray(lam))
    own, env_xi = method.env_kernels(ctx, costs, scores, XIS, lam, 1, 4)
    np.testing.assert_array_equal(own, XIS[0])  # the method's own kernel: the reward's worst
    np.testing.assert_array_equal(env_xi[:, 0], [1.0, 2.0, 1.0, 2.0])  # envs 0, 2: reward; 1, 3: cost
    lagrangian = get("worst-of-n")
    ctx_l, _ = _context(worst_cases="lagrangian")
    _, env_l = lagrangian.env_kernels(ctx_l, costs, scores, XIS, lam, 1, 4)
    np.testing.assert_array_equal(env_l[:, 0], [1.0] * 4)  # today's: every env on the Lagrangian worst (A)
    # no multiplier (an unconstrained lane, or lam~ = 0): every env on the reward's worst, as before
    _, env0 = method.env_kernels(ctx, costs, scores, XIS, jnp.zeros(1), 1, 4)
    np.testing.assert_array_equal(env0[:, 0], [1.0] * 4)


def test_the_dual_reads_the_constraints_own_worst_candidate():
    ctx, cfg = _context()
    assert get("worst-of-n").reads_cost(cfg) and get("corners").reads_cost(cfg)
    assert not get("worst-of-n").reads_cost(_context(worst_cases="lagrangian")[1])


def test_objective_weights_split_the_envs_and_keep_each_objectives_scale():
    w = np.asarray(objective_weights(6, 2))  # 6 envs, reward + 2 constraints: 2 envs each
    np.testing.assert_array_equal(w, np.tile(np.eye(3) * 3.0, (2, 1)))
    w = np.asarray(objective_weights(5, 1))  # 3 envs serve the reward, 2 the constraint
    np.testing.assert_allclose(w[:, 0], [5 / 3, 0, 5 / 3, 0, 5 / 3])
    np.testing.assert_allclose(w[:, 1], [0, 2.5, 0, 2.5, 0])


def test_the_learners_signal_weights_each_envs_advantages_to_its_objective():
    """``A_L = w_r A_r - lam~ . (w_c A_c)`` per env, from the unweighted GAE of each head."""
    cfg = tiny("gymnax:Pendulum-v1", "PPO-Lag+worst-of-n")
    train = make_train(cfg)
    state = train.init(SEEDS[0])
    learner = train.step.learner
    hp = jax.tree.map(jnp.float32, cfg.hparams.with_all_numbers())
    data, _, _ = learner.collect(jax.random.PRNGKey(1), state, hp)
    lam = jnp.array([2.0])
    w = objective_weights(cfg.n_envs, 1)
    got, _ = lagrangian_gae(learner.critic, state.params["critic"], data, lam, hp, learner.env, w)
    values = learner.critic.apply(state.params["critic"], data.obs)
    nxt = learner.critic.apply(state.params["critic"], data.next_obs)
    rewards = jnp.concatenate([data.reward[..., None], data.costs], -1)
    adv = np.asarray(gae(rewards, values, nxt, data.terminated, data.done, hp.gamma, hp.gae_lambda)[0])
    w = np.asarray(w)
    want = w[None, :, 0] * adv[..., 0] - 2.0 * w[None, :, 1] * adv[..., 1]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_separate_needs_an_env_per_objective():
    cfg = preset("gymnax:Pendulum-v1", "PPO-Lag+worst-of-n", n_envs=2, minibatch_size=32)
    with pytest.raises(ValueError, match="n_envs=2 must be at least 3"):
        get("worst-of-n").check_env(SimpleNamespace(num_constraints=2, num_kernel_params=3), cfg)
    get("worst-of-n").check_env(SimpleNamespace(num_constraints=1, num_kernel_params=3), cfg)
    # MCPMD's one env trains on the Lagrangian worst
    assert not get("worst-of-n").separate(preset("gymnax:Pendulum-v1", "RMCPMD-Lag"))


def _search_case(restarts: int, seed: int, steps: int = 2):
    """Pendulum's search method with ``restarts``, a random actor and four envs' points near the
    nominal kernel: ``(env, params, actor, actor_params, ctx, hp, start [4, 3])``."""
    from rcmdp_jax.networks import build_networks

    cfg = preset("gymnax:Pendulum-v1", "PPO-Lag+search", adversary_episodes=4, search_steps=steps,
                 search_restarts=restarts)  # fmt: skip
    env, params = envs.make(cfg.env)
    actor, _ = build_networks(cfg, env)
    actor_params = actor.init(jax.random.PRNGKey(seed), jnp.zeros((env.obs_dim,)))
    hp = jax.tree.map(jnp.float32, cfg.hparams.with_all_numbers())
    start = jnp.stack([params.xi_c + 0.05 * params.kappa, params.xi_c - 0.05 * params.kappa] * 2)
    return env, params, actor, actor_params, Context(env, actor, cfg, False), hp, start


def test_the_search_method_trains_each_objective_on_the_point_the_search_returns():
    from rcmdp_jax.rollout import Policy
    from rcmdp_jax.worst_case import SearchConfig, search

    env, params, actor, actor_params, ctx, hp, start = _search_case(restarts=0, seed=0)
    key = jax.random.PRNGKey(7)
    own, env_xi, steps, dual_xi = jax.jit(lambda k: get("search").step(ctx, k, params, start, actor_params,
                                                                       jnp.ones(1), hp))(key)  # fmt: skip
    sc = SearchConfig(steps=2, episodes=4, eval_episodes=4, eta0=0.25)
    policy = Policy(actor, actor_params)
    k_r, k_c = jax.random.split(key, 2)
    want_r = search(k_r, start[0], env, params, policy, "return", sc, hp.gamma, env.lambda_max)[0]
    want_c = search(k_c, start[1], env, params, policy, "cost0", sc, hp.gamma, env.lambda_max)[0]
    np.testing.assert_allclose(env_xi[0], want_r, rtol=1e-5)  # env 0 serves the return
    np.testing.assert_allclose(env_xi[2], want_r, rtol=1e-5)
    np.testing.assert_allclose(env_xi[1], want_c, rtol=1e-5)  # envs 1, 3 the constraint
    np.testing.assert_allclose(dual_xi, want_c, rtol=1e-5)  # the dual reads at the constraint's point
    np.testing.assert_allclose(own.xi, want_r, rtol=1e-5)
    assert np.all(np.abs(np.asarray(env_xi) - np.asarray(params.xi_c)) <= np.asarray(params.kappa) + 1e-6)


def _scans(step_of_search, length: int) -> int:
    """The scans ``length`` long in the jaxpr of ``step_of_search(key)``, nested ones counted."""
    from jax.extend.core import ClosedJaxpr, Jaxpr

    def scans(j) -> int:
        n = 0
        for eqn in j.eqns:
            n += eqn.primitive.name == "scan" and eqn.params["length"] == length
            for v in eqn.params.values():
                for sub in v if isinstance(v, (tuple, list)) else (v,):
                    if isinstance(sub, (ClosedJaxpr, Jaxpr)):
                        n += scans(sub.jaxpr if isinstance(sub, ClosedJaxpr) else sub)
        return n

    return scans(jax.make_jaxpr(step_of_search)(jax.random.PRNGKey(7)).jaxpr)


def test_the_search_method_holds_one_search_for_all_objectives():
    """The return's search and the constraint's are one search in the program (a ``lax.map`` over
    the objectives, the objective a traced index), not a copy each: the search's projected-gradient
    scan (``search_steps`` = 3 steps and the last point judged: 4 long, a length nothing else in the
    step has) appears once in the step's jaxpr, where Pendulum's two objectives gave two."""
    env, params, actor, actor_params, ctx, hp, start = _search_case(restarts=0, seed=0, steps=3)
    step = lambda k: get("search").step(ctx, k, params, start, actor_params, jnp.ones(1), hp)
    assert env.num_constraints == 1 and _scans(step, 3 + 1) == 1


@pytest.mark.parametrize("restarts", [0, 4])
def test_the_search_method_runs_one_rollout_per_kind_of_episode(restarts):
    """What XLA compiles of the search method, in episodes (Pendulum: one constraint, 200 steps an
    episode): the restarts' candidates (with restarts), the search's episodes at each point it
    judges (its last point too, in the same scan) and the returns-to-go of the score gradient
    on them; no fresh episodes to choose between the constraints' points, one constraint having
    one (the code before also held the last point's episodes and the fresh ones: 2 more)."""
    env, params, actor, actor_params, ctx, hp, start = _search_case(restarts=restarts, seed=0, steps=3)
    step = lambda k: get("search").step(ctx, k, params, start, actor_params, jnp.ones(1), hp)
    assert env.num_constraints == 1 and _scans(step, env.episode_length) == 2 + (restarts > 0)


def test_the_search_restarts_each_objective_from_the_worst_corner_for_it():
    from rcmdp_jax import box
    from rcmdp_jax.adversary.base import candidate_values
    from rcmdp_jax.rollout import Policy
    from rcmdp_jax.worst_case import SearchConfig, search

    # 8 restarts on Pendulum's 3 parameters: all 8 corners, beside the two objectives' points
    env, params, actor, actor_params, ctx, hp, start = _search_case(restarts=8, seed=1)
    lam = jnp.ones(1)
    key = jax.random.PRNGKey(3)
    _, env_xi, _, dual_xi = jax.jit(lambda k: get("search").step(ctx, k, params, start, actor_params, lam, hp))(key)
    # the reference: value the ten candidates, take each objective's worst (lowest V; highest C)
    key, k_start = jax.random.split(key)
    xis = jnp.concatenate([start[:2], box.corners(params.xi_c, params.kappa)])
    costs, values, _ = candidate_values(ctx, jax.random.split(k_start)[1], params, xis, actor_params, lam, hp)
    v = np.asarray(values @ lam - costs)  # V = lam . C - (lam . C - V)
    c = np.asarray(values[:, 0])
    s_r = xis[np.argmin(v)] if v.min() < v[0] else start[0]
    s_c = xis[np.argmax(c)] if c.max() > c[1] else start[1]
    sc = SearchConfig(steps=2, episodes=4, eval_episodes=4, eta0=0.25)
    policy = Policy(actor, actor_params)
    k_r, k_c = jax.random.split(key, 2)
    want_r = search(k_r, s_r, env, params, policy, "return", sc, hp.gamma, env.lambda_max)[0]
    want_c = search(k_c, s_c, env, params, policy, "cost0", sc, hp.gamma, env.lambda_max)[0]
    np.testing.assert_allclose(env_xi[0], want_r, rtol=1e-5)
    np.testing.assert_allclose(env_xi[1], want_c, rtol=1e-5)
    np.testing.assert_allclose(dual_xi, want_c, rtol=1e-5)
    # a random policy on Pendulum: the constraint's worst of the ten is a corner, not a start
    assert np.argmax(c) >= 2

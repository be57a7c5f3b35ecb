"""The robust training methods (``rcmdp_jax.adversary``): each method's rule against
hand-worked or NumPy numbers, the methods as lanes of one family program, the names."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as sps

from rcmdp_jax import envs, make_train, preset
from rcmdp_jax.adversary import family_methods, get
from rcmdp_jax.adversary.base import Context, lagrangian_costs, uniform_kernels
from rcmdp_jax.adversary.candidates import worst_cost_kernel
from rcmdp_jax.adversary.corners import corner_kernels
from rcmdp_jax.adversary.ltma_norm import normalised_step
from rcmdp_jax.adversary.worst_of_n import worst_kernels
from rcmdp_jax.family import make_family
from rcmdp_jax.ltma import pathwise_direction
from rcmdp_jax.networks import build_networks
from rcmdp_jax.rollout import Policy

METHODS = ("none", "ltma", "ltma-norm", "dr", "worst-of-n", "corners")


def test_normalised_step_moves_each_coordinate_by_the_fraction_of_its_half_width():
    xi, kappa = jnp.array([1.0, 2.0, 3.0]), jnp.array([0.5, 0.1, 2.0])
    direction = jnp.array([3e-9, -40.0, 0.0])  # the gradient's scale does not matter; zero: no move
    got = normalised_step(xi, direction, kappa, 0.1)
    np.testing.assert_allclose(np.asarray(got), [1.05, 1.99, 3.0], rtol=1e-6)


def test_domain_randomisation_draws_uniformly_in_the_box():
    env, params = envs.make("gymnax:CartPole-v1")
    xi = np.asarray(uniform_kernels(jax.random.PRNGKey(0), params, 20_000), np.float64)
    c, k = np.asarray(params.xi_c, np.float64), np.asarray(params.kappa, np.float64)
    u = (xi - c) / k
    assert np.all(np.abs(u) <= 1 + 1e-6)
    for j in range(u.shape[1]):  # each coordinate uniform on [-1, 1] (Kolmogorov-Smirnov)
        assert sps.kstest(u[:, j], "uniform", args=(-1, 2)).pvalue > 1e-3
    assert abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.05  # drawn independently


def test_worst_of_n_keeps_the_worst_fraction_by_lagrangian_cost():
    costs = jnp.array([1.0, 5.0, -3.0, 4.0, 0.0])
    xis = jnp.arange(5.0)[:, None] * jnp.ones((1, 2))
    worst, per_env = worst_kernels(costs, xis, k=2, n_envs=4)
    np.testing.assert_array_equal(np.asarray(worst), [1.0, 1.0])
    np.testing.assert_array_equal(np.asarray(per_env)[:, 0], [1.0, 3.0, 1.0, 3.0])


def _ordering_actor(cfg, env, favourite):
    """An actor whose output layer ignores the state: always action ``favourite``."""
    actor, _ = build_networks(cfg, env)
    params = actor.init(jax.random.PRNGKey(0), jnp.zeros((env.state_dim,)))
    mlp = params["params"]["MLP_0"]
    out = f"Dense_{len(mlp) - 1}"
    mlp[out]["kernel"] = jnp.zeros_like(mlp[out]["kernel"])
    mlp[out]["bias"] = jnp.full_like(mlp[out]["bias"], -30.0).at[favourite].set(30.0)
    return actor, params


def test_corners_finds_the_hand_derived_worst_corner_on_inventory():
    # Always ordering 6, the return sum_t gamma^t (6 - s_t - s_{t+1}) falls as the next
    # state rises; s' has mean eta . zeta with both features < 0, so the worst corner
    # (lowest return, lam~ = 0) is xi_c - kappa.
    cfg = preset("inventory", "MDPO-Lag+corners", adversary_episodes=2, worst_cases="lagrangian")
    env, params = envs.make("inventory")
    actor, actor_params = _ordering_actor(cfg, env, favourite=3)
    ctx = Context(env, actor, cfg, episodic=False)
    step = jax.jit(lambda k, a: get("corners").step(ctx, k, params, jnp.zeros((4, 2)), a, jnp.zeros(1), cfg.hparams))
    new, env_xi, samples = step(jax.random.PRNGKey(0), actor_params)
    want = np.asarray(params.xi_c) - np.asarray(params.kappa)
    np.testing.assert_allclose(np.asarray(new.xi), want)
    np.testing.assert_allclose(np.asarray(env_xi), np.broadcast_to(want, (4, 2)))
    assert float(samples) == 4 * 2 * env.episode_length  # 4 corners x 2 episodes, no termination
    # and the costs it ranks by are the policy's Lagrangian costs on each corner
    xis = corner_kernels(env, params)
    costs, _ = lagrangian_costs(ctx, jax.random.PRNGKey(0), params, xis, actor_params, jnp.zeros(1), cfg.hparams)
    assert int(np.argmax(np.asarray(costs))) == int(np.argmin(np.abs(np.asarray(xis) - want).sum(1)))


def test_worst_cost_reading_picks_the_highest_cost_candidate():
    # by hand: the candidate whose most violated constraint is highest
    xis = jnp.array([[0.0], [1.0], [2.0]])
    values = jnp.array([[-1.0, 0.5], [2.0, -3.0], [0.1, 0.2]])
    assert float(worst_cost_kernel(xis, values)[0]) == 1.0
    # on Inventory, always ordering 6: the cost 0.01 (a^2 - s_t) rises as the states fall, so the
    # corner where C is highest is xi_c + kappa, the opposite of the Lagrangian's (lowest return)
    cfg = preset("inventory", "MDPO-Lag+corners", adversary_episodes=2, dual_reading="worst_cost")
    env, params = envs.make("inventory")
    actor, actor_params = _ordering_actor(cfg, env, favourite=3)
    ctx = Context(env, actor, cfg, episodic=False)
    step = jax.jit(lambda k, a: get("corners").step(ctx, k, params, jnp.zeros((4, 2)), a, jnp.zeros(1), cfg.hparams))
    new, _, _, dual_xi = step(jax.random.PRNGKey(0), actor_params)
    np.testing.assert_allclose(np.asarray(new.xi), np.asarray(params.xi_c) - np.asarray(params.kappa))
    np.testing.assert_allclose(np.asarray(dual_xi), np.asarray(params.xi_c) + np.asarray(params.kappa))
    with pytest.raises(ValueError, match="dual_reading='highest' is not allowed; choose one of: picked, worst_cost"):
        preset("inventory", "MDPO-Lag+corners", dual_reading="highest")


def test_pathwise_gradient_matches_finite_differences_on_a_gymnax_preset():
    cfg = preset("gymnax:Pendulum-v1", "PPO-Lag")
    env, params = envs.make("gymnax:Pendulum-v1")
    actor, _ = build_networks(cfg, env)
    policy = Policy(actor, actor.init(jax.random.PRNGKey(1), jnp.zeros((env.obs_dim,))))
    keys = jax.random.split(jax.random.PRNGKey(2), 4)
    lam, horizon = jnp.array([2.0]), 8

    # one compiled program, xi its argument
    direction = jax.jit(
        lambda xi: pathwise_direction(env, params.replace(xi=xi), policy, keys, lam, env.gamma, horizon)
    )

    def cost(xi):  # the same episodes' Lagrangian cost, from pathwise_direction's own aux output
        traj = direction(xi)[1]
        disc = env.gamma ** np.arange(horizon)
        return float(np.mean(np.sum(disc * np.asarray((-traj.reward + traj.costs @ lam) * traj.alive), axis=1)))

    grad = np.asarray(direction(params.xi)[0])
    xi0 = np.asarray(params.xi, np.float64)
    for j in range(xi0.size):
        h = 1e-2 * float(params.kappa[j])
        e = np.zeros_like(xi0)
        e[j] = h
        fd = (cost(jnp.asarray(xi0 + e, jnp.float32)) - cost(jnp.asarray(xi0 - e, jnp.float32))) / (2 * h)
        np.testing.assert_allclose(grad[j], fd, rtol=0.05, atol=1e-3 * max(1.0, abs(fd)))


def tiny(algo, **kw):
    base = dict(total_timesteps=192, n_steps=16, minibatch_size=16, epochs=2, ltma_iterations=2, eval_episodes=2,
                adversary_steps=2, adversary_episodes=2, adversary_candidates=4, ltma_horizon=8)  # fmt: skip
    return preset("gymnax:CartPole-v1", algo, **{**base, **kw})


@pytest.fixture(scope="module")
def family_run():
    """PPO-Lag under every method as lanes of one family program, two seeds each."""
    names = [("PPO-Lag" if m == "none" else f"PPO-Lag+{m}") for m in METHODS]
    configs = [tiny(n) for n in names]
    family = make_family(configs)
    seeds = jax.random.split(jax.random.PRNGKey(5), 2)
    members = jnp.repeat(jnp.arange(len(names)), 2)
    result = jax.jit(jax.vmap(family))(jnp.tile(seeds, (len(names), 1)), members)
    return names, configs, family, seeds, result


@pytest.mark.slow
def test_every_method_is_a_lane_of_one_family_program(family_run):
    names, configs, family, _, result = family_run
    assert family.step.methods == METHODS
    steps = np.asarray(result.metrics["ltma_steps"][:, -1]).reshape(len(names), 2)
    moved = np.abs(np.asarray(result.metrics["xi"][:, -1]) - np.asarray(family.step.default_env_params.xi))
    moved = moved.reshape(len(names), 2, -1).max(-1)
    for i, m in enumerate(METHODS):
        spends = m in ("ltma", "ltma-norm", "worst-of-n", "corners")  # dr draws kernels, it spends no episodes
        assert np.all((steps[i] > 0) == spends), m
        assert np.all((moved[i] > 0) == (m not in ("none", "dr"))), m
    env_xi = np.asarray(result.state.env_xi).reshape(len(names), 2, configs[0].n_envs, -1)
    kappa = np.asarray(family.step.default_env_params.kappa)
    assert np.all(np.abs(env_xi - np.asarray(family.step.default_env_params.xi_c)) <= kappa * (1 + 1e-6))
    dr = env_xi[METHODS.index("dr")]
    assert len(np.unique(dr[..., 0])) == dr[..., 0].size  # a kernel of its own for every env


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS[1:])
def test_each_method_in_the_family_equals_the_method_alone(family_run, method):
    names, configs, _, seeds, batched = family_run
    i = METHODS.index(method)
    train = jax.jit(make_train(configs[i]))  # one seed at a time: no vmap to trace
    for s, seed in enumerate(seeds):
        alone = train(seed)
        for key in ("eval_return", "lam", "xi", "policy_loss", "ltma_steps", "c_hat"):
            got = np.asarray(batched.metrics[key][2 * i + s])
            np.testing.assert_allclose(got, alone.metrics[key], rtol=1e-4, atol=1e-5, err_msg=f"{method} {key} {s}")


def test_domain_randomisation_redraws_a_kernel_when_an_episode_ends():
    from rcmdp_jax.rollout import collect_rollout, init_accumulator

    cfg = tiny("PPO-Lag+dr")
    step = make_train(cfg).step
    env, params = step.env, step.default_env_params
    n, t = 3, 40
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(0), n), params)
    start = jnp.stack([params.xi] * n)
    fresh = uniform_kernels(jax.random.PRNGKey(1), params, t * n).reshape((t, n, -1))
    actor_params = step.actor.init(jax.random.PRNGKey(2), obs[0])
    out = collect_rollout(jax.random.PRNGKey(3), env, params, step.actor, actor_params, state, obs,
                          init_accumulator(n, 1), t, 0.99, env_xi=start, fresh_xi=fresh)  # fmt: skip
    done = np.asarray(out[0].done)  # [T, B]
    assert done.any() and not done.all()
    for i in range(n):  # each env ends on the kernel drawn at its last episode end, or its own
        ends = np.flatnonzero(done[:, i])
        want = np.asarray(fresh[ends[-1], i]) if ends.size else np.asarray(params.xi)
        np.testing.assert_array_equal(np.asarray(out[5][i]), want)


def test_robust_names_and_errors():
    cfg = preset("gymnax:Pendulum-v1", "MDPO-Lag+worst-of-n@xi_step=0.1")
    assert (cfg.robust, cfg.adversary, cfg.hparams.xi_step) == (True, "worst-of-n", 0.1)
    assert not preset("cartpole", "PPO-Lag+none").robust
    # -Robust means the environment's default method: the study's LTMA on its domains
    assert preset("cartpole", "PPO-Robust-Lag").adversary == "ltma"
    assert preset("gymnax:Pendulum-v1", "PPO-Robust-Lag").adversary == "search"  # the benchmark's rule
    # outside the study the dual phase reads the start state's value (docs/robustness.md)
    assert (preset("gymnax:Pendulum-v1", "PPO-Lag").dual_estimator, preset("cartpole", "PPO-Lag").dual_estimator) == (
        "start_value",
        "cost_to_go",
    )
    assert family_methods([preset("cartpole", a) for a in ("PPO", "PPO-Lag+dr", "PPO-Robust")]) == (
        "none",
        "ltma",
        "dr",
    )
    with pytest.raises(ValueError, match="unknown robust method 'bogus'.*worst-of-n"):
        preset("cartpole", "PPO-Lag+bogus")
    with pytest.raises(ValueError, match="-Robust algorithm with \\+none"):
        preset("cartpole", "PPO-Robust-Lag+none")
    with pytest.raises(ValueError, match="adversary_fraction must be a number in"):
        preset("cartpole", "PPO-Lag+worst-of-n", adversary_fraction=0.0)
    with pytest.raises(ValueError, match="xi_step must be a number in"):
        preset("cartpole", "PPO-Lag+ltma-norm", xi_step=2.0)


def test_robust_names_the_search_only_where_it_runs_as_measured():
    """-Robust outside the study: the search (the benchmark's rule) where the kernel has a density
    and the learner a rollout env per objective; worst-of-n else (a kernel without noise, MCPMD's
    one env); a named method is taken as named."""
    import gymnax

    inner, _ = gymnax.make("Pendulum-v1")
    speed = lambda s, a, n, p: jnp.abs(n.theta_dot)[None] - 1.5  # noqa: E731
    envs.register("noiseless-pendulum-default", envs.robustify(inner, {"m": 0.2}, {"speed": speed}, noise=0.0))
    envs.register("noisy-pendulum-default", envs.robustify(inner, {"m": 0.2}, {"speed": speed}, noise=0.01))
    assert preset("noisy-pendulum-default", "PPO-Robust-Lag").adversary == "search"
    assert preset("noisy-pendulum-default", "RMCPMD-Lag").adversary == "worst-of-n"
    assert preset("noiseless-pendulum-default", "MDPO-Robust-Lag").adversary == "worst-of-n"
    assert preset("noiseless-pendulum-default", "PPO-Lag+search").adversary == "search"  # as named
    # the same name registered again with noise is another environment: asked again
    envs.register("noiseless-pendulum-default", envs.robustify(inner, {"m": 0.2}, {"speed": speed}, noise=0.01))
    assert preset("noiseless-pendulum-default", "PPO-Robust-Lag").adversary == "search"


def test_the_search_takes_the_pathwise_gradient_on_a_kernel_without_a_density():
    """``search_estimator='auto'`` (the default): the score function where the kernel has noise,
    the pathwise gradient on a deterministic one (brax's physics), so a named ``+search`` lane
    trains there; ``score`` named by hand is still refused on it."""
    import gymnax

    from rcmdp_jax.adversary.search import estimator_of

    inner, _ = gymnax.make("Pendulum-v1")
    speed = lambda s, a, n, p: jnp.abs(n.theta_dot)[None] - 1.5  # noqa: E731
    envs.register("noiseless-pendulum-auto", envs.robustify(inner, {"m": 0.2}, {"speed": speed}, noise=0.0))
    envs.register("noisy-pendulum-auto", envs.robustify(inner, {"m": 0.2}, {"speed": speed}, noise=0.01))
    small = dict(total_timesteps=64, n_envs=4, n_steps=16, minibatch_size=16, adversary_episodes=2, search_steps=1, search_restarts=0)
    for name, expected in (("noiseless-pendulum-auto", "pathwise"), ("noisy-pendulum-auto", "score")):
        cfg = preset(name, "PPO-Lag+search", **small)
        assert cfg.option("search_estimator") == "auto"
        assert estimator_of(envs.make(name)[0], cfg) == expected
    result = jax.jit(make_train(preset("noiseless-pendulum-auto", "PPO-Lag+search", **small)))(jax.random.PRNGKey(0))
    assert np.isfinite(np.asarray(result.state.env_params.xi)).all()
    with pytest.raises(ValueError, match="score-function estimator needs noise"):
        make_train(preset("noiseless-pendulum-auto", "PPO-Lag+search", search_estimator="score", **small))


def test_a_family_checks_every_robust_members_estimator():
    """A family whose first member is not robust still refuses the score estimator on a
    kernel without noise (the check used to read the first member only)."""
    import gymnax

    inner, _ = gymnax.make("Pendulum-v1")
    speed = lambda s, a, n, p: jnp.abs(n.theta_dot)[None] - 1.5  # noqa: E731
    envs.register("noiseless-pendulum", envs.robustify(inner, {"m": 0.2}, {"speed": speed}, noise=0.0))
    first = preset("noiseless-pendulum", "PPO-Lag")
    robust = preset("noiseless-pendulum", "PPO-Lag+ltma", ltma_estimator="score")
    with pytest.raises(ValueError, match="score-function estimator needs noise"):
        make_family([first, robust])


def test_default_adversary_moves_xi_towards_kernels_where_the_constraint_is_worse():
    """A short training under worst-of-n (the default robust method where the search cannot run):
    ``xi`` moves by at least a tenth of the box's half-width, to a kernel where the trained
    policy's constraint value (Pendulum's angular speed) is higher than at the nominal kernel."""
    from rcmdp_jax.rollout import run_episodes

    cfg = preset("gymnax:Pendulum-v1", "PPO-Lag+worst-of-n", total_timesteps=3200)
    train = make_train(cfg)
    result = jax.jit(train)(jax.random.PRNGKey(0))
    params = train.step.default_env_params
    moved = np.abs(np.asarray(result.state.env_params.xi - params.xi_c)) / np.asarray(params.kappa)
    assert moved.max() >= 0.1, moved

    @jax.jit
    def constraint(env_params, actor_params):  # the same 400 episodes' keys on both kernels
        _, c, _ = run_episodes(jax.random.PRNGKey(9), train.env, env_params, train.step.actor, actor_params, 400,
                               cfg.hparams.gamma, False)  # fmt: skip
        return c.mean()

    actor_params = result.state.params["actor"]
    nominal, attacked = constraint(params, actor_params), constraint(result.state.env_params, actor_params)
    assert float(attacked) > float(nominal), (float(attacked), float(nominal), moved)


def test_the_plan_counts_the_robust_methods_buffers(tmp_path, capsys):
    """A worst-of-n lane's candidates are sized before anything is written."""
    from rcmdp_jax.study import cli

    out = tmp_path / "run"
    args = ["--env", "gymnax:Pendulum-v1", "--algos", "PPO-Lag+worst-of-n", "--seeds", "2", "--out", str(out)]
    assert cli.main(args + ["--set", "adversary_candidates=100000000"]) == 2
    assert "adversary_candidates" in capsys.readouterr().err and not out.exists()
    assert cli.main(args + ["--set", "adversary_candidates=4000000", "--set", "adversary_episodes=1000"]) == 2
    assert "adversary_candidates" in capsys.readouterr().err and not out.exists()


def test_the_run_names_the_method_a_robust_name_trains_under():
    from rcmdp_jax.study.notes import robust_notes

    configs = [preset("gymnax:Pendulum-v1", a) for a in ("PPO-Lag", "PPO-Robust-Lag", "MDPO-Robust", "PPO-Lag+dr")]
    configs.append(preset("cartpole", "MDPO-Robust-Lag"))
    notes = robust_notes(configs)
    assert len(notes) == 2  # a plain name and an ALGO+METHOD name say their method already
    assert "on gymnax:Pendulum-v1, PPO-Robust-Lag, MDPO-Robust train(s) under the robust method 'search'" in notes[0]
    assert "on cartpole, MDPO-Robust-Lag train(s) under the robust method 'ltma'" in notes[1]

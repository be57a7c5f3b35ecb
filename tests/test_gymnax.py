"""Any gymnax environment made robust-constrained (``rcmdp_jax.envs.gymnax_wrapper`` and the
``gymnax:`` presets): the wrapped step is gymnax's, gradients in ``xi`` match finite
differences, the grid covers the box, every algorithm trains, a user's own env works; the
kernel noise of any gymnax id, a vector field's limit, and what docs/custom_envs.md says of
gymnax's step."""

import re
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_helpers import _one_line
from flax import struct
from gymnax.environments import environment, spaces
from rcmdp_jax.envs.gymnax_presets import PRESETS, make_gymnax

from rcmdp_jax import envs, make_train, preset
from rcmdp_jax.ltma import pathwise_direction
from rcmdp_jax.rollout import sample_episode
from rcmdp_jax.study import cli

DOCS = Path(__file__).resolve().parent.parent / "docs"

NAMES = [f"gymnax:{k}" for k in PRESETS]


@pytest.mark.parametrize("name", NAMES)
def test_nominal_noiseless_step_is_gymnax_step_over_1000_random_steps(name):
    """``xi`` nominal, noise 0: observations, rewards, termination and truncation of 1,000
    auto-resetting random steps (50 envs x 20, episodes cut at 12 steps) equal gymnax's own ``step`` bit for bit,
    gymnax given the same parameter values as float32 arrays (the wrapper's ``xi``; from
    Python floats gymnax computes some products in double first). Op by op
    (``jax.disable_jit``): a compiled program may fuse the same arithmetic differently
    (an ulp of a sine), which is XLA's choice, not the wrapper's."""
    wrapped = make_gymnax(name, noise=0.0)
    inner = wrapped.inner
    inner_params = wrapped.inner_params.replace(
        max_steps_in_episode=12, **{f: jnp.float32(getattr(wrapped.inner_params, f)) for f in wrapped.fields}
    )
    wp = wrapped.default_params.replace(max_steps_in_episode=12, inner=inner_params)
    space = inner.action_space(inner_params)
    w_step = jax.vmap(wrapped.step, in_axes=(0, 0, 0, None))
    g_step = jax.vmap(inner.step, in_axes=(0, 0, 0, None))
    keys = jax.random.split(jax.random.key(3), 50)
    ended = 0
    with jax.disable_jit():
        _, ws = jax.vmap(wrapped.reset, in_axes=(0, None))(keys, wp)
        _, gs = jax.vmap(inner.reset, in_axes=(0, None))(keys, inner_params)
        for k in jax.random.split(keys[0], 20):
            ka, ks = jax.random.split(k)
            a = jax.vmap(space.sample)(jax.random.split(ka, 50))
            wo, ws, wr, wt, wtr, _ = w_step(jax.random.split(ks, 50), ws, a, wp)
            go, gs, gr, gt, gtr, _ = g_step(jax.random.split(ks, 50), gs, a, inner_params)
            np.testing.assert_array_equal(np.asarray(wo), np.asarray(go))
            np.testing.assert_array_equal(np.asarray(wr), np.asarray(gr, np.float32))
            np.testing.assert_array_equal(np.asarray(wt), np.asarray(gt))
            np.testing.assert_array_equal(np.asarray(wtr), np.asarray(gtr))
            ended += int(np.sum(np.asarray(gt | gtr)))
    assert ended > 0  # episodes ended and were reset on the way


def test_a_perturbed_masspole_reaches_the_dynamics_through_the_derived_fields():
    """gymnax stores CartPole's total_mass and polemass_length: the preset's hook must
    recompute them, or perturbing masspole alone would change nothing."""
    env, params = envs.make("gymnax:CartPole-v1")
    heavy = params.replace(xi=params.xi.at[env.fields.index("masspole")].set(0.15))
    inner = env.apply_xi(heavy)
    assert np.isclose(float(inner.total_mass), 1.15) and np.isclose(float(inner.polemass_length), 0.075)
    s = jnp.array([0.0, 0.5, 0.1, -0.3])
    nominal = env.next_state_distribution(params, s, 1).mean()
    perturbed = env.next_state_distribution(heavy, s, 1).mean()
    assert np.abs(np.asarray(perturbed - nominal)).max() > 1e-4


@pytest.mark.parametrize("name", ["gymnax:CartPole-v1", "gymnax:Pendulum-v1"])
def test_score_of_the_kernel_matches_finite_differences(name):
    """``grad_xi log p_xi(s' | s, a)`` (what the score-function LTMA differentiates, through
    gymnax's step despite its stop_gradient) against central differences."""
    env, params = envs.make(name)
    s = env.initial_state(jax.random.key(0), params) + 0.05
    a = jnp.int32(1) if env.discrete else jnp.array([0.7])
    mean, _ = env.transition(params, s, 0, a)  # f_xi(s, a), the whole state vector
    s_next = mean + params.noise * jnp.linspace(-1.0, 1.0, mean.shape[0])
    log_p = lambda xi: env.transition_log_prob(xi, params, s, a, s_next)  # noqa: E731
    grad = np.asarray(jax.grad(log_p)(params.xi))
    assert np.abs(grad).max() > 1.0  # the gradient is not cut
    h = 1e-3 * np.abs(np.asarray(params.xi))
    fd = [(log_p(params.xi.at[i].add(h[i])) - log_p(params.xi.at[i].add(-h[i]))) / (2 * h[i]) for i in range(len(h))]
    np.testing.assert_allclose(grad, np.asarray(fd), rtol=0.05, atol=0.02 * np.abs(grad).max())


@pytest.mark.parametrize("name", ["gymnax:Pendulum-v1", "gymnax:MountainCarContinuous-v0@costs=speed"])
def test_pathwise_gradient_of_a_short_episode_matches_finite_differences(name):
    """The pathwise LTMA direction (jax.grad through reparameterised episodes) equals the
    finite difference of the same episodes' Lagrangian cost (common random numbers, an
    open-loop policy so the actions do not move with xi)."""
    env = make_gymnax(name, noise=0.0)  # the pathwise estimator also works without noise
    params = env.default_params
    policy = lambda obs, key: jax.random.uniform(key, (env.action_dim,), minval=-0.5, maxval=0.5)  # noqa: E731
    keys, lam, gamma, horizon = jax.random.split(jax.random.key(7), 3), jnp.array([2.0]), 0.99, 15
    direction, _ = pathwise_direction(env, params, policy, keys, lam, gamma, horizon)

    def lagrangian(xi):
        p = params.replace(xi=xi)
        traj = jax.vmap(lambda k: sample_episode(k, env, p, policy, horizon))(keys)
        cost = (-traj.reward + traj.costs @ lam) * traj.alive
        return jnp.mean(jnp.sum(gamma ** jnp.arange(horizon) * cost, axis=1))

    h = 1e-4 * np.abs(np.asarray(params.xi))  # small: Pendulum's reward has a kink at the bottom
    fd = [(lagrangian(params.xi.at[i].add(h[i])) - lagrangian(params.xi.at[i].add(-h[i]))) / (2 * h[i])
          for i in range(len(h))]  # fmt: skip
    assert np.abs(np.asarray(direction)).max() > 0
    np.testing.assert_allclose(np.asarray(direction), np.asarray(fd), rtol=0.05, atol=0.02 * np.abs(fd).max())


def test_the_test_grid_enumerates_every_corner_of_the_chosen_fields():
    env, params = envs.make("gymnax:Pendulum-v1@uncertain=g:0.2,l:abs:0.25")
    assert env.fields == ("g", "l")
    np.testing.assert_allclose(np.asarray(params.kappa), [2.0, 0.25])
    kernels = env.test_kernels([0.0, 1.0])
    corners = np.asarray(kernels.xi[1])  # level 1: xi_c + kappa * d over all 2^2 directions
    expected = {(g, ln) for g in (8.0, 12.0) for ln in (0.75, 1.25)}
    assert {tuple(np.round(c, 5)) for c in corners} == expected
    np.testing.assert_allclose(np.asarray(kernels.xi[0]), np.tile([10.0, 1.0], (4, 1)))
    inner = env.apply_xi(jax.tree.map(lambda x: x[1, 0], kernels))
    assert (float(inner.g), float(inner.l)) == tuple(corners[0])


@struct.dataclass
class DriftState(environment.EnvState):
    x: jax.Array
    v: jax.Array
    time: int


@struct.dataclass
class DriftParams(environment.EnvParams):
    drag: float = 0.1
    push: float = 0.2
    max_steps_in_episode: int = 30


class Drift(environment.Environment):
    """A user's own gymnax env: a point pushed left or right against drag; reward for
    staying near 1."""

    @property
    def default_params(self):
        return DriftParams()

    def step_env(self, key, state, action, params):
        v = state.v * (1 - params.drag) + params.push * (2.0 * action - 1.0)
        x = state.x + v
        new = DriftState(x=x, v=v, time=state.time + 1)
        return self.get_obs(new), new, -jnp.abs(x - 1.0), jnp.array(False), {}

    def reset_env(self, key, params):
        s = DriftState(x=jnp.float32(0.0), v=jnp.float32(0.0), time=0)
        return self.get_obs(s), s

    def get_obs(self, state, params=None, key=None):
        return jnp.stack([state.x, state.v])

    def is_terminated(self, state, params):
        return jnp.array(False)

    def action_space(self, params=None):
        return spaces.Discrete(2)


def test_a_users_own_env_and_cost_train_and_sweep_through_the_api():
    speed = lambda s, a, n, p: jnp.abs(n.v)[None] - 0.1  # noqa: E731
    env = envs.robustify(Drift(), uncertain={"drag": envs.absolute(0.05), "push": 0.5}, costs={"speed": speed})
    assert (env.num_constraints, env.state_dim, env.obs_dim, env.action_dim) == (1, 2, 2, 2)
    envs.register("drift", env, learner=dict(budgets={"short": 240, "long": 2400}))
    cfg = preset("drift", "PPO-Robust-Lag", n_steps=30, minibatch_size=30, epochs=1, ltma_iterations=2,
                 eval_episodes=2)  # fmt: skip
    out = jax.jit(make_train(cfg))(jax.random.key(0))
    assert np.all(np.isfinite(np.asarray(out.metrics["eval_return"])))
    xi = np.asarray(out.state.env_params.xi)
    assert np.all(np.abs(xi - [0.1, 0.2]) <= [0.05, 0.1 + 1e-6]) and not np.allclose(xi, [0.1, 0.2])
    from rcmdp_jax.evaluate import make_eval

    sweep = make_eval(cfg, n_test=2)
    actor = jax.tree.map(lambda x: x[None], out.state.params["actor"])
    res = jax.jit(sweep)(actor, jax.random.key(1))
    assert res["V"].shape == (1, 11, 4, 2) and res["C"].shape == (1, 11, 4, 2, 1)


def test_noiseless_kernel_refuses_the_score_estimator_and_takes_the_pathwise_one():
    env = envs.robustify(Drift(), uncertain={"drag": 0.5}, costs=[lambda s, a, n, p: n.v[None]], noise=0.0)
    envs.register("drift-noiseless", env)
    small = dict(total_timesteps=64, n_steps=16, minibatch_size=16)
    with pytest.raises(ValueError, match="score-function estimator needs noise > 0"):
        make_train(preset("drift-noiseless", "PPO+ltma", **small))  # the study's LTMA: the score function
    make_train(preset("drift-noiseless", "PPO+ltma", ltma_estimator="pathwise", **small))
    make_train(preset("drift-noiseless", "PPO-Robust", **small))  # the default here: worst-of-n, no gradient


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(uncertain={"mass": 0.1}), ValueError, "has no field 'mass'; float fields: drag, push"),
        (dict(uncertain={"max_steps_in_episode": 0.1}), ValueError, "is not a float scalar"),
        (dict(uncertain={"drag": 0.0}), ValueError, "box must be non-empty"),
        (dict(uncertain={"drag": ("abs", -1.0)}), ValueError, "box must be non-empty"),
        (dict(uncertain={}), ValueError, "name at least one"),
        (dict(uncertain=["drag"]), TypeError, "uncertain must be a dict"),
        (dict(uncertain={"drag": 0.1}, noise=-1.0), ValueError, "noise must be a finite number >= 0"),
        (
            dict(uncertain={"drag": 0.1}, noise=(0.1, 0.1, 0.0)),
            ValueError,
            r"noise must be one number or 2 \(one per state entry: x, v\), got 3",
        ),
    ],
)
def test_bad_wrapper_input_is_a_clear_error(kwargs, error, match):
    kwargs = {"costs": [lambda s, a, n, p: n.v[None]], **kwargs}
    with pytest.raises(error, match=match):
        envs.robustify(Drift(), **kwargs)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--env", "gymnax:Pendulum-v1", "--uncertain", "g=0.2,mass=0.1"], "has no field 'mass'"),
        (["--env", "gymnax:Acrobot-v1", "--uncertain", "available_torque=0.1"], "is not a float scalar"),
        (["--env", "gymnax:Pendulum-v1", "--uncertain", "g=0"], "box must be non-empty"),
        (["--env", "gymnax:Pendulum-v1", "--uncertain", "g"], "write FIELD=WIDTH"),
        (["--env", "gymnax:Pendulum-v1", "--costs", "fuel"], "choose one of speed, torque"),
        (["--env", "gymnax:Nope-v0"], "gymnax:Pendulum-v1"),
        (["--env", "cartpole", "--uncertain", "g=0.1"], "apply to a gymnax environment"),
        (["--env", "gymnax:Catch-bsuite"], "EnvParams has no float field: no uncertainty box can be put"),
        (["--env", "gymnax:FourRooms-misc", "--uncertain", "x=1"], "gymnax cannot build FourRooms-misc here: Tracer"),
        (["--env", "gymnax:Catch-bsuite", "--uncertain", "x=1"], "no field 'x'; it has no float field (none"),
        (["--env", "gymnax:Pendulum-v1", "--costs", "spin:1"], "'spin' for FIELD:LIMIT; float fields: th"),
    ],
)
def test_bad_gymnax_cli_input_exits_2_and_writes_nothing(tmp_path, capsys, args, message):
    out = tmp_path / "run"
    assert cli.main([*args, "--out", str(out), "--seeds", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


@pytest.mark.parametrize("estimator", ["score", "pathwise"])
def test_the_worst_case_search_runs_on_a_gymnax_preset_and_stays_in_the_box(estimator):
    from rcmdp_jax.networks import build_networks
    from rcmdp_jax.worst_case import SearchConfig, corner_starts, make_worst_case

    name = "gymnax:Pendulum-v1@uncertain=g:0.2,m:0.2"
    cfg = preset(name, "PPO-Lag")
    env, params = envs.make(name)
    finder = make_worst_case(cfg, SearchConfig(steps=2, episodes=2, eval_episodes=2, estimator=estimator))
    actor, _ = build_networks(cfg, env)
    actor_params = jax.tree.map(lambda x: x[None], actor.init(jax.random.PRNGKey(0), jnp.zeros((env.obs_dim,))))
    starts = corner_starts(env, params)  # [1, 1 + 4, 2]
    found = jax.jit(finder)(actor_params, jnp.asarray(starts), jax.random.PRNGKey(2))
    xi = np.asarray(found["return"]["xi"])
    assert xi.shape == (1, 5, 2) and np.all(np.isfinite(np.asarray(found["return"]["episodes"])))
    assert np.all(np.abs(xi - [10.0, 1.0]) <= np.array([2.0, 0.2]) * (1 + 1e-5))
    assert np.abs(xi[0, 0] - [10.0, 1.0]).max() > 0  # the search moved off the centre
    if estimator == "score":
        noiseless = envs.register("pendulum-noiseless", make_gymnax("gymnax:Pendulum-v1", noise=0.0))
        with pytest.raises(ValueError, match="needs noise > 0"):
            make_worst_case(preset(noiseless, "PPO-Lag"), SearchConfig(estimator="score"))


def test_the_density_is_the_normal_of_the_noisy_entries_around_gymnaxs_step():
    """Pendulum's preset draws noise on theta and theta_dot, none on last_u (the torque just
    applied): log p is the NumPy Normal log-density of those two entries around gymnax's
    own next state, and a step leaves last_u exactly gymnax's."""
    env, params = envs.make("gymnax:Pendulum-v1")
    assert env.noisy == (0, 1) and env.state_fields == ("theta", "theta_dot", "last_u")
    gstate = env.inner.reset_env(jax.random.PRNGKey(4), env.inner_params)[1]
    s, a = env.flatten(gstate), jnp.array([0.8])
    nxt = env.inner.step_env(jax.random.PRNGKey(0), gstate, a, env.inner_params)[1]
    mu = np.array([float(nxt.theta), float(nxt.theta_dot)], np.float64)
    s_next = np.array([mu[0] + 0.004, mu[1] - 0.013, 123.0], np.float32)  # last_u: no density
    sigma = np.asarray(params.noise, np.float64)[:2]
    z = (s_next[:2] - mu) / sigma
    expected = np.sum(-0.5 * z**2 - np.log(sigma) - 0.5 * np.log(2 * np.pi))
    got = float(env.transition_log_prob(params.xi, params, s, a, jnp.asarray(s_next)))
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    _, state, *_ = env.step_env(jax.random.PRNGKey(9), envs.RobustState(s=s, time=jnp.int32(0)), a, params)
    assert float(state.s[2]) == float(nxt.last_u) and abs(float(state.s[0]) - mu[0]) > 0


# ------------------------------------------------------------------ the kernel noise of any gymnax id, a vector field's limit, what custom_envs.md says of gymnax's step
MOUNTAIN = "gymnax:MountainCar-v0@uncertain=force:0.2"


def test_the_noise_of_a_gymnax_id_is_the_documented_default_and_settable():
    from rcmdp_jax.study.plan import build_plan

    np.testing.assert_allclose(np.asarray(envs.make(MOUNTAIN)[1].noise), [1e-3, 1e-3])  # position, velocity
    np.testing.assert_allclose(np.asarray(envs.make(MOUNTAIN + "@noise=1e-5")[1].noise), [1e-5, 1e-5])
    np.testing.assert_allclose(np.asarray(envs.make(MOUNTAIN + "@noise=1e-5,0")[1].noise), [1e-5, 0.0])
    args = ["--env", "gymnax:MountainCar-v0", "--uncertain", "force=0.2", "--noise", "1e-5", "--algos", "PPO"]
    assert build_plan(cli.parse_args([*args, "--seeds", "1"])).envs == (MOUNTAIN + "@noise=1e-5",)
    assert "1e-3 on\n  every state entry for an id without a preset" in (DOCS / "cli.md").read_text()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--noise", "1e-3,1e-3,0"], "noise must be one number or 2 (one per state entry: position, velocity), got 3"),
        (["--noise", "-1"], "noise must be a finite number >= 0"),
        (["--noise", "small"], "noise: small — write one std (noise=0.01) or one per state entry"),
        (["--noise", ""], "--noise is empty"),
    ],
)
def test_a_bad_noise_is_one_line_naming_noise(tmp_path, capsys, args, message):
    out = tmp_path / "never"
    base = ["--env", "gymnax:MountainCar-v0", "--uncertain", "force=0.2", "--algos", "PPO", "--out", str(out)]
    assert cli.main([*base, *args]) == 2
    _one_line(capsys, message)
    assert cli.main(["--env", "cartpole", "--noise", "1e-3", "--out", str(out)]) == 2
    _one_line(capsys, "--uncertain, --costs and --noise apply to a gymnax environment")
    assert not out.exists()


def test_a_vector_field_limit_is_one_constraint_on_its_largest_entry():
    from rcmdp_jax.envs.gymnax_any import limit_cost

    cost = limit_cost("angle_vels:1", ("angles", "angle_vels"), "Reacher-misc")
    nxt = SimpleNamespace(angle_vels=jnp.array([0.5, -2.0]))
    np.testing.assert_allclose(np.asarray(cost(None, None, nxt, None)), [1.0])  # max(0.5, 2.0) - 1
    nxt = SimpleNamespace(angle_vels=jnp.array([0.5, -0.25]))
    np.testing.assert_allclose(np.asarray(cost(None, None, nxt, None)), [-0.5])  # kept: both within 1
    assert "max_i |FIELD_i| <= LIMIT" in (DOCS / "custom_envs.md").read_text()


def test_custom_envs_md_unpacks_gymnax_steps_six_values():
    import gymnax

    env, params = gymnax.make("CartPole-v1")
    obs, state = env.reset(jax.random.key(0), params)
    returned = env.step(jax.random.key(1), state, 0, params)
    text = (DOCS / "custom_envs.md").read_text()
    assert len(returned) == 6 and "obs, state, reward, done, info, _ = env.step(...)" in text
    assert re.search(r"returns six values", text)

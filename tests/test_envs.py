"""Environment tests: independent NumPy references, sampling = distribution,
differentiable kernels, episode semantics, test kernels, vmap, bad input."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax import envs

K = 1.0 / math.sqrt(8.0 * math.pi)


def numpy_cartpole(s, action):
    """Classic explicit-Euler cart-pole, written from the textbook equations."""
    g, mc, mp, half_len, f, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    x, xd, th, thd = s
    force = f if action == 1 else -f
    total = mc + mp
    tmp = (force + mp * half_len * thd * thd * math.sin(th)) / total
    thacc = (g * math.sin(th) - math.cos(th) * tmp) / (half_len * (4.0 / 3.0 - mp * math.cos(th) ** 2 / total))
    xacc = tmp - mp * half_len * thacc * math.cos(th) / total
    nxt = np.array([x + tau * xd, xd + tau * xacc, th + tau * thd, thd + tau * thacc])
    done = abs(nxt[0]) > 2.4 or abs(nxt[2]) > 12 * 2 * math.pi / 360
    return nxt, done


def test_cartpole_matches_numpy_reference():
    env, params = envs.make("cartpole")
    params = params.replace(sigma2=0.0)
    rng = np.random.default_rng(0)
    states = rng.uniform([-2.5, -2, -0.25, -2], [2.5, 2, 0.25, 2], size=(400, 4)).astype(np.float32)
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, None, None)))
    n_done = 0
    for action in (0, 1):
        st = envs.RobustState(s=jnp.asarray(states), time=jnp.zeros(400, jnp.int32))
        keys = jax.random.split(jax.random.PRNGKey(1), 400)
        obs, _, reward, term, trunc, info = step(keys, st, action, params)
        for i in range(400):
            ref, ref_done = numpy_cartpole(states[i].astype(np.float64), action)
            np.testing.assert_allclose(info["final_observation"][i], ref, atol=1e-5, rtol=1e-5)
            assert bool(term[i]) == ref_done
            assert float(reward[i]) == 1.0
            np.testing.assert_allclose(info["costs"][i], [abs(states[i, 1]) - 0.15], atol=1e-6)
            n_done += ref_done
        assert not bool(jnp.any(trunc))
    assert 50 < n_done < 750  # the sample covers both terminal and live transitions


@pytest.mark.parametrize("name", envs.ENV_NAMES)
def test_step_samples_from_the_kernel_distribution(name):
    env, params = envs.make(name)
    # a kernel away from the nominal one, so that xi's part in the kernel shows
    signs = np.where(np.arange(np.size(params.xi)) % 2 == 0, 1.0, -1.0).reshape(np.shape(params.xi))
    params = params.replace(xi=params.xi_c + 0.7 * params.kappa * signs)
    _, state = env.reset(jax.random.PRNGKey(0), params)
    state = state.replace(s=state.s + 0.3)
    action = jnp.array([0.4, -0.2, 0.9]) if name == "inventory3d" else jnp.array(1)
    n = 40000
    keys = jax.random.split(jax.random.PRNGKey(3), n)
    samples = jax.vmap(lambda k: env.step_env(k, state, action, params)[1].s)(keys)
    # the kernel written out independently (docs/method.md §1): its mean and variance
    s0 = np.asarray(state.s, np.float64)
    if name == "cartpole":
        mean, var = np.asarray(params.xi) * numpy_cartpole(s0, 1)[0], np.full(4, 1e-7)
    else:
        k = 1.0 / math.sqrt(8.0 * math.pi)
        a = np.clip(np.asarray(action), -1, 1) if name == "inventory3d" else np.array([-8.0, -4.0, 3.0, 6.0])[1]
        z = np.concatenate([s0, np.atleast_1d(a)])
        zeta = np.array([-k * np.sum((z - np.asarray(c)) ** 2) / (2 * sg**2)
                         for c, sg in zip(params.centres, params.sigmas)])  # fmt: skip
        mean, var = np.atleast_1d(np.asarray(params.xi) @ zeta), np.ones(env.state_dim)
    std = np.sqrt(var)
    np.testing.assert_allclose(samples.mean(0), mean, atol=5 * std.max() / math.sqrt(n), rtol=1e-6)
    np.testing.assert_allclose(samples.var(0), var, rtol=0.05)


@pytest.mark.parametrize("name", envs.ENV_NAMES)
def test_log_prob_gradient_matches_finite_differences(name):
    with jax.enable_x64(True):
        env, params = envs.make(name)
        params = jax.tree.map(
            lambda x: jnp.asarray(x, jnp.float64) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating) else x, params
        )
        rng = np.random.default_rng(1)
        s = jnp.asarray(rng.normal(size=env.state_dim) * 0.1)
        action = jnp.asarray(rng.normal(size=3)) if name == "inventory3d" else jnp.array(1)
        xi = params.xi + 0.3 * params.kappa * jnp.asarray(rng.uniform(-1, 1, np.shape(params.xi)))
        s_next = env.next_state_distribution(params.replace(xi=xi), s, action).sample(seed=jax.random.PRNGKey(2))
        f = lambda x: env.transition_log_prob(x, params, s, action, s_next)  # noqa: E731
        grad = np.asarray(jax.grad(f)(xi)).ravel()
        flat = np.asarray(xi).ravel()
        fd = np.zeros_like(flat)
        h = 1e-6 * np.maximum(1.0, np.abs(flat))
        for i in range(flat.size):
            e = np.zeros_like(flat)
            e[i] = h[i]
            fd[i] = (f(jnp.asarray((flat + e).reshape(xi.shape))) - f(jnp.asarray((flat - e).reshape(xi.shape)))) / (
                2 * h[i]
            )
        assert grad.dtype == np.float64
        np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


def test_inventory_features_and_reward_by_hand():
    env, params = envs.make("inventory")
    s = jnp.array([0.0])
    # action 3 orders 6: (s, a) = (0, 6)
    # zeta_1 = -K ((0+4)^2 + (6-5)^2) / (2 * 10^2) = -K * 17/200
    # zeta_2 = -K ((0+2)^2 + (6-8)^2) / (2 * 5^2)  = -K * 8/50
    z1, z2 = -K * 17 / 200, -K * 8 / 50
    np.testing.assert_allclose(env.zeta(params, s, 3), [z1, z2], rtol=1e-6)
    mean = -2.0 * z1 + 3.5 * z2  # = -0.39 K
    dist = env.next_state_distribution(params, s, jnp.array(3))
    np.testing.assert_allclose(dist.mean(), [mean], rtol=1e-6)
    np.testing.assert_allclose(dist.variance(), [1.0], rtol=1e-6)
    s2 = jnp.array([2.0])
    # action 0 orders -8 from s = 2, next state 1.5: r = -8 - 2 - 1.5, c = 0.01 (64 - 2)
    assert float(env.reward(params, s2, jnp.array(0), jnp.array([1.5]))) == pytest.approx(-11.5)
    np.testing.assert_allclose(env.constraint_costs(params, s2, jnp.array(0), None), [0.62], rtol=1e-6)


def test_inventory3d_features_and_reward_by_hand():
    env, params = envs.make("inventory3d")
    s = jnp.array([1.0, 0.0, -1.0])
    a = jnp.array([0.5, 2.0, -3.0])  # clipped to (0.5, 1, -1)
    z = np.array([1.0, 0.0, -1.0, 0.5, 1.0, -1.0])
    d1 = ((z - np.array([-3, -2.5, -3.5, 5.0, 2.0, 4.5])) ** 2).sum()  # 16+6.25+6.25+20.25+1+30.25
    d2 = ((z - np.array([-6.0, -2.8, -4.0, 8.0, 2.0, 2.5])) ** 2).sum()
    assert d1 == pytest.approx(80.0)
    zeta = np.array([-K * d1 / (2 * 16.0), -K * d2 / (2 * 20.25)])
    np.testing.assert_allclose(env.zeta(params, s, a), zeta, rtol=1e-6)
    eta = np.array([[-2, 2.5], [-1.8, 1.5], [-1.5, 2.0]])
    dist = env.next_state_distribution(params, s, a)
    np.testing.assert_allclose(dist.mean(), eta @ zeta, rtol=1e-5)
    s_next = jnp.array([0.1, 0.2, 0.3])
    # r = (0.5 - 1 - 0.1) + (1 - 0 - 0.2) + (-1 + 1 - 0.3) = -0.1
    assert float(env.reward(params, s, a, s_next)) == pytest.approx(-0.1, abs=1e-6)
    # c_j = a_j - 0.5 s_j = (0.5 - 0.5, 1 - 0, -1 + 0.5)
    np.testing.assert_allclose(env.constraint_costs(params, s, a, s_next), [0.0, 1.0, -0.5], atol=1e-6)


def _run_episode_lengths(name, action, n_steps, params=None):
    env, default = envs.make(name)
    params = default if params is None else params
    obs, state = env.reset(jax.random.PRNGKey(0), params)

    def body(carry, key):
        state = carry
        obs, state, r, term, trunc, info = env.step(key, state, action, params)
        return state, (r, term, trunc, state.time, obs)

    _, out = jax.lax.scan(body, state, jax.random.split(jax.random.PRNGKey(1), n_steps))
    return [np.asarray(x) for x in out]


def test_cartpole_episode_semantics():
    env, params = envs.make("cartpole")
    # always pushing right makes the pole fall well before 100 steps
    r, term, trunc, time, obs = _run_episode_lengths("cartpole", 1, 150)
    first = int(np.argmax(term))
    assert 5 < first < 100 and r[first] == 1.0 and not trunc[first]
    assert time[first] == 0  # auto-reset
    assert np.all(np.abs(obs[first]) <= 0.05)  # fresh start state
    # a kernel that pins the state at 0 (xi = 0) never terminates: truncation at 100
    frozen = params.replace(xi=jnp.zeros(4))
    r, term, trunc, time, _ = _run_episode_lengths("cartpole", 1, 250, frozen)
    assert not term.any()
    assert list(np.flatnonzero(trunc)) == [99, 199]
    assert np.all(r == 1.0) and time[99] == 0 and time[100] == 1


@pytest.mark.parametrize("name,length", [("inventory", 80), ("inventory3d", 100)])
def test_inventory_episode_lengths(name, length):
    action = jnp.zeros(3) if name == "inventory3d" else 2
    _, term, trunc, time, _ = _run_episode_lengths(name, action, 2 * length + 5)
    assert not term.any()
    assert list(np.flatnonzero(trunc)) == [length - 1, 2 * length - 1]
    assert time[length - 1] == 0 and time[length] == 1


@pytest.mark.parametrize("name,n_dirs", [("cartpole", 16), ("inventory", 4), ("inventory3d", 64)])
def test_test_kernels(name, n_dirs):
    env, params = envs.make(name)
    levels = np.linspace(0.0, 1.0, 11)
    tk = env.test_kernels(levels, params)
    xi = np.asarray(tk.xi).reshape(11, n_dirs, -1)
    xi_c = np.asarray(params.xi_c).ravel()
    kappa = np.asarray(params.kappa).ravel()
    assert xi.shape == (11, n_dirs, xi_c.size)
    assert jax.tree.leaves(tk)[0].shape[:2] == (11, n_dirs)
    np.testing.assert_allclose(xi[0], np.broadcast_to(xi_c, xi[0].shape))
    # level 1: every component on the box boundary, all 2^n corners distinct
    np.testing.assert_allclose(np.abs(xi[-1] - xi_c), np.broadcast_to(kappa, xi[-1].shape), rtol=1e-6)
    assert len({tuple(np.sign(row - xi_c)) for row in xi[-1]}) == n_dirs
    assert np.all(np.abs(xi - xi_c) <= kappa + 1e-6)
    # an intermediate level follows x^2 kappa d
    np.testing.assert_allclose(np.abs(xi[5] - xi_c), np.broadcast_to(0.25 * kappa, xi[5].shape), rtol=1e-4)


def test_projection_onto_the_box():
    env, params = envs.make("inventory")
    far = params.replace(xi=jnp.array([100.0, -3.0]))
    np.testing.assert_allclose(env.project(far).xi, [13.0, -3.0])


@pytest.mark.parametrize("name", envs.ENV_NAMES)
def test_vmap_step_over_params_and_states_under_jit(name):
    env, params = envs.make(name)
    tk = env.test_kernels([0.0, 1.0], params)
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tk)
    n = flat.xi.shape[0]
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    obs, states = jax.vmap(env.reset)(keys, flat)
    action = jnp.zeros((n, 3)) if name == "inventory3d" else jnp.ones(n, jnp.int32)
    out = jax.jit(jax.vmap(env.step))(keys, states, action, flat)
    assert out[0].shape == (n, env.state_dim)
    assert out[5]["costs"].shape == (n, env.num_constraints)
    # over states with shared params
    out2 = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(keys, states, action, params)
    assert out2[2].shape == (n,)


def test_unknown_env_name():
    with pytest.raises(ValueError, match="cartpole, inventory, inventory3d"):
        envs.make("pendulum")


def test_a_built_in_domains_limit_set_by_name():
    """``inventory@cost_threshold=0.13``: the same domain, its cost lowered by the limit
    (hand check of the example above: c = 0.01 (64 - 2) - 0.13), kernels and reward unchanged;
    the cost's name says it; a wrong field or number is refused naming the spelling."""
    env, params = envs.make("inventory@cost_threshold=0.13")
    s2 = jnp.array([2.0])
    np.testing.assert_allclose(env.constraint_costs(params, s2, jnp.array(0), None), [0.62 - 0.13], rtol=1e-6)
    assert float(env.reward(params, s2, jnp.array(0), jnp.array([1.5]))) == pytest.approx(-11.5)
    np.testing.assert_array_equal(params.xi, envs.make("inventory")[1].xi)
    assert envs.spec("inventory@cost_threshold=0.13").cost_names == ("0.01(a^2-s)-0.13",)
    env, params = envs.make("cartpole@velocity_limit=0.3")
    s = jnp.array([0.0, -0.5, 0.0, 0.0])
    np.testing.assert_allclose(env.constraint_costs(params, s, jnp.array(0), s), [0.5 - 0.3], rtol=1e-6)
    assert envs.spec("cartpole@velocity_limit=0.3").cost_names == ("|x_dot|-0.3",)
    for bad in ("inventory@velocity_limit=1", "inventory@cost_threshold=high", "cartpole@velocity_limit=nan"):
        with pytest.raises(ValueError, match=r"write (inventory@cost_threshold|cartpole@velocity_limit)=NUMBER"):
            envs.check_name(bad)


def test_wrong_xi_shape_is_a_clear_error():
    env, params = envs.make("cartpole")
    bad = params.replace(xi=jnp.ones(3))
    _, state = env.reset(jax.random.PRNGKey(0), params)
    with pytest.raises(ValueError, match=r"EnvParams\.xi has shape \(3,\); expected \(4,\)"):
        env.step(jax.random.PRNGKey(0), state, 0, bad)
    with pytest.raises(ValueError, match="xi"):
        env.test_kernels([0.0], bad)


@pytest.mark.parametrize(
    "name,bad",
    [("cartpole", [7, -1, 1.7, float("nan")]), ("inventory", [7, -1, 2.5]),
     ("inventory3d", [np.array([np.nan, 0.0, 0.0], np.float32), np.zeros(2, np.float32)])],
)  # fmt: skip
def test_actions_outside_the_action_space_are_refused_or_visible(name, bad):
    """Outside jit: a ValueError naming the action; inside: a NaN step that ends the
    episode (the divergence check sees it), never a valid-looking step."""
    env, params = envs.make(name)
    _, state = env.reset(jax.random.PRNGKey(0), params)
    for action in bad:
        with pytest.raises(ValueError, match="is not in the action space; expected"):
            env.step(jax.random.PRNGKey(1), state, action, params)
        if np.shape(action) == np.shape(env.action_space(params).sample(jax.random.PRNGKey(0))):
            obs, _, reward, terminated, _, info = jax.jit(env.step)(jax.random.PRNGKey(1), state, action, params)
            assert np.isnan(float(reward)) and bool(terminated) and np.all(np.isnan(np.asarray(info["costs"])))
    good = env.action_space(params).sample(jax.random.PRNGKey(2))
    _, _, reward, _, _, _ = env.step(jax.random.PRNGKey(1), state, good, params)
    assert np.isfinite(float(reward))
    for levels in ([2.0], [float("nan")], [-0.5]):
        with pytest.raises(ValueError, match="levels must be a 1-D array of numbers in \\[0, 1\\]"):
            env.test_kernels(levels, params)

"""brax environments made robust-constrained (``envs.brax_adapter``, ``envs.brax_wrapper``,
``envs.brax_presets``): the adapter steps as brax itself, a scaled field reaches the physics,
the velocity costs against a hand computation, the pathwise gradient against finite
differences, a robust method of each kind as a member of one family program, and the missing extra.
brax's step costs ~10 s of CPU to compile: the quick tier compiles it twice (ours, brax's) in
one shared run; the gradient, the training programs and the missing extra (another process) are ``slow``."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from brax import envs as benvs
from rcmdp_jax.envs.base import RobustState
from rcmdp_jax.envs.brax_wrapper import speed_cost, velocity_cost

from rcmdp_jax import envs, preset
from rcmdp_jax.family import make_family
from rcmdp_jax.ltma import pathwise_direction
from rcmdp_jax.networks import build_networks
from rcmdp_jax.rollout import Policy
from rcmdp_jax.study import cli

PENDULUM = "brax:inverted_pendulum"
STEPS = 24


@pytest.fixture(scope="module")
def pendulum():
    """brax's own inverted pendulum (positional), ours over it (episodes of 20 steps, the speed
    costs of a 0.2 m/s limit, Safety-Gymnasium's with a budget of 2 steps per 20-step episode: 0.1 a step), and one compiled run of
    ours: ``run(params, start states [8], actions [T, 8, 1]) -> (final obs, reward, terminated,
    truncated, costs, flat states)`` per step (one program for both tests below)."""
    inner = benvs.get_environment("inverted_pendulum", backend="positional")
    robust = envs.robustify(inner, uncertain={"pole_mass": 0.5, "gear": 0.2}, episode_length=20,
                            costs={"speed": speed_cost(0.2), "velocity": velocity_cost(0.2, budget=2.0)})  # fmt: skip
    keys = jax.random.split(jax.random.key(4), 8)

    @jax.jit
    def run(params, start, actions):
        def body(st, a):
            o, st, r, term, trunc, info = jax.vmap(robust.step, in_axes=(0, 0, 0, None))(keys, st, a, params)
            return st, (info["final_observation"], r, term, trunc, info["costs"], st.s)

        return jax.lax.scan(body, start, actions)[1]

    return inner, robust, keys, run


def test_the_adapter_steps_as_brax_itself_at_the_nominal_kernel(pendulum):
    """The same keys and actions: observations, rewards, termination and the time limit (brax's
    EpisodeWrapper's ``truncation``) as brax's ``envs.create`` env, until each episode first ends;
    the velocity costs from brax's own cart positions by hand: ``|dx| / dt``."""
    inner, robust, keys, run = pendulum
    theirs = benvs.create("inverted_pendulum", episode_length=20, backend="positional", auto_reset=False)
    p = robust.default_params
    actions = jax.random.uniform(jax.random.key(5), (STEPS, 8, 1), minval=-1.0, maxval=1.0)

    def brax_run(keys, actions):
        def body(bs, a):
            nxt = jax.vmap(theirs.step)(bs, a)
            return nxt, (nxt.obs, nxt.reward, nxt.done, nxt.info["truncation"], bs.pipeline_state.x.pos[:, 0, 0],
                         nxt.pipeline_state.x.pos[:, 0, 0])  # fmt: skip

        return jax.lax.scan(body, jax.vmap(theirs.reset)(keys), actions)[1]

    start = jax.vmap(robust.reset, in_axes=(0, None))(keys, p)[1]
    o, r, term, trunc, costs, _ = (np.asarray(x) for x in run(p, start, actions))
    bo, br, bdone, btrunc, x0, x1 = (np.asarray(x) for x in jax.jit(brax_run)(keys, actions))
    live = (np.cumsum(bdone, 0) - bdone) == 0  # up to and including each episode's first end
    assert live.sum() > 8 * 10 and (bdone * live).sum() >= 1
    np.testing.assert_allclose(o[live], bo[live], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(r[live], br[live])
    np.testing.assert_array_equal((term | trunc)[live], (bdone > 0)[live])
    # a time limit reached on a terminal step: gymnax reports both, brax's EpisodeWrapper only the
    # termination; either way the step is not bootstrapped
    np.testing.assert_array_equal((trunc & ~term)[live], (btrunc > 0)[live])
    assert (trunc & live).sum() >= 1 and (term & live).sum() >= 1  # both kinds of ending were compared
    speed = np.abs(x1 - x0) / float(inner.dt)
    np.testing.assert_allclose(costs[..., 0][live], (speed - 0.2)[live], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(costs[..., 1][live], ((speed > 0.2) - 0.1)[live].astype(np.float32))
    assert 0 < (speed[live] > 0.2).mean() < 1  # both sides of the limit were seen


def test_a_heavier_pole_reaches_the_physics(pendulum):
    """Unactuated, from a tilt at rest, the cart recoils to keep the horizontal momentum
    ``m_cart v_cart + m_pole v_pole`` at zero (a hand check with each kernel's own masses): a pole
    at the box's heavy edge (+50 %) pushes the cart faster, and the momentum balances only with
    the heavy mass."""
    _, robust, keys, run = pendulum
    nominal = robust.default_params
    heavy = nominal.replace(xi=nominal.xi.at[0].set(nominal.xi_c[0] + nominal.kappa[0]))
    _, st = jax.vmap(robust.reset, in_axes=(0, None))(keys, nominal)
    ps = robust.brax_state(jax.tree.map(lambda x: x[0], st)).pipeline_state
    tilted = robust.adapter.brax.pipeline_init(ps.q.at[1].set(0.1), jnp.zeros_like(ps.qd))  # 0.1 rad, at rest
    flat = jnp.concatenate([jnp.ravel(x) for x in jax.tree.leaves(tilted)])
    start = st.replace(s=st.s.at[:, : flat.size].set(flat))
    zero = jnp.zeros((STEPS, 8, 1))

    def velocities(p):  # the links' centre-of-mass x velocities after 3 steps
        s = run(p, start, zero)[-1][2, 0]
        return np.asarray(robust.brax_state(RobustState(s=s, time=jnp.int32(3)), p).pipeline_state.xd_i.vel[:, 0])

    v_nom, v_heavy = velocities(nominal), velocities(heavy)
    m_cart, m_pole = float(nominal.inner.cart_mass), float(nominal.xi_c[0])
    assert abs(v_heavy[0]) > 1.2 * abs(v_nom[0]) > 0
    assert abs(m_cart * v_nom[0] + m_pole * v_nom[1]) < 0.05 * m_cart * abs(v_nom[0])
    assert abs(m_cart * v_heavy[0] + 1.5 * m_pole * v_heavy[1]) < 0.05 * m_cart * abs(v_heavy[0])
    assert abs(m_cart * v_heavy[0] + m_pole * v_heavy[1]) > 0.2 * m_cart * abs(v_heavy[0])


def test_a_brax_kernel_pickles_so_its_compiled_programs_can_be_stored(pendulum):
    """The program store pickles a family's compiled programs with their arguments' tree, which
    names the brax system's ``EnvParams`` class (made per system): the tree comes back equal, and
    the class is the one another build of the same system makes, as in a new process that loads a
    stored program and then builds its env."""
    import pickle

    inner, robust, _, _ = pendulum
    params = robust.default_params
    tree = jax.tree.structure(params)
    again_tree, again = pickle.loads(pickle.dumps((tree, params)))
    assert again_tree == tree
    assert type(again.inner) is type(params.inner) and again.inner == params.inner
    other = envs.robustify(inner, uncertain={"gear": 0.1}, episode_length=20, costs={"speed": speed_cost(0.2)})
    assert type(other.default_params.inner) is type(params.inner)


@pytest.mark.slow  # a reverse-mode program through brax's step: ~1 min of compile on the 2-core CPU
def test_pathwise_gradient_matches_finite_differences_on_the_inverted_pendulum():
    """The positional pipeline's pathwise gradient in (pole_mass, gear) of the Lagrangian cost of
    four 6-step episodes against central differences of the same episodes (the same keys)."""
    cfg = preset(PENDULUM, "PPO-Lag")
    env, params = envs.make(PENDULUM)
    actor, _ = build_networks(cfg, env)
    policy = Policy(actor, actor.init(jax.random.PRNGKey(1), jnp.zeros((env.obs_dim,))))
    keys = jax.random.split(jax.random.PRNGKey(2), 4)
    lam, horizon = jnp.array([2.0]), 6

    @jax.jit
    def direction(xi):
        g, traj = pathwise_direction(env, params.replace(xi=xi), policy, keys, lam, env.gamma, horizon)
        disc = env.gamma ** jnp.arange(horizon)
        return g, jnp.mean(jnp.sum(disc * (-traj.reward + traj.costs @ lam) * traj.alive, axis=1))

    grad = np.asarray(direction(params.xi)[0])
    assert np.all(grad != 0)
    xi0 = np.asarray(params.xi, np.float64)
    for j in range(xi0.size):
        h = 1e-2 * float(params.kappa[j])
        e = np.zeros_like(xi0)
        e[j] = h
        up, down = (float(direction(jnp.asarray(xi0 + s * e, jnp.float32))[1]) for s in (1, -1))
        np.testing.assert_allclose(grad[j], (up - down) / (2 * h), rtol=0.05, atol=1e-3)


# One method of each way a method meets brax's physics: kernels of the rollout envs' own
# (dr's draws), the policy's episodes on candidate kernels (worst-of-n's; corners runs the
# same candidate episodes on the box's corners) and a reverse-mode pass through brax's step
# (ltma's pathwise gradient; ltma-norm's steps follow the same gradient). corners and ltma-norm
# on brax would compile three more copies of brax's step (one reverse-mode: ~50 s of CPU);
# every method, corners and ltma-norm included, is a lane of one family on gymnax:CartPole-v1
# (``test_adversary.py``).
METHODS = ("dr", "worst-of-n", "ltma")


@pytest.mark.slow  # brax's step compiles in ~5 s of CPU per copy, and the family holds about a dozen: ~1.5 min
def test_each_way_a_robust_method_meets_brax_trains_as_a_member_of_one_family_program():
    """PPO-Lag under dr, worst-of-n and ltma (pathwise), each a member of one compiled family
    program (called once per member, not vmapped: a member then runs its own method's phase
    alone, where under ``vmap`` every lane of a chunk would run it; the lanes' semantics are
    ``test_adversary.py``'s): worst-of-n and ltma move the kernel inside the box, dr draws
    one per env."""
    tiny = dict(total_timesteps=64, n_steps=16, n_envs=2, minibatch_size=16, epochs=1, ltma_iterations=1,
                eval_episodes=1, adversary_steps=1, adversary_episodes=1, adversary_candidates=2, ltma_horizon=4,
                ltma_estimator="pathwise")  # fmt: skip
    configs = [preset(PENDULUM, f"PPO-Lag+{m}", **tiny) for m in METHODS]
    family = make_family(configs)
    assert sorted(family.step.methods) == sorted(METHODS)  # member i trains configs[i], METHODS[i]
    seeds = jax.random.split(jax.random.PRNGKey(5), len(METHODS))
    program = jax.jit(family).lower(seeds[0], jnp.int32(0)).compile()  # one program for every member
    results = [program(seeds[i], jnp.int32(i)) for i in range(len(METHODS))]
    p = family.step.default_env_params
    xi_all = np.stack([np.asarray(r.metrics["xi"]) for r in results])
    assert np.all(np.isfinite(xi_all))
    xi = xi_all[:, -1]
    assert np.all(np.abs(xi - np.asarray(p.xi_c)) <= np.asarray(p.kappa) * (1 + 1e-6))
    moved = np.abs(xi - np.asarray(p.xi_c)).max(-1) > 0
    assert list(moved) == [m != "dr" for m in METHODS]  # dr draws kernels per env: its xi stays nominal
    env_xi = np.asarray(results[METHODS.index("dr")].state.env_xi)
    assert len(np.unique(env_xi[..., 0])) == env_xi[..., 0].size


def test_bad_input_is_one_clear_line_before_anything_compiles():
    inner = benvs.get_environment("inverted_pendulum", backend="generalized")
    with pytest.raises(ValueError, match="has no field 'pole_weight'; fields: cart_mass, pole_mass, friction"):
        envs.robustify(inner, uncertain={"pole_weight": 0.3}, costs=[speed_cost(1.0)])
    robust = envs.robustify(inner, uncertain={"pole_mass": 0.3, "damping": 0.5}, costs=[speed_cost(1.0)])
    with pytest.raises(ValueError, match="generalized pipeline gives no reverse-mode gradient.*dr, worst-of-n, corners"):
        robust.check_estimator(robust.default_params, "pathwise")
    with pytest.raises(ValueError, match="does not read 'damping'"):
        envs.make("brax:inverted_pendulum@uncertain=damping:0.2")
    with pytest.raises(ValueError, match="velocity:LIMIT"):
        envs.brax_name(PENDULUM, costs="velocity:fast")
    with pytest.raises(ValueError, match="score-function.*dr, worst-of-n, corners"):  # the study's LTMA estimator
        make_family([preset(PENDULUM, "PPO-Lag+ltma")])


@pytest.mark.slow  # starts another Python process (pyproject.toml's markers)
def test_without_the_extra_the_command_says_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['brax'] = None; sys.modules['brax.envs'] = None\n"
            "from rcmdp_jax.study import cli\n"
            f"sys.exit(cli.main(['--env', '{PENDULUM}', '--algos', 'PPO-Lag', '--seeds', '1', '--out', "
            f"r'{tmp_path / 'run'}']))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if "error" in line]
    assert lines == [f'run.py: error: --env {PENDULUM}: brax environments need the optional extra: pip install -e ".[brax]"']
    assert not (tmp_path / "run").exists()


def test_the_cli_names_a_box_and_a_velocity_limit_on_a_preset():
    name = envs.brax_name(PENDULUM, uncertain="pole_mass=0.3,cart_mass=abs:1", costs="velocity:0.5:0.05")
    assert name == f"{PENDULUM}@uncertain=pole_mass:0.3,cart_mass:abs:1@costs=velocity:0.5:0.05"
    env, p = envs.make(name)
    np.testing.assert_allclose(np.asarray(p.kappa), [0.3 * float(p.xi_c[0]), 1.0], rtol=1e-6)
    assert envs.spec(name).cost_names == ("velocity:0.5:0.05",)
    assert cli.parse_args(["--env", PENDULUM]).env == PENDULUM

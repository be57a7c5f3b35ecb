"""Plug-ins: a toy learner, a toy constraint rule and a toy robust method, each defined here
as its one file would be, with an option of its own, registered with ``register(name, cls)``,
and trained through the family program (``make_family``) beside a built-in one. The rule's
multiplier and dual steps are checked against a hand computation from the run's own metrics
and its option; the learner's update against the steps, marks and parameters it leaves; the
method's kernels against the point of the box its option picks. Each option is refused when
bad, and the learner (which ignores per-env kernels) is refused beside dr and worst-of-n."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax import adversary, constraints, learners, preset
from rcmdp_jax.adversary.base import Adversary, broadcast
from rcmdp_jax.family import make_family
from rcmdp_jax.learners import Learner
from rcmdp_jax.learners.batch import episode_means, lagrangian_gae
from rcmdp_jax.rollout import collect_rollout

ETA, LAM0 = 0.05, 2.0


# ----------------------------------------------------------------- the toy rule's file
class Halving(constraints.Rule):
    """``lam~ = 2 lam``; each ascent step ``lam <- f lam + eta_lam * C^``, ``f`` its option
    ``toy_shrink`` in (0, 1)."""

    options = {"toy_shrink": 0.5}

    @classmethod
    def check_options(cls, cfg):
        if not 0.0 < cfg.option("toy_shrink") < 1.0:
            raise ValueError(f"toy_shrink must be in (0, 1), got {cfg.option('toy_shrink')!r}")

    def multiplier(self, dual, hp):
        return 2.0 * dual.lam

    def step(self, lam, c_hat, hp):
        return self.cfg.option("toy_shrink") * lam + hp.eta_lam * c_hat


# ----------------------------------------------------------------- the toy learner's file
class PlainGradient(Learner):
    """``toy_steps`` (its option, a positive integer) plain gradient steps of
    ``-mean(log pi(a|s) A_L)`` on the whole batch an iteration (the critic is not trained);
    ``policy_epochs`` reports 7, a mark of this update, ``n_updates`` its steps. Its
    ``collect`` ignores per-env kernels (``per_env_kernels`` stays False)."""

    trains_critic = False
    options = {"toy_steps": 1}

    @classmethod
    def check_options(cls, cfg):
        n = cfg.option("toy_steps")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"toy_steps must be a positive integer, got {n!r}")

    def collect(self, key, state, hp, per_env=False, fresh_xi=None):
        traj, env_state, obs, episodes, ep = collect_rollout(
            key, self.env, state.env_params, self.actor, state.params["actor"], state.env_state, state.obs,
            state.episodes, self.cfg.n_steps, hp.gamma,
        )  # fmt: skip
        return traj, state.replace(env_state=env_state, obs=obs, episodes=episodes), episode_means(ep)

    def signal(self, data, params, lam_tilde, hp):
        return lagrangian_gae(self.critic, params["critic"], data, lam_tilde, hp)[0]

    def update(self, key, state, data, signal, hp, schedule):
        def loss(actor_params):
            return -jnp.mean(self.actor.apply(actor_params, data.obs).log_prob(data.action) * signal)

        actor, n = state.params["actor"], self.cfg.option("toy_steps")
        for _ in range(n):
            pl, grads = jax.value_and_grad(loss)(actor)
            actor = jax.tree.map(lambda p, g: p - hp.lr * g, actor, grads)
        zero = jnp.float32(0.0)
        upd = dict(policy_loss=pl, critic_loss=zero, n_updates=jnp.float32(n), policy_epochs=jnp.float32(7.0),
                   approx_kl=zero, alpha=jnp.asarray(hp.alpha, jnp.float32))  # fmt: skip
        return state.replace(params=state.params | {"actor": actor}), jnp.float32(self.cfg.batch_size), upd


# ----------------------------------------------------------------- the toy method's file
class UpperCorner(Adversary):
    """Every iteration, ``xi_c + r kappa`` for the kernel and every rollout env, ``r`` its
    option ``toy_reach`` in (0, 1] (1: the box's upper corner); no environment steps spent."""

    options = {"toy_reach": 1.0}
    size_fields = ("toy_reach",)
    BYTES = 2.0**40  # its memory need, a mark the size estimate must read

    @classmethod
    def lane_bytes(cls, cfg, record, episode):
        return cls.BYTES

    @classmethod
    def check_options(cls, cfg):
        if not 0.0 < cfg.option("toy_reach") <= 1.0:
            raise ValueError(
                f"toy_reach must be in (0, 1] (a share of the half-width), got {cfg.option('toy_reach')!r}"
            )

    def step(self, ctx, key, params, env_xi, actor_params, lam_tilde, hp):
        corner = params.replace(xi=params.xi_c + ctx.cfg.option("toy_reach") * params.kappa)
        return corner, broadcast(corner.xi, env_xi.shape[0]), jnp.float32(0.0)


@pytest.fixture(scope="module")
def registered():
    constraints.register("toy-halving", Halving)
    learners.register("toy-gradient", PlainGradient)
    adversary.register("toy-upper", UpperCorner)
    yield
    constraints.unregister("toy-halving")
    learners.unregister("toy-gradient")
    adversary.unregister("toy-upper")


SHRINK, STEPS = 0.25, 3  # the toy rule's and the toy learner's options in the family test


def _config(rule, **options):
    return preset("cartpole", "MDPO-Lag", total_timesteps=64 * 3, n_steps=16, minibatch_size=16, eval_episodes=2,
                  dual_estimator="start_value", eta_lam=ETA, lam_init=LAM0, lr=0.1).replace(
        learner="toy-gradient", constraint=rule, name=f"toy {rule}", **options)  # fmt: skip


def _hand_dual(step, lam_prev, c_hat, n):
    lam = lam_prev
    for _ in range(int(n)):
        lam = step(lam, c_hat)
    return lam


def test_a_toy_learner_and_a_toy_rule_train_in_one_family(registered):
    rules = ("toy-halving", "lagrangian")
    family = make_family([_config(r, toy_shrink=SHRINK, toy_steps=STEPS).validate() for r in rules])
    keys = jax.random.split(jax.random.PRNGKey(0), len(rules))
    members = jnp.arange(len(rules))
    out = jax.jit(jax.vmap(family))(keys, members)
    init = jax.vmap(family.init)(keys, members)
    m = {k: np.asarray(v, np.float64) for k, v in out.metrics.items()}
    n_it = family.configs[0].num_iterations
    assert m["lam"].shape[:2] == (2, n_it)

    # the toy learner's update ran every iteration: its mark, its policy steps, a moved actor
    np.testing.assert_array_equal(m["policy_epochs"], 7.0)
    np.testing.assert_array_equal(m["n_updates"], STEPS)  # its option
    np.testing.assert_array_equal(m["policy_steps"][:, -1], n_it * family.configs[0].batch_size)
    moved = jax.tree.map(lambda a, b: np.abs(np.asarray(a) - np.asarray(b)).max(), out.state.params["actor"],
                         init.params["actor"])  # fmt: skip
    assert max(jax.tree.leaves(moved)) > 0
    for a, b in zip(jax.tree.leaves(out.state.params["critic"]), jax.tree.leaves(init.params["critic"])):
        np.testing.assert_array_equal(a, b)  # the toy does not train the critic

    # each rule's multiplier and dual steps, by hand from the run's C^ and step counts
    steps = {
        "toy-halving": lambda lam, c: SHRINK * lam + ETA * c,
        "lagrangian": lambda lam, c: np.clip(lam + ETA * c, 0.0, 50.0),
    }
    tilde = {"toy-halving": lambda lam: 2.0 * lam, "lagrangian": lambda lam: lam}
    for i, rule in enumerate(rules):
        lam_prev = np.full(m["lam"].shape[-1], LAM0)
        assert np.all(m["dual_updates"][i] > 0)
        for it in range(n_it):
            np.testing.assert_allclose(m["lam_tilde"][i, it], tilde[rule](lam_prev), rtol=1e-5, err_msg=rule)
            want = _hand_dual(steps[rule], lam_prev, m["c_hat"][i, it], m["dual_updates"][i, it])
            np.testing.assert_allclose(m["lam"][i, it], want, rtol=1e-5, atol=1e-6, err_msg=f"{rule} {it}")
            lam_prev = m["lam"][i, it]
    assert not np.allclose(m["lam"][0], m["lam"][1])  # the two rules really differ


def test_registered_names_are_config_choices(registered):
    assert _config("toy-halving").validate().constraint == "toy-halving"
    with pytest.raises(ValueError, match="toy-gradient"):
        _config("toy-halving").replace(learner="no-such-learner").validate()
    with pytest.raises(ValueError, match="registered already"):
        constraints.register("toy-halving", Halving)
    assert _config("toy-halving").option("toy_shrink") == 0.5  # the default
    assert dict(_config("toy-halving", toy_shrink=0.3).options)["toy_shrink"] == 0.3
    assert "toy_shrink" not in dict(_config("toy-halving", toy_shrink=0.5).options)  # a default is left out


@pytest.mark.parametrize("option, bad, why", [
    ("toy_shrink", 1.0, r"toy_shrink must be in \(0, 1\), got 1.0"),
    ("toy_steps", 0, "toy_steps must be a positive integer, got 0"),
    ("toy_steps", 1.5, "toy_steps must be a positive integer, got 1.5"),
    ("toy_steps", [1, 2], r"option toy_steps=\[1, 2\] must be a number, a string, a bool or a tuple"),
])  # fmt: skip
def test_a_plugins_bad_option_is_refused_naming_it(registered, option, bad, why):
    _config("toy-halving", **{option: 0.5 if option == "toy_shrink" else 2}).validate()
    with pytest.raises(ValueError, match=why):
        _config("toy-halving", **{option: bad}).validate()


def test_options_of_no_plugin_and_clashing_options_are_refused(registered):
    with pytest.raises(ValueError, match="unknown config field.*toy_nothing"):
        _config("toy-halving", toy_nothing=1)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['toy_nothing'\] in options \(no registered plug-in"):
        _config("toy-halving").replace(options=(("toy_nothing", 1),)).validate()

    class Clash(constraints.Rule):
        options = {"toy_shrink": 0.1}

    with pytest.raises(ValueError, match="option 'toy_shrink' is taken by constraint rule 'toy-halving'"):
        constraints.register("toy-clash", Clash)


def test_a_learner_without_per_env_kernels_is_refused_beside_dr_and_worst_of_n(registered):
    """The toy learner's ``collect`` ignores per-env kernels: a method that gives each env its
    own kernel (the candidate methods do, for the separate worst cases) would silently train on
    the nominal one, so the config and the program refuse it."""
    for method in ("dr", "worst-of-n", "corners"):
        cfg = _config("lagrangian").replace(adversary=method)
        with pytest.raises(ValueError, match=f"adversary='{method}' gives each rollout env a kernel of its own"):
            cfg.validate()
        with pytest.raises(ValueError, match="does not honour"):
            make_family([cfg])
    assert _config("lagrangian").replace(adversary="ltma-norm").validate().adversary == "ltma-norm"


def test_a_learner_whose_update_leaves_out_a_metric_is_refused_while_tracing(registered):
    class Forgetful(PlainGradient):
        def update(self, *args):
            state, steps, upd = super().update(*args)
            return state, steps, {k: v for k, v in upd.items() if k != "approx_kl"}

    learners.register("toy-forgetful", Forgetful)
    try:
        family = make_family([_config("lagrangian").replace(learner="toy-forgetful")])
        with pytest.raises(ValueError, match="update must return the metrics .*; missing approx_kl"):
            jax.eval_shape(family, jax.random.PRNGKey(0), 0)
    finally:
        learners.unregister("toy-forgetful")


REACH = 0.5  # the toy method's option in its test


def test_a_toy_robust_method_trains_as_a_lane_beside_none(registered):
    """``PPO-Lag+toy-upper`` names the registered method; in one family with ``PPO-Lag`` its
    lanes train on ``xi_c + REACH kappa`` (its option) from the first iteration, the other
    lane on the nominal kernel."""
    tiny = dict(total_timesteps=64 * 3, n_steps=16, minibatch_size=16, eval_episodes=2, toy_reach=REACH)
    configs = [preset("cartpole", name, **tiny) for name in ("PPO-Lag", "PPO-Lag+toy-upper")]
    assert configs[1].adversary == "toy-upper" and configs[1].robust
    family = make_family(configs)
    assert family.step.methods == ("none", "toy-upper")
    out = jax.jit(jax.vmap(family))(jax.random.split(jax.random.PRNGKey(1), 2), jnp.arange(2))
    params = family.step.default_env_params
    xi = np.asarray(out.metrics["xi"])  # [lane, iteration, *xi]
    np.testing.assert_allclose(xi[0], np.broadcast_to(params.xi, xi[0].shape))
    np.testing.assert_allclose(xi[1], np.broadcast_to(params.xi_c + REACH * params.kappa, xi[1].shape), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out.state.env_xi[1]), np.broadcast_to(params.xi_c + REACH * params.kappa,
                               out.state.env_xi[1].shape), rtol=1e-6)  # fmt: skip
    for bad in (0.0, 1.5):  # its option refused when bad
        with pytest.raises(
            ValueError, match=rf"toy_reach must be in \(0, 1\] \(a share of the half-width\), got {bad}"
        ):
            preset("cartpole", "PPO-Lag+toy-upper", toy_reach=bad)
    with pytest.raises(ValueError, match="toy-upper"):  # the registered method among the choices
        preset("cartpole", "PPO-Lag+no-such-method")
    with pytest.raises(ValueError, match="registered already"):
        adversary.register("toy-upper", UpperCorner)
    with pytest.raises(ValueError, match="built-in"):
        adversary.unregister("dr")
    with pytest.raises(ValueError, match="no robust method 'never-made' is registered; registered: toy-upper"):
        adversary.unregister("never-made")
    for bad in ("", "a,b", "a b", "../up", "x\ny", "p+q"):  # names that go in --algos lists and folder names
        with pytest.raises(ValueError, match="letters, digits"):
            adversary.register(bad, UpperCorner)
    with pytest.raises(ValueError, match="the name of no method"):
        adversary.register("none", UpperCorner)

    class NeedsArgs(UpperCorner):
        def __init__(self, scale):
            self.scale = scale

    with pytest.raises(ValueError, match=r"NeedsArgs\(\) must take no arguments"):
        adversary.register("toy-args", NeedsArgs)


def test_the_size_estimate_reads_a_methods_own_memory_and_fields(registered):
    from rcmdp_jax import sizes

    tiny = dict(total_timesteps=64 * 3, n_steps=16, minibatch_size=16, eval_episodes=2)
    toy, plain = preset("cartpole", "PPO-Lag+toy-upper", **tiny), preset("cartpole", "PPO-Lag", **tiny)
    assert sizes.lane_bytes(toy) - sizes.lane_bytes(plain) == UpperCorner.BYTES
    assert "toy_reach" in sizes.size_fields([toy]) and "toy_reach" not in sizes.size_fields([plain])

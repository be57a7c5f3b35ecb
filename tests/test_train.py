"""make_train: learning, constraints, the adversary, schedules, vmap semantics, presets."""

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax import ALGORITHMS, HParams, envs, make_train, preset
from rcmdp_jax.ltma import ltma_phase
from rcmdp_jax.rollout import episode_values, run_episodes
from rcmdp_jax.train import build_networks

SEEDS = jax.random.split(jax.random.PRNGKey(42), 2)


def tiny(env="cartpole", algo="MDPO-Robust-Lag", iterations=3, **kw):
    """A few iterations (3 by default: enough for state carried between them) on a tiny batch;
    MCPMD keeps its one-episode batch and gets a budget of about ``iterations`` episodes."""
    base = dict(total_timesteps=64 * iterations, n_steps=16, minibatch_size=16, epochs=2,
                ltma_iterations=3, eval_episodes=2, dual_estimator="start_value")  # fmt: skip
    if "MCPMD" in algo:
        episode = envs.REGISTRY[env].episode_length
        base = dict(total_timesteps=episode * iterations, ltma_iterations=3, eval_episodes=2, eval_every=1,
                    dual_estimator="start_value")  # fmt: skip
    base.update(kw)
    return preset(env, algo, **base)


@functools.cache
def _alone_program(cfg):
    return jax.jit(make_train(cfg))


def alone(cfg, key, hp=None, kernel=None):
    """``cfg`` trained alone on seed ``key`` through one compiled program per config for the
    file (several tests compare with it): the hyperparameters and the training kernel are
    its arguments, the preset's unless given."""
    hp = cfg.hparams if hp is None else hp
    kernel = envs.make(cfg.env)[1] if kernel is None else kernel
    return _alone_program(cfg)(key, *jax.tree.map(np.asarray, (hp, kernel)))


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


def test_vmap_over_seeds_equals_each_seed_alone_and_is_deterministic():
    cfg = tiny(algo="MDPO-Robust-Augmented-Lag")  # every phase: dual, LTMA, the augmented rule
    train = make_train(cfg)
    batched = jax.jit(jax.vmap(train))(SEEDS)
    for i in range(len(SEEDS)):
        single = alone(cfg, SEEDS[i])
        for key in ("eval_return", "lam", "xi", "policy_loss"):
            np.testing.assert_allclose(batched.metrics[key][i], single.metrics[key], rtol=1e-4, atol=1e-5)
    again = jax.jit(jax.vmap(train))(SEEDS)
    for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(again)):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(batched.metrics["policy_loss"][0], batched.metrics["policy_loss"][1])


def test_vmap_over_hyperparameters_and_kernels_in_one_call():
    """Lanes that differ in alpha or in the training kernel, in one vmapped call: each lane
    equals its run alone, and each of the two changes the numbers."""
    cfg = tiny(algo="MDPO")
    env, params = envs.make("cartpole")
    corners = jax.tree.map(lambda x: x[-1, :2], env.test_kernels([0.0, 1.0], params))
    alphas, corner = [0.5, 3.0, 0.5], np.array([0, 0, 1])  # lane 1: another alpha; lane 2: another kernel
    hp = jax.tree.map(lambda x: jnp.full((3,), x, jnp.float32), cfg.hparams).replace(alpha=jnp.array(alphas))
    kernels = jax.tree.map(lambda x: x[corner], corners)
    result = jax.jit(jax.vmap(make_train(cfg), in_axes=(None, 0, 0)))(SEEDS[0], hp, kernels)
    np.testing.assert_allclose(result.metrics["alpha"][:, 0], alphas)
    np.testing.assert_allclose(result.state.env_params.xi, kernels.xi)
    for i in range(3):
        single = alone(cfg, SEEDS[0], cfg.hparams.replace(alpha=alphas[i]), jax.tree.map(lambda x, i=i: x[i], kernels))
        for key in ("policy_loss", "episode_costs"):
            np.testing.assert_allclose(result.metrics[key][i], single.metrics[key], rtol=1e-4, atol=1e-5, err_msg=key)
    assert not np.allclose(result.metrics["policy_loss"][0], result.metrics["policy_loss"][1])
    assert not np.allclose(result.metrics["eval_costs"][0], result.metrics["eval_costs"][2])


@pytest.mark.slow
def test_sample_counts():
    cfg = tiny()
    m = preset_member("cartpole", cfg.name)  # its family's lane: its numbers alone (the family test)
    np.testing.assert_allclose(m["policy_steps"], cfg.batch_size * np.arange(1, cfg.num_iterations + 1))
    assert np.all(np.diff(m["dual_steps"]) > 0) and np.all(np.diff(m["ltma_steps"]) > 0)
    assert np.all(np.asarray(m["ltma_steps"][0]) <= cfg.option("ltma_iterations") * cfg.option("ltma_horizon"))


@functools.cache
def preset_families(env_name: str) -> tuple[dict, dict]:
    """Every algorithm of the grid on ``env_name``, ``tiny``, trained as members of its
    family on ``SEEDS[0]`` (one compile per family): ``(configs, {members: result})``.
    Trained once per test run; the preset and the family tests assert on it."""
    from rcmdp_jax.family import group, make_family

    configs = {a: tiny(env_name, a) for a in ALGORITHMS}
    results = {}
    for names in group(configs):
        family = make_family([configs[a] for a in names])
        results[tuple(names)] = jax.jit(jax.vmap(family, in_axes=(None, 0)))(SEEDS[0], jnp.arange(len(names)))
    return configs, results


def preset_member(env_name: str, algo: str) -> dict:
    """The metrics of ``algo``'s lane in ``preset_families(env_name)``."""
    names, result = next((k, r) for k, r in preset_families(env_name)[1].items() if algo in k)
    return {k: np.asarray(v[names.index(algo)]) for k, v in result.metrics.items()}


@pytest.mark.slow
@pytest.mark.parametrize("env_name", envs.ENV_NAMES)
def test_every_preset_compiles_and_runs_without_nans(env_name):
    """Every algorithm of the grid, 3 iterations, trained as members of its family (one
    compile per family; a member's numbers are its algorithm's, see the family test)."""
    assert all(preset(env_name, a).name == a for a in ALGORITHMS)
    pinned = {}
    for names, result in preset_families(env_name)[1].items():
        for i, algo in enumerate(names):
            m = {k: np.asarray(v[i]) for k, v in result.metrics.items()}
            active = m["active"] > 0
            assert active.sum() >= 3, (env_name, algo)
            for key, value in m.items():
                if not key.startswith("eval") and not key.startswith("episode_"):
                    assert np.all(np.isfinite(value[active])), (env_name, algo, key)
            evaluated = np.isfinite(m["eval_return"])
            assert evaluated[0] and np.all(evaluated <= active), (env_name, algo)
            params = jax.tree.map(lambda x, i=i: x[i], result.state.params)
            assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(params)), (env_name, algo)
            pinned[algo] = golden_summary(m, params)
    check_golden(env_name, pinned)


GOLDEN = Path(__file__).with_name("golden") / "presets.json"
GOLDEN_METRICS = ("lam", "lam_tilde", "c_hat", "xi", "policy_loss", "critic_loss", "approx_kl", "alpha",
                  "eval_return", "policy_steps", "dual_steps", "ltma_steps", "dual_updates")  # fmt: skip


def golden_summary(m: dict, params) -> dict:
    """What the golden file pins of one member's short run: the listed metrics of every
    iteration and the L1 norm of each parameter array."""
    out = {k: np.asarray(m[k], np.float64).tolist() for k in GOLDEN_METRICS}
    out["param_l1"] = [float(np.abs(np.asarray(x, np.float64)).sum()) for x in jax.tree.leaves(params)]
    return out


def check_golden(env_name: str, pinned: dict) -> None:
    """Compare with ``golden/presets.json``: pinned numbers, so that a refactor that moves
    any algorithm's numbers beyond float rounding fails. ``RCMDP_WRITE_GOLDEN=1`` rewrites this domain's entry
    (only for a deliberate change of the method, said in the commit)."""
    import json
    import os

    table = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("RCMDP_WRITE_GOLDEN") == "1":
        table[env_name] = pinned
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(table, indent=1, sort_keys=True, allow_nan=True))
        return
    assert env_name in table, f"no golden numbers for {env_name}: run once with RCMDP_WRITE_GOLDEN=1"
    assert sorted(table[env_name]) == sorted(pinned)
    for algo, want in table[env_name].items():
        assert_golden(f"{env_name} {algo}", pinned[algo], want)


def assert_golden(what: str, got: dict, want: dict) -> None:
    """Every pinned number of one run within float rounding of the golden file's."""
    assert sorted(got) == sorted(want), what
    for key, value in want.items():
        np.testing.assert_allclose(
            np.asarray(got[key], np.float64), np.asarray(value, np.float64), rtol=2e-4, atol=2e-5,
            err_msg=f"{what} {key}",
        )  # fmt: skip


def test_the_two_mdpo_ends_alone_keep_their_golden_numbers():
    """The quick tier's guard on the numbers (the slow tier pins every algorithm of every
    domain above): MDPO and MDPO-Robust-Augmented-Lag on CartPole, trained alone through
    the programs the vmap tests compiled; a member's numbers are its algorithm's alone
    (``test_family_member_equals_its_algorithm_alone``)."""
    import json

    table = json.loads(GOLDEN.read_text())["cartpole"]
    for algo in ("MDPO", "MDPO-Robust-Augmented-Lag"):
        result = alone(tiny(algo=algo), SEEDS[0])
        m = {k: np.asarray(v) for k, v in result.metrics.items()}
        assert_golden(f"cartpole {algo} alone", golden_summary(m, result.state.params), table[algo])


def test_presets_follow_the_spec_table():
    c = preset("cartpole", "PPO-Lag")
    assert (c.learner, c.constraint, c.robust, c.epochs, c.hparams.target_kl) == ("ppo", "lagrangian", False, 50, 0.01)
    assert (c.n_envs, c.n_steps, c.minibatch_size, c.total_timesteps) == (4, 400, 32, 20_000)
    c = preset("cartpole", "RMCPMD-Lag", budget="long")
    assert (c.learner, c.robust, c.n_envs, c.n_steps, c.epochs) == ("mcpmd", True, 1, 100, 1)
    assert c.option("ltma_iterations") == 10
    assert (c.dual_epochs, c.dual_steps, c.n_dual_episodes, c.act_dropout) == (1, 1, 1, True)
    assert c.total_timesteps == 200_000 and c.num_iterations * 6 >= 200_000  # slots for the shortest episodes
    c = preset("inventory", "PPO-Lag")
    assert (c.epochs, c.dual_epochs, c.dual_steps, c.dual_epochs_from_policy, c.hparams.alpha_decay) == (
        5,
        5,
        65,
        False,
        0.95,
    )
    c = preset("cartpole", "PPO-Lag")
    assert (c.dual_epochs, c.dual_epochs_from_policy, c.kl_check, c.hparams.alpha_decay) == (50, True, "sb3", 0.99)
    c = preset("inventory", "MDPO-Robust-Augmented-Lag")
    assert (c.constraint, c.option("ltma_iterations"), c.option("ltma_horizon"), c.hparams.eta_xi, c.policy_hidden) == (
        "augmented",
        400,
        40,
        0.1,
        (64,),
    )
    c = preset("inventory3d", "MDPO-Robust")
    assert (c.optimizer, c.policy_hidden, c.total_timesteps) == ("sgd", (128, 128), 40_000)
    assert c.option("ltma_iterations") == 320
    c = preset("inventory3d", "RMCPMD")
    assert (c.option("ltma_iterations"), c.num_iterations, c.optimizer) == (20, 400, "adam")  # method.md §2b: Adam


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(algorithm="MDPO-Robust-Lagrangian"), "unknown algorithm 'MDPO-Robust-Lagrangian'.*MDPO-Robust-Lag"),
        (dict(env="pendulum"), "env='pendulum'.*cartpole, inventory, inventory3d"),
        (dict(budget="huge"), "budget='huge'.*short, long"),
        (dict(lr=-1.0), "lr must be finite and > 0"),
        (dict(minibatch_size=33), "minibatch_size=33 must divide the batch"),
        (dict(learner_rate=1.0), r"unknown config field\(s\) \['learner_rate'\]"),
        (dict(alpha_schedule="cosine"), "alpha_schedule='cosine'.*fixed, linear, restart, geometric"),
        (dict(n_envs=0), "n_envs must be a positive integer"),
    ],
)
def test_bad_config_is_a_clear_error(kwargs, match):
    args = dict(env="cartpole", algorithm="MDPO", budget="short")
    overrides = {k: v for k, v in kwargs.items() if k not in args}
    args.update({k: v for k, v in kwargs.items() if k in args})
    with pytest.raises(ValueError, match=match):
        preset(args["env"], args["algorithm"], args["budget"], **overrides)


def test_bad_hparams_are_rejected_before_tracing():
    train = make_train(tiny(algo="MDPO"))
    with pytest.raises(ValueError, match="gamma must be in"):
        from rcmdp_jax.hparams import validate_hparams

        validate_hparams(HParams(gamma=1.5))
    with pytest.raises(ValueError, match="hparams must be an rcmdp_jax.HParams"):
        train(SEEDS[0], {"lr": 1.0})


@pytest.mark.parametrize("algo", ["PPO-Augmented-Lag", "RMCPMD-Augmented-Lag"])
def test_augmented_mode_works_for_every_learner(algo):
    cfg = tiny(algo=algo)
    assert cfg.constraint == "augmented"
    m = alone(cfg, SEEDS[0]).metrics  # not in the grid: no preset family has it
    active = np.asarray(m["active"]) > 0
    assert all(np.all(np.isfinite(np.asarray(m[k])[active])) for k in ("lam", "lam_tilde", "c_hat", "policy_loss"))
    # lam~_k = lam_{k-1} + eta_lam * C^_{k-1}; lam_k = K_k steps of max(-eta C^_k, lam + eta C^_k)
    eta = cfg.hparams.eta_lam
    lam, c_hat, lam_tilde = (np.asarray(m[k][:, 0])[active] for k in ("lam", "c_hat", "lam_tilde"))
    steps = np.asarray(m["dual_updates"])[active].astype(int)
    assert len(lam) >= 3 and np.all(steps >= 1)
    np.testing.assert_allclose(lam_tilde[1:], lam[:-1] + eta * c_hat[:-1], rtol=1e-5)
    want = []
    for prev, c, k in zip(lam[:-1], c_hat[1:], steps[1:]):
        for _ in range(k):
            prev = max(-eta * c, prev + eta * c)
        want.append(prev)
    np.testing.assert_allclose(lam[1:], want, rtol=1e-5)


@pytest.mark.slow
def test_family_member_equals_its_algorithm_alone():
    """A member of the family program (the preset test's MDPO family on CartPole) gives
    its algorithm's numbers trained alone; the members really differ."""
    from rcmdp_jax.family import group, make_family

    names = ["MDPO", "MDPO-Lag", "MDPO-Robust-Augmented-Lag", "MDPO-Robust"]
    configs = {a: tiny(algo=a) for a in names}
    configs["PPO-Lag"] = tiny(algo="PPO-Lag")
    assert group(configs) == [names, ["PPO-Lag"]]
    presets, results = preset_families("cartpole")
    members, batched = next((list(k), r) for k, r in results.items() if "MDPO" in k)
    assert all(configs[a] == presets[a] for a in names)
    row = {a: members.index(a) for a in names}
    for a in ("MDPO", "MDPO-Robust-Augmented-Lag"):  # the two ends; the others differ only in flags
        single = alone(configs[a], SEEDS[0])
        for key in ("eval_return", "lam", "xi", "policy_loss", "dual_steps", "ltma_steps", "c_hat"):
            got = np.asarray(batched.metrics[key][row[a]])
            np.testing.assert_allclose(got, single.metrics[key], rtol=1e-4, atol=1e-5, err_msg=f"{a} {key}")
    # the members really differ: no LTMA samples without -Robust, no dual samples without -Lag
    steps = np.asarray(batched.metrics["ltma_steps"][:, -1])[[row[a] for a in names]]
    np.testing.assert_array_equal(steps > 0, [False, False, True, True])
    dual = np.asarray(batched.metrics["dual_steps"][:, -1])[[row[a] for a in names]]
    np.testing.assert_array_equal(dual > 0, [False, True, True, False])
    with pytest.raises(ValueError, match="may differ only in"):
        make_family([configs["MDPO"], configs["PPO-Lag"]])

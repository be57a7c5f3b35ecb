"""The PID Lagrangian rule (``constraints/pid.py``), the safety margin, and what they stand on:
plug-in numbers that are traced (swept as lanes of one program, set by name, range-checked) and
a rule's own state in ``DualState.own`` (initialised by the rule, carried, checkpointed and
restored; an older checkpoint without it still restores)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny
from train_helpers import SEEDS

from rcmdp_jax import HParams, checkpoint, constraints, dual, envs, make_family, make_train, preset, sweep
from rcmdp_jax.networks import build_networks
from rcmdp_jax.presets import parse_algorithm, split_variant


def pid_reference(c_hats, s, kp, ki, kd, p_ema, d_ema, lam_init, lam_clip):
    """Stooke et al.'s PID multiplier, by hand: integral projected to [0, lam_clip], EMA-smoothed
    proportional and derivative terms (the derivative only on a rise, none at the first step)."""
    integral, p, d, out = lam_init, None, None, []
    for k, e in enumerate(c_hats):
        p = e if k == 0 else p_ema * p + (1 - p_ema) * e
        d_new = e if k == 0 else d_ema * d + (1 - d_ema) * e
        rise = 0.0 if k == 0 else max(d_new - d, 0.0)
        d = d_new
        integral = min(max(integral + ki * s * e, 0.0), lam_clip)
        out.append(min(max(integral + kp * s * p + kd * s * rise, 0.0), lam_clip))
    return out


def run_rule(name, c_hats, hp, n_steps, lam_init):
    rule = constraints.get(name)
    state = constraints.init_dual(1, lam_init, [rule], hp)
    update = jax.jit(lambda d, c: rule.update(d, c, hp, n_steps))
    lams = []
    for c in c_hats:
        state = update(state, jnp.array([c], jnp.float32))
        lams.append(float(state.lam[0]))
    return lams, state


def test_pid_multiplier_against_a_hand_computation():
    c_hats = [0.5, 2.0, -3.0, -10.0, 1.0, 1.5]  # crosses 0; the big drop projects the integral at 0
    gains = {"pid.kp": 2.0, "pid.ki": 1.0, "pid.kd": 3.0, "pid.p_ema": 0.5, "pid.d_ema": 0.25}
    hp = HParams(eta_lam=0.01, lam_clip=4.0).with_numbers(**gains)
    lams, state = run_rule("pid", c_hats, hp, 10, lam_init=0.2)  # s = 10 * 0.01
    want = pid_reference(c_hats, 0.1, 2.0, 1.0, 3.0, 0.5, 0.25, 0.2, 4.0)
    np.testing.assert_allclose(lams, want, rtol=1e-5, atol=1e-6)
    assert min(want) == 0.0 and 0.0 in lams  # the projection at 0 was reached
    assert float(state.own["pid"]["integral"][0]) >= 0.0


def test_pid_derivative_answers_a_rising_cost_only():
    """A cost that rises, then falls, with the multiplier well inside (0, lam_clip) throughout (no
    projection hides a term): the derivative term adds on the rise and nothing on the fall."""
    c_hats = [1.0, 2.0, 1.0, 0.5, 0.8]
    gains = {"pid.kp": 0.0, "pid.ki": 1.0, "pid.kd": 5.0, "pid.p_ema": 0.0, "pid.d_ema": 0.0}
    hp = HParams(eta_lam=0.01, lam_clip=100.0).with_numbers(**gains)
    lams, _ = run_rule("pid", c_hats, hp, 10, lam_init=5.0)  # s = 0.1
    want = pid_reference(c_hats, 0.1, 0.0, 1.0, 5.0, 0.0, 0.0, 5.0, 100.0)
    np.testing.assert_allclose(lams, want, rtol=1e-5)
    assert 0.0 < min(want) and max(want) < 100.0
    integral = 5.0 + 0.1 * np.cumsum(c_hats)
    np.testing.assert_allclose(want, integral + 5.0 * 0.1 * np.array([0.0, 1.0, 0.0, 0.0, 0.3]), rtol=1e-9)


def test_pid_with_the_integral_term_alone_is_the_plain_rule():
    hp = HParams(eta_lam=0.02, lam_clip=50.0).with_numbers(**{"pid.kp": 0.0, "pid.kd": 0.0})
    c_hats = [0.3, 0.1, -0.2, 0.4]  # lam stays inside (0, clip): no projection differs
    pid, _ = run_rule("pid", c_hats, hp, 5, lam_init=1.0)
    plain, _ = run_rule("lagrangian", c_hats, hp, 5, lam_init=1.0)
    np.testing.assert_allclose(pid, plain, rtol=1e-6)


def _dual_phase(cfg, margin):
    env, params0 = envs.make(cfg.env)
    actor, critic = build_networks(cfg, env)
    obs0 = jnp.zeros((env.obs_dim,))
    params = {"actor": actor.init(jax.random.PRNGKey(1), obs0), "critic": critic.init(jax.random.PRNGKey(2), obs0)}
    hp = jax.tree.map(jnp.float32, cfg.hparams.replace(cost_margin=margin).with_all_numbers())
    state = constraints.init_dual(env.num_constraints, hp.lam_init, [constraints.get(cfg.constraint)], hp)
    code = constraints.code(cfg.constraint)
    return dual.dual_phase(jax.random.PRNGKey(3), env, actor, critic, params, state, params0, cfg, hp, code,
                           jnp.int32(cfg.dual_epochs))  # fmt: skip


@pytest.mark.parametrize("rule", ["lagrangian", "pid"])
def test_the_margin_shifts_the_duals_target_and_nothing_else(rule):
    """With margin delta the rule reads C^ + delta: the same samples, the same steps, and the
    multipliers of a run without a margin whose estimates were delta higher."""
    cfg = preset("cartpole", "PPO-Lag", constraint=rule, dual_estimator="start_value", n_dual_episodes=2)
    (d0, n0, k0), (d1, n1, k1) = _dual_phase(cfg, 0.0), _dual_phase(cfg, 0.3)
    assert float(n0) == float(n1) and int(k0) == int(k1)
    np.testing.assert_allclose(d1.c_hat, d0.c_hat + 0.3, rtol=1e-6)
    hp = jax.tree.map(jnp.float32, cfg.hparams.with_all_numbers())
    r = constraints.get(rule)
    start = constraints.init_dual(1, hp.lam_init, [r], hp)
    want = r.update(start, d0.c_hat + 0.3, hp, k0)
    np.testing.assert_allclose(d1.lam, want.lam, rtol=1e-6)
    assert float(d1.lam[0]) > float(d0.lam[0])  # a higher reading: a higher multiplier


def test_margin_refused_when_negative():
    with pytest.raises(ValueError, match="cost_margin must be a finite number >= 0"):
        preset("cartpole", "PPO-Lag", cost_margin=-0.1)


def test_algorithm_names_and_numbers_from_the_registries():
    assert parse_algorithm("PPO-Robust-PID-Lag") == ("ppo", "pid", True)
    assert parse_algorithm("RMCPMD-PID-Lag") == ("mcpmd", "pid", True)
    with pytest.raises(ValueError, match="-PID-Lag"):
        parse_algorithm("PPO-PID")  # a rule's part needs -Lag
    assert split_variant("PPO-PID-Lag@pid.kp=2") == ("PPO-PID-Lag", {"pid.kp": 2.0})
    cfg = preset("cartpole", "PPO-PID-Lag@pid.kp=2", **{"pid.kd": 0.5})
    assert cfg.hparams.numbers() == {"pid.kd": 0.5, "pid.kp": 2.0}
    assert cfg.hparams.number("pid.ki") == 1.0  # its default
    with pytest.raises(ValueError, match=r"pid\.kp must be a finite number >= 0"):
        preset("cartpole", "PPO-PID-Lag", **{"pid.kp": -1.0})
    with pytest.raises(ValueError, match=r"pid\.d_ema must be a number in \[0, 0.99\]"):
        preset("cartpole", "PPO-PID-Lag", **{"pid.d_ema": 1.0})
    with pytest.raises(ValueError, match="unknown config field.*pid.nope"):
        preset("cartpole", "PPO-PID-Lag", **{"pid.nope": 1.0})


@pytest.fixture(scope="module")
def pid_family():
    """PPO-Lag and two PPO-PID-Lag lanes (kp swept) in one program, 3 iterations, 2 seeds."""
    cfgs = [tiny(algo="PPO-Lag"), tiny(algo="PPO-PID-Lag@pid.kp=0"), tiny(algo="PPO-PID-Lag@pid.kp=20")]
    family = make_family(cfgs)
    members = jnp.repeat(jnp.arange(3), 2)
    keys = jnp.concatenate([SEEDS] * 3)
    return cfgs, jax.jit(jax.vmap(family))(keys, members)


def test_the_family_carries_the_pid_state_and_its_lanes_differ(pid_family):
    cfgs, result = pid_family
    own = result.state.dual.own["pid"]
    assert set(own) == {"integral", "p", "d", "seen"} and own["integral"].shape == (6, 1)
    np.testing.assert_array_equal(own["seen"][2:], 1.0)  # the PID lanes ran their update
    lam = np.asarray(result.metrics["lam"])[..., 0]  # [lane, iteration]
    assert not np.allclose(lam[2:4], lam[4:6])  # kp moved the multiplier


def test_a_swept_number_gives_what_separate_runs_give(pid_family):
    """``sweep`` over ``pid.kp`` as lanes of one program = each value trained alone."""
    cfgs, family_result = pid_family
    base = cfgs[1]
    lanes = sweep(base, **{"pid.kp": [0.0, 20.0]})
    swept = jax.jit(jax.vmap(make_train(base), in_axes=(None, 0)))(SEEDS[0], lanes)
    for i in range(2):  # kp 0, then 20
        alone = family_result.metrics["lam"][2 + 2 * i]  # the family's lane of this kp, seed 0
        np.testing.assert_allclose(swept.metrics["lam"][i], alone, rtol=1e-5, atol=1e-6)


def test_the_rule_state_is_checkpointed_and_a_resume_continues_it(tmp_path):
    cfg = tiny(algo="PPO-PID-Lag", iterations=4)
    train = make_train(cfg)
    whole = jax.jit(train)(SEEDS[0])
    chunk = jax.jit(lambda s, start: train.run(s, None, start, 2)[0])  # both halves: one program, as the runner's
    state = chunk(jax.jit(train.init)(SEEDS[0]), 0)
    checkpoint.save(tmp_path / "ckpt", state)
    restored = checkpoint.restore(tmp_path / "ckpt", jax.eval_shape(lambda: state))
    np.testing.assert_array_equal(restored.dual.own["pid"]["integral"], state.dual.own["pid"]["integral"])
    rest = chunk(restored, 2)
    for a, b in zip(jax.tree.leaves(rest.dual), jax.tree.leaves(whole.state.dual)):
        np.testing.assert_array_equal(a, b)


def test_an_older_checkpoint_without_rule_state_restores(tmp_path):
    """A train state saved before ``DualState.own`` existed (no such key) restores into today's
    tree of a program without a stateful rule; one that needs a missing state is refused."""
    old = {"dual": {"lam": jnp.ones(2), "c_hat": jnp.zeros(2)}, "x": [jnp.arange(3.0)]}
    checkpoint.save(tmp_path / "old", old)
    today = {"dual": constraints.DualState(lam=jnp.ones(2), c_hat=jnp.zeros(2)), "x": [jnp.arange(3.0)]}
    back = checkpoint.restore(tmp_path / "old", jax.eval_shape(lambda: today))
    np.testing.assert_array_equal(back["dual"].lam, np.ones(2))
    assert back["dual"].own == {}
    needs = {**today, "dual": today["dual"].replace(own={"pid": {"integral": jnp.ones(2)}})}
    with pytest.raises(ValueError):
        checkpoint.restore(tmp_path / "old", jax.eval_shape(lambda: needs))


def test_the_margin_a_run_trains_with_is_said():
    from rcmdp_jax import preset
    from rcmdp_jax.study.notes import margin_notes

    pend = [preset("gymnax:Pendulum-v1", a) for a in ("PPO-Lag@cost_margin=3", "PPO-Lag+dr@margin_z=0")]
    fixed, data = margin_notes(pend)  # a fixed margin, and the data margin (a lane set back to none: not named)
    assert "PPO-Lag@cost_margin=3 train(s) to C <= -3 " in fixed and "dr" not in fixed
    assert "PPO-Lag@cost_margin=3 train(s) to C <= -2 sigma_j / sqrt(100)" in data and "dr" not in data
    assert margin_notes([preset("cartpole", "PPO-Lag")]) == []  # the study's domains train to the limit

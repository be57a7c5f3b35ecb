"""Exact unit tests of the math against hand-worked numbers and plain NumPy loops."""

import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax import constraints, schedules
from rcmdp_jax.advantages import discounted_returns, gae
from rcmdp_jax.constraints.augmented import augmented_step
from rcmdp_jax.constraints.lagrangian import lagrangian_step
from rcmdp_jax.hparams import HParams
from rcmdp_jax.losses import mdpo_loss, ppo_loss, reference_kl


def test_lagrangian_dual_step_sequence():
    # one step: lam <- clip(lam + eta * C, 0, clip), eta = 1e-3
    lam = jnp.array([5.0])
    seq = []
    for c in (50.0, -6000.0, 500.0):
        lam = lagrangian_step(lam, jnp.array([c]), 1e-3, 50.0)
        seq.append(float(lam[0]))
    # 5 + 0.05 = 5.05; 5.05 - 6 -> clipped to 0; 0 + 0.5 = 0.5
    np.testing.assert_allclose(seq, [5.05, 0.0, 0.5], atol=1e-6)
    top = lagrangian_step(jnp.array([49.9]), jnp.array([500.0]), 1e-3, 50.0)
    assert float(top[0]) == pytest.approx(50.0)


def test_augmented_dual_update_sequence():
    # lam <- max(-eta C, lam + eta C), eta = 0.1, no clipping
    lam = jnp.array([1.0])
    seq = []
    for c in (2.0, -20.0, -5.0, 600.0):
        lam = augmented_step(lam, jnp.array([c]), 0.1)
        seq.append(float(lam[0]))
    # max(-0.2, 1.2) = 1.2; max(2, -0.8) = 2; max(0.5, 1.5) = 1.5; max(-60, 61.5) = 61.5
    np.testing.assert_allclose(seq, [1.2, 2.0, 1.5, 61.5], rtol=1e-6)


def test_effective_multiplier_and_dual_step():
    dual = constraints.DualState(lam=jnp.array([2.0, 3.0]), c_hat=jnp.array([10.0, -4.0]))
    np.testing.assert_allclose(constraints.get("none").multiplier(dual, HParams(eta_lam=0.5)), [0.0, 0.0])
    np.testing.assert_allclose(constraints.get("lagrangian").multiplier(dual, HParams(eta_lam=0.5)), [2.0, 3.0])
    np.testing.assert_allclose(constraints.get("augmented").multiplier(dual, HParams(eta_lam=0.5)), [7.0, 1.0])
    hp = HParams(eta_lam=0.5, lam_clip=6.0)
    out = constraints.get("lagrangian").update(dual, jnp.array([1.0, -1.0]), hp, 2)
    np.testing.assert_allclose(out.lam, [3.0, 2.0])  # two steps of +-0.5
    out = constraints.get("lagrangian").update(dual, jnp.array([1.0, -1.0]), hp, 10)
    np.testing.assert_allclose(out.lam, [6.0, 0.0])  # clipped at lam_clip and at 0 on the way
    np.testing.assert_allclose(out.c_hat, [1.0, -1.0])


def _alphas(kind, ticks, total, alpha0=2.0, decay=0.9, restart_at=None):
    st = schedules.init_schedule()
    out = []
    for k in range(ticks):
        if restart_at is not None and k == restart_at:
            st = schedules.maybe_restart(st, jnp.bool_(True))
        out.append(float(schedules.alpha_value(schedules.code(kind), st, alpha0, decay, total)))
        st = schedules.advance(st)
    return out


def test_alpha_schedules_by_hand():
    np.testing.assert_allclose(_alphas("fixed", 3, 4), [2.0, 2.0, 2.0])
    # alpha0 / (1 - k/K), K = 4
    np.testing.assert_allclose(_alphas("linear", 4, 4), [2.0, 8 / 3, 4.0, 8.0], rtol=1e-6)
    # restart at k' = 2: alpha0 / (1 - (k - 2) / (4 - 2))
    np.testing.assert_allclose(_alphas("restart", 4, 4, restart_at=2), [2.0, 8 / 3, 2.0, 4.0], rtol=1e-6)
    # alpha_k = alpha_{k-1} * 0.9 from 5
    np.testing.assert_allclose(_alphas("geometric", 4, 4, alpha0=5.0), [5.0, 4.5, 4.05, 3.645], rtol=1e-6)
    # a no-op restart keeps the linear sequence
    st = schedules.maybe_restart(schedules.advance(schedules.init_schedule()), jnp.bool_(False))
    assert int(st.restart_tick) == 0


def numpy_gae(r, v, nv, term, done, gamma, lam):
    T = len(r)
    adv = np.zeros(T)
    last = 0.0
    for t in reversed(range(T)):
        nonterminal = 0.0 if term[t] else 1.0
        delta = r[t] + gamma * nv[t] * nonterminal - v[t]
        last = delta + gamma * lam * (0.0 if done[t] else 1.0) * last
        adv[t] = last
    return adv


def test_gae_matches_numpy_with_truncation_and_termination():
    rng = np.random.default_rng(0)
    T, B, K = 12, 3, 2
    r = rng.normal(size=(T, B, K)).astype(np.float32)
    v = rng.normal(size=(T, B, K)).astype(np.float32)
    nv = rng.normal(size=(T, B, K)).astype(np.float32)
    term = np.zeros((T, B), bool)
    trunc = np.zeros((T, B), bool)
    term[3, 0] = True
    trunc[7, 1] = True  # truncation bootstraps with nv
    term[5, 2] = trunc[9, 2] = True
    done = term | trunc
    adv, ret = gae(jnp.array(r), jnp.array(v), jnp.array(nv), jnp.array(term), jnp.array(done), 0.9, 0.8)
    for b in range(B):
        for k in range(K):
            ref = numpy_gae(r[:, b, k], v[:, b, k], nv[:, b, k], term[:, b], done[:, b], 0.9, 0.8)
            np.testing.assert_allclose(adv[:, b, k], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, np.asarray(adv) + v, rtol=1e-6)
    # a truncated step's delta uses the bootstrap value, a terminated one does not
    assert float(adv[7, 1, 0]) == pytest.approx(r[7, 1, 0] + 0.9 * nv[7, 1, 0] - v[7, 1, 0], rel=1e-5)
    assert float(adv[3, 0, 0]) == pytest.approx(r[3, 0, 0] - v[3, 0, 0], rel=1e-5)


def test_discounted_returns_by_hand():
    r = jnp.array([1.0, 2.0, 3.0, 4.0])
    done = jnp.array([False, True, False, False])
    # G = [1 + 0.5 * 2, 2, 3 + 0.5 * 4, 4]
    np.testing.assert_allclose(discounted_returns(r, done, 0.5), [2.0, 2.0, 5.0, 4.0])


def test_policy_losses_by_hand():
    log_ratio = jnp.log(jnp.array([0.5, 1.0, 1.5]))
    adv = jnp.array([1.0, -2.0, 2.0])
    # PPO: min(rho A, clip(rho) A) = [min(.5, .8), -2, min(3, 2.4)] -> mean 0.3
    assert float(ppo_loss(log_ratio, adv, 0.2)) == pytest.approx(-(0.5 - 2.0 + 2.4) / 3, rel=1e-6)
    kl = reference_kl(log_ratio)
    np.testing.assert_allclose(kl, [0.5 - 1 - np.log(0.5), 0.0, 0.5 - np.log(1.5)], rtol=1e-5)
    expected = -((0.5 - 2.0 + 3.0) / 3 - 2.0 * np.mean([-0.5 + np.log(2), 0.0, 0.5 - np.log(1.5)]))
    assert float(mdpo_loss(log_ratio, adv, kl, 2.0)) == pytest.approx(expected, rel=1e-5)

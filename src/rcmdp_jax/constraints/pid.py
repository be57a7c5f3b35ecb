"""``pid``: the PID Lagrangian (Stooke, Achiam & Abbeel 2020, *Responsive Safety in RL by PID
Lagrangian Methods*; docs/method.md §2a.4). Gradient ascent on ``lam`` is an integral controller
alone: ``lam`` lags the constraint, so the learner overshoots the limit, then undershoots, and
ends about half its seeds just above it. The PID rule adds a proportional term, which answers a
violation at once, and a derivative term, which answers a rising cost before it breaks the limit:

    e_k    = C^_k                                   (the reading, the margin in it: dual.reading)
    I_k    = clip(I_{k-1} + ki * s * e_k, 0, lam_clip)
    P_k    = EMA_p(e)_k                             (EMA with factor p_ema; 0: e_k itself)
    D_k    = max(0, EMA_d(e)_k - EMA_d(e)_{k-1})     (0 at the first iteration)
    lam_k  = clip(I_k + kp * s * P_k + kd * s * D_k, 0, lam_clip)

once per iteration on the dual batch's ``C^``. ``s = K * eta_lam`` is what the plain rule's ``K``
ascent steps move ``lam`` per unit of ``C^`` in one iteration, so the gains are in the plain rule's
units: ``ki = 1, kp = kd = 0`` is gradient ascent with the iteration's mean estimate, ``kp = 10`` a
proportional term worth ten iterations of it. ``I`` starts at ``lam_init``. Its gains and
smoothing are traced numbers of its own (``pid.kp`` ...), its state ``DualState.own["pid"]``.
"""

from __future__ import annotations

import jax.numpy as jnp

from rcmdp_jax.constraints.base import Rule
from rcmdp_jax.plugin import Number


def pid_step(state: dict, e, s, kp, ki, kd, p_ema, d_ema, lam_clip):
    """One PID update from the violation ``e`` ``(m,)`` and the scale ``s``: ``(new state, lam)``.
    ``state``: ``integral``, ``p`` and ``d`` (the EMAs of ``e``) and ``seen`` (0 before the first)."""
    first = state["seen"] == 0.0
    p = jnp.where(first, e, p_ema * state["p"] + (1.0 - p_ema) * e)
    d = jnp.where(first, e, d_ema * state["d"] + (1.0 - d_ema) * e)
    rise = jnp.where(first, 0.0, jnp.maximum(d - state["d"], 0.0))
    integral = jnp.clip(state["integral"] + ki * s * e, 0.0, lam_clip)
    lam = jnp.clip(integral + kp * s * p + kd * s * rise, 0.0, lam_clip)
    return dict(integral=integral, p=p, d=d, seen=jnp.ones_like(state["seen"])), lam


class PID(Rule):
    name = "pid"
    suffix = "PID"
    numbers = {
        "kp": Number(10.0, 0.0, what="proportional gain, in iterations of the plain rule's step"),
        "ki": Number(1.0, 0.0, what="integral gain (1: the plain rule's step)"),
        "kd": Number(0.0, 0.0, what="derivative gain on a rising cost"),
        "p_ema": Number(0.0, 0.0, 0.99, what="EMA factor of the proportional term's C^"),
        "d_ema": Number(0.5, 0.0, 0.99, what="EMA factor of the derivative term's C^"),
    }

    def init_state(self, m, lam, hp):
        zeros = jnp.zeros((m,), jnp.float32)
        return dict(integral=lam, p=zeros, d=zeros, seen=jnp.float32(0.0))

    def update(self, dual, c_hat, hp, n_steps, estimates=None):
        n = lambda k: hp.number(f"{self.name}.{k}")
        s = jnp.asarray(n_steps, jnp.float32) * hp.eta_lam
        own, lam = pid_step(dual.own[self.name], c_hat, s, n("kp"), n("ki"), n("kd"), n("p_ema"), n("d_ema"),
                            hp.lam_clip)  # fmt: skip
        return dual.replace(lam=lam, c_hat=c_hat, own={**dual.own, self.name: own})

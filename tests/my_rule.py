"""An example plug-in file (docs/design.md, "Plug-ins"): a constraint rule that keeps a state
of its own and has a traced gain, registered when the file is imported.

    rcmdp --plugins tests/my_rule.py --algos PPO-MyRule-Lag@myrule.gain=1,PPO-MyRule-Lag@myrule.gain=5

The rule ascends ``lam`` along a smoothed violation: ``m_k`` is the running mean of the last two
dual phases' ``C^`` (``C^`` itself at the first), and each iteration moves
``lam <- clip(lam + gain * K * eta_lam * m_k, 0, lam_clip)`` (``K`` the phase's ascent steps, so
``gain = 1`` is the plain rule's step on ``m_k``). ``m`` and the number of phases seen are its
state (``DualState.own["myrule"]``); ``gain`` is a traced number (``myrule.gain``), so a sweep of
it is lanes of one compiled program.
"""

import jax.numpy as jnp

from rcmdp_jax import constraints
from rcmdp_jax.plugin import Number


class MyRule(constraints.Rule):
    suffix = "MyRule"  # the algorithms PPO-MyRule-Lag, MDPO-Robust-MyRule-Lag, ...
    numbers = {"gain": Number(1.0, 0.0, what="the step on the smoothed violation, in plain steps")}

    def init_state(self, m, lam, hp):
        return {"smooth": jnp.zeros((m,), jnp.float32), "seen": jnp.float32(0.0)}

    def update(self, dual, c_hat, hp, n_steps, estimates=None):
        own = dual.own[self.name]
        smooth = jnp.where(own["seen"] == 0.0, c_hat, 0.5 * (own["smooth"] + c_hat))
        step = hp.number(f"{self.name}.gain") * jnp.asarray(n_steps, jnp.float32) * hp.eta_lam
        lam = jnp.clip(dual.lam + step * smooth, 0.0, hp.lam_clip)
        mine = {"smooth": smooth, "seen": own["seen"] + 1.0}
        return dual.replace(lam=lam, c_hat=c_hat, own={**dual.own, self.name: mine})


constraints.register("myrule", MyRule)

"""Divergence: a trained seed whose parameters, multipliers, kernel or losses are not
finite is *diverged*; it is reported and kept out of every statistic, never shown
as a result."""

from __future__ import annotations

import jax
import numpy as np

# per-iteration metrics that must be finite on every iteration that ran
CHECKED_METRICS = ("policy_loss", "critic_loss", "lam", "xi", "c_hat")
# A finite blow-up counts as divergence too: a loss, multiplier or constraint estimate
# beyond this magnitude. The domains' returns and costs are at most ~1e4 per episode (so
# losses ~1e8); lr=1e6 gives critic losses ~1e31, eta_lam=1e30 multipliers ~1e32.
BLOW_UP = 1e12


def _all_finite_per_seed(tree, n_seeds: int) -> np.ndarray:
    ok = np.ones(n_seeds, bool)
    for leaf in jax.tree.leaves(tree):
        x = np.asarray(leaf)
        if x.dtype.kind == "f" and x.ndim >= 1 and x.shape[0] == n_seeds:
            ok &= np.isfinite(x.reshape(n_seeds, -1)).all(axis=1)
    return ok


def diverged_seeds(result, config=None) -> np.ndarray:
    """``(seeds,)`` bool: True where a seed of a vmapped ``TrainResult`` has a non-finite
    parameter, optimizer state, multiplier or kernel, or a non-finite loss, ``lam``,
    ``xi`` or ``C^`` on an iteration that ran (MCPMD's idle slots are NaN by design), or
    one beyond ``BLOW_UP`` in magnitude; with its ``config``, a constrained one's unclipped
    multiplier step ``eta_lam * C^`` beyond ``BLOW_UP`` too (the clip hides it)."""
    n = np.asarray(result.metrics["lam"]).shape[0]
    state = result.state
    ok = _all_finite_per_seed((state.params, state.opt_state, state.dual, state.env_params.xi), n)
    active = np.asarray(result.metrics["active"]) > 0 if "active" in result.metrics else None
    for key in CHECKED_METRICS:
        x = np.asarray(result.metrics[key])
        x = x.reshape(n, x.shape[1], -1)
        finite = (np.isfinite(x) & (np.abs(x) <= BLOW_UP)).all(axis=2)
        if active is not None:
            finite |= ~active
        ok &= finite.all(axis=1)
    if "valid_input" in result.metrics:  # hyperparameters or kernel out of range (traced values)
        ok &= (np.asarray(result.metrics["valid_input"]).reshape(n, -1) > 0).all(axis=1)
    if config is not None and config.constrained:
        c_hat = np.abs(np.asarray(result.metrics["c_hat"], np.float64))
        step = c_hat.reshape(n, c_hat.shape[1], -1).max(-1) * abs(float(config.hparams.eta_lam))
        ok &= ~((step > BLOW_UP) & (True if active is None else active)).any(axis=1)
    return ~ok


def nonfinite_episodes(V: np.ndarray, C: np.ndarray) -> np.ndarray:
    """``(seeds,)`` bool: seeds of a robustness sweep with any non-finite episode result."""
    V, C = np.asarray(V), np.asarray(C)
    n = V.shape[0]
    return ~(np.isfinite(V.reshape(n, -1)).all(1) & np.isfinite(C.reshape(n, -1)).all(1))

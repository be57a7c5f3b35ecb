"""The ``Rule`` protocol of a constraint rule (docs/method.md §2a.4) and what every rule shares:
the dual state, the Lagrangian reward and the loop of ascent steps."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from rcmdp_jax.plugin import Plugin


@struct.dataclass
class DualState:
    """The dual variables every rule keeps (one shape, so the rules of a family share a program),
    and ``own``: the state of the program's rules that keep one (``Rule.init_state``), by the
    rule's registered name (empty when none does)."""

    lam: jax.Array  # (m,) Lagrange multipliers
    c_hat: jax.Array  # (m,) last estimate of the constraint values the rule read (C^ + margin)
    own: dict = struct.field(default_factory=dict)
    # (m,) the margin the rule last read C^ with (``dual.margin_of``: cost_margin + the data margin)
    margin: jax.Array | None = None
    # (3, m) the running moments of the dual's whole episodes' C (``dual.track_spread``)
    spread: jax.Array | None = None


def init_dual(m: int, lam_init: jax.Array, rules=(), hp=None) -> DualState:
    """``lam = lam_init`` on every constraint, ``C^ = 0``; ``rules``: the program's rules (``Rule``
    instances), each that keeps a state of its own gets ``own[rule.name] = rule.init_state(...)``."""
    lam = jnp.full((m,), lam_init, jnp.float32)
    own = {r.name: s for r in rules if (s := r.init_state(m, lam, hp)) is not None}
    zeros = jnp.zeros((m,), jnp.float32)
    return DualState(lam=lam, c_hat=zeros, own=own, margin=zeros, spread=jnp.zeros((3, m), jnp.float32))


def lagrangian_reward(reward: jax.Array, costs: jax.Array, lam_tilde: jax.Array) -> jax.Array:
    """The Lagrangian reward ``r - lam~ . c`` (docs/method.md §2a): ``reward [...]``, ``costs
    [..., m]`` -> ``[...]``. The learners' signal; the adversary's cost is its negation."""
    return reward - costs @ lam_tilde


def lagrangian_cost(reward: jax.Array, costs: jax.Array, lam_tilde: jax.Array) -> jax.Array:
    """The Lagrangian cost ``lam~ . c - r``, the reward negated (docs/method.md §2c): what
    every robust method ascends, on a step (``reward``, ``costs``) or on an episode's values
    (``V``, ``C``); higher is worse for the learner."""
    return -lagrangian_reward(reward, costs, lam_tilde)


def ascent(step, lam: jax.Array, n_steps, estimates: jax.Array | None = None) -> jax.Array:
    """``n_steps`` applications of ``step(lam, c)`` (``n_steps`` may be traced): with
    ``estimates = None`` every step sees the same ``c`` (``step`` ignores it); else step
    ``i`` sees ``estimates[i]`` (``[K_max, m]``, steps past ``n_steps`` are skipped)."""
    if estimates is None:
        return jax.lax.fori_loop(0, n_steps, lambda _, x: step(x, None), lam)

    def body(x, ic):
        i, c = ic
        return jnp.where(i < n_steps, step(x, c), x), None

    return jax.lax.scan(body, lam, (jnp.arange(estimates.shape[0]), estimates))[0]


class Rule(Plugin):
    """A constraint rule: ``multiplier`` (the ``lam~`` the learner and the adversary see)
    and ``update`` (the dual phase of one iteration). A rule that keeps the default
    ``update`` writes only ``step``, one ascent step on ``lam``. ``dual``: whether the
    rule runs a dual phase (its steps are counted and its samples spent). Made with the
    program's config (``self.cfg``, None outside a program); its options, checks and memory
    needs: ``rcmdp_jax.plugin.Plugin`` (read ``self.cfg.option(name)``)."""

    name = ""
    dual = True
    # the rule's part of an algorithm's name, ``PPO-<suffix>-Lag`` ("": plain ``-Lag``; None: not
    # named by one, e.g. ``none``, which is an algorithm without ``-Lag``)
    suffix: str | None = None

    def __init__(self, cfg=None):
        self.cfg = cfg

    def init_state(self, m: int, lam: jax.Array, hp):
        """The rule's own state before the first iteration (a pytree of arrays; ``m`` constraints,
        ``lam`` the first multipliers), kept in ``DualState.own[self.name]``, carried, checkpointed
        and resumed with the train state; None (the default): the rule keeps none."""
        return None

    def multiplier(self, dual: DualState, hp) -> jax.Array:
        return dual.lam

    def step(self, lam: jax.Array, c_hat: jax.Array, hp) -> jax.Array:
        raise NotImplementedError

    def update(self, dual: DualState, c_hat: jax.Array, hp, n_steps, estimates: jax.Array | None = None) -> DualState:
        """``n_steps`` ascent steps (``K = dual_epochs x ceil(dual_batch / dual_minibatch)``,
        may be traced), each with the batch estimate ``c_hat`` or, given ``estimates``
        (``[K_max, m]``), step ``i`` with its minibatch's ``estimates[i]``; ``c_hat`` is
        stored for the next ``lam~``. Both are the dual phase's one reading (``dual.reading``:
        the margin already in them); a rule that overrides ``update`` reads the same."""

        def one(lam, e):
            return self.step(lam, c_hat if e is None else e, hp)

        return dual.replace(lam=ascent(one, dual.lam, n_steps, estimates), c_hat=c_hat)

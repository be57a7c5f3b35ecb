"""Named presets: four gymnax classic-control environments made robust and constrained,
and the ``gymnax:`` environment names that select them.

A name is ``gymnax:ID`` (the preset's box and default cost), optionally followed by
``@uncertain=FIELD:WIDTH,...`` (the box: a relative half-width such as ``g:0.2`` for
±20 %, or ``g:abs:1.5`` for an absolute one) and ``@costs=NAME,...`` (a choice of the
preset's costs) and ``@noise=STD,...`` (the kernel's std: one number, or one per state
entry; default the preset's, 1e-3 for an id without a preset). ``gymnax_name`` writes the canonical form; ``make_gymnax`` builds the
environment; ``domain_spec`` gives the name's ``DomainSpec``. Each preset also carries the
learners' settings (``learner``, a ``LearnerSpec``) and the robustness test's episodes per kernel.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from rcmdp_jax.envs import GYMNAX_PREFIX as PREFIX
from rcmdp_jax.envs import gymnax_any
from rcmdp_jax.envs.domain import DomainSpec, LearnerSpec, learner_spec
from rcmdp_jax.envs.gymnax_inputs import (
    QUOTE_HINT,
    check_cost_items,
    name_option,
    parse_noise,
    parse_width,
    repeated_cost,
    with_options,
)


@dataclasses.dataclass(frozen=True)
class CostSpec:
    """A built-in cost: ``fn(state, action, next_state, params) -> (1,)`` and what it means."""

    fn: Callable
    meaning: str


@dataclasses.dataclass(frozen=True)
class GymnaxPreset:
    env_id: str
    uncertain: dict[str, Any]  # the default box: field -> relative half-width
    costs: dict[str, CostSpec]
    default_costs: tuple[str, ...]
    noise: float | tuple[float, ...]  # the kernel's std, on every state entry or one per entry
    params: dict[str, Any]  # EnvParams overrides (the episode length)
    gamma: float
    lambda_max: float
    learner: LearnerSpec
    n_test: int = 20
    derive: Callable | None = None
    min_episode_length: int | None = None


def _cost(expr: Callable[..., Any]) -> Callable:
    def fn(state, action, next_state, params):
        return jnp.reshape(expr(state, action, next_state, params), (1,))

    return fn


def _learner(budgets: dict[str, int], lr: float, eta_xi: float, **kept) -> LearnerSpec:
    """A preset's learner settings: what differs from ``LearnerSpec``'s defaults (the same
    table for every preset; docs/gymnax_envs.md says how it was chosen); ``kept``: other
    settings (``n_dual_episodes``; docs/budgets.md). The margin is the data margin every
    environment outside the study gets (``envs.domain.MARGIN_Z``)."""
    return learner_spec(dict(budgets=budgets, hp=dict(lr=lr, eta_xi=eta_xi), **kept))


PRESETS: dict[str, GymnaxPreset] = {
    "CartPole-v1": GymnaxPreset(
        env_id="CartPole-v1",
        uncertain={"gravity": 0.2, "masspole": 0.5, "length": 0.2, "force_mag": 0.2},
        costs={
            "position": CostSpec(
                _cost(lambda s, a, n, p: jnp.abs(n.x) - 0.1), "cart within 0.1 m of the track's centre: |x| - 0.1"
            ),
            "velocity": CostSpec(
                _cost(lambda s, a, n, p: jnp.abs(n.x_dot) - 0.5), "cart speed under 0.5 m/s: |x_dot| - 0.5"
            ),
        },  # fmt: skip
        default_costs=("position",),
        noise=1e-3,
        params=dict(max_steps_in_episode=200),
        gamma=0.99,
        lambda_max=50.0,
        derive=gymnax_any.cartpole_derive,
        min_episode_length=6,
        # short: where PPO-Lag has converged by docs/budgets.md's rule (800k of the grid's 25k..1.6M)
        learner=_learner({"quick": 20_000, "short": 800_000, "long": 1_600_000}, lr=3e-4, eta_xi=1e-7),
    ),
    "Pendulum-v1": GymnaxPreset(
        env_id="Pendulum-v1",
        # ±10 %: the widest of the boxes tried where the speed limit can be kept on every kernel
        # (`rcmdp feasibility`, docs/gymnax_envs.md); at ±20 % gravity beats the motor on the
        # heavy, long corner and no policy found keeps it (least worst C +3.27)
        uncertain={"g": 0.1, "m": 0.1, "l": 0.1},
        costs={
            "speed": CostSpec(
                _cost(lambda s, a, n, p: jnp.abs(n.theta_dot) - 1.5), "angular speed under 1.5 rad/s: |theta_dot| - 1.5"
            ),
            "torque": CostSpec(
                _cost(lambda s, a, n, p: jnp.clip(a, -p.max_torque, p.max_torque).sum() ** 2 - 1.0),
                "mean squared torque under 1 (N m)^2, an actuator budget: u^2 - 1",
            ),
        },  # fmt: skip
        default_costs=("speed",),
        noise=(1e-2, 1e-2, 0.0),  # theta, theta_dot; last_u (the applied torque) is not physics: no noise
        params=dict(max_steps_in_episode=200),
        gamma=0.95,
        lambda_max=50.0,
        # short: where PPO-Lag has converged by docs/budgets.md's rule (800k of the grid's 25k..1.6M)
        # kept with confidence (docs/budgets.md): 100 test episodes (the data margin 2 sigma / sqrt(100)
        # follows; sigma ~ 14.7 gives the 3 once set by hand), 16 episodes for the dual's C^
        learner=_learner({"quick": 60_000, "short": 800_000, "long": 1_600_000}, lr=1e-3, eta_xi=1e-7,
                         n_dual_episodes=16),
        n_test=100,
    ),
    "Acrobot-v1": GymnaxPreset(
        env_id="Acrobot-v1",
        uncertain={"link_mass_1": 0.2, "link_mass_2": 0.2, "link_length_1": 0.2},
        costs={
            "torque": CostSpec(
                _cost(lambda s, a, n, p: jnp.abs(p.available_torque[a]) - 0.5),
                "the motor on at most half the time: |torque| - 0.5",
            ),
            "speed": CostSpec(
                _cost(lambda s, a, n, p: jnp.abs(n.velocity_2) - 3.0),
                "second joint's speed under 3 rad/s: |omega_2| - 3",
            ),
        },  # fmt: skip
        default_costs=("torque",),
        noise=1e-2,
        params=dict(max_steps_in_episode=200),
        gamma=0.99,
        lambda_max=50.0,
        min_episode_length=4,
        learner=_learner({"short": 40_000, "long": 400_000}, lr=1e-3, eta_xi=1e-6),
    ),
    "MountainCarContinuous-v0": GymnaxPreset(
        env_id="MountainCarContinuous-v0",
        uncertain={"power": 0.2, "gravity": 0.1},
        costs={
            "fuel": CostSpec(
                _cost(lambda s, a, n, p: jnp.clip(a, -1.0, 1.0).sum() ** 2 - 0.25),
                "mean squared throttle under 0.25, a fuel budget: a^2 - 0.25",
            ),
            "speed": CostSpec(_cost(lambda s, a, n, p: jnp.abs(n.velocity) - 0.04), "car speed under 0.04: |v| - 0.04"),
        },  # fmt: skip
        default_costs=("fuel",),
        noise=1e-4,
        params=dict(max_steps_in_episode=200),
        gamma=0.99,
        lambda_max=50.0,
        min_episode_length=40,
        learner=_learner({"short": 20_000, "long": 200_000}, lr=1e-3, eta_xi=1e-11),
    ),
}


def parse_gymnax_name(name: str) -> tuple[GymnaxPreset, dict[str, Any], tuple[str, ...]]:
    """``(preset, uncertain, costs)`` of a ``gymnax:`` name (see the module docstring)."""
    if not name.startswith(PREFIX):
        raise ValueError(f"{name!r} is not a gymnax name (gymnax:ID)")
    base, *options = name[len(PREFIX) :].split("@")
    from rcmdp_jax.envs import gymnax_any

    pre = PRESETS[base] if base in PRESETS else gymnax_any.generic_preset(base, GymnaxPreset, tuple(PRESETS))  # any id
    uncertain, costs = dict(pre.uncertain), pre.default_costs
    seen = set()
    for opt in options:
        key, value = name_option(name, opt, ("uncertain", "costs", "noise"), seen,
                                 "@uncertain=FIELD:WIDTH,..., @costs=NAME,... and @noise=STD,...")  # fmt: skip
        items = [v.strip() for v in value.split(",")]
        if key == "noise":  # the kernel's std: one number, or one per state entry (checked by robustify)
            pre = dataclasses.replace(pre, noise=parse_noise(items))
        elif key == "costs":
            check_cost_items(items, pre.costs, "velocity:0.04")
            unknown = [c for c in items if c not in pre.costs and not gymnax_any.is_limit(c)]
            if unknown:
                named = f"one of {', '.join(pre.costs)}, " if pre.costs else ""
                raise ValueError(f"costs: {unknown[0]!r} is not a cost of {PREFIX}{base}; choose {named}FIELD:LIMIT "
                                 "(|next state's FIELD| <= LIMIT, e.g. velocity:0.04) or 'FIELD>LIMIT[:BUDGET]' (1 "
                                 f"per step over the limit, BUDGET such steps per episode); {QUOTE_HINT}")  # fmt: skip
            def key(c):  # the value it names: 'gamma' as the preset's discount it stands for
                if c in pre.costs:
                    return c
                limit = gymnax_any.parse_limit(c)
                return (*limit[:4], pre.gamma if limit[4] is None else limit[4])

            if why := repeated_cost(items, key):
                raise ValueError(why)
            costs = tuple(items)
        else:
            uncertain = {}
            for item in items:
                field, colon, raw = item.partition(":")
                if not colon or not field:
                    raise ValueError(f"uncertain: {item!r} — write FIELD:WIDTH, e.g. g:0.2 or g:abs:1.5")
                if field in uncertain:
                    raise ValueError(f"uncertain: field {field!r} named twice")
                uncertain[field] = parse_width(field, raw)
    gymnax_any.check_box(name, pre, uncertain)
    return pre, uncertain, costs


def has_costs(name: str) -> bool:
    """Whether a ``gymnax:`` name carries constraint costs (an id without a preset
    named without costs does not: only unconstrained algorithms run on it)."""
    return bool(parse_gymnax_name(name)[2])


def cost_names(pre: GymnaxPreset, costs: tuple[str, ...]) -> tuple[str, ...]:
    """The environment's names of the chosen ``costs`` (a ``FIELD:LIMIT`` one as ``limit_name``
    writes it; ``none`` where there are no costs)."""
    return tuple(c if c in pre.costs else gymnax_any.limit_name(c) for c in costs) or (gymnax_any.NO_COSTS,)


def domain_spec(name: str) -> DomainSpec:
    """The ``DomainSpec`` of a ``gymnax:`` name (no JAX work: safe before devices are set up)."""
    pre, uncertain, costs = parse_gymnax_name(name)
    length = int(pre.params["max_steps_in_episode"])
    return DomainSpec(factory=functools.partial(make_gymnax, name), gamma=pre.gamma, lambda_max=pre.lambda_max,
                      episode_length=length, min_episode_length=pre.min_episode_length or length,
                      learner=pre.learner, n_test=pre.n_test, cost_names=cost_names(pre, costs),
                      kernel_size=len(uncertain))  # fmt: skip


def check(name: str) -> None:
    """Build the environment of a ``gymnax:`` name abstractly (``noisy_entries``), so a bad field,
    width or cost raises ``ValueError``."""
    noisy_entries(name)


@functools.cache
def noisy_entries(name: str) -> tuple[int, tuple[int, ...]]:
    """``(the state's entries, those the kernel draws noise on)`` of a ``gymnax:`` name, as its
    environment holds them, the environment built abstractly (``jax.eval_shape``: no backend starts,
    so a script may still split the CPU into devices after; no environment is kept)."""
    import jax

    got = []

    def build():
        env = _build(name)
        got.append((env.state_dim, env.noisy))
        return env.default_params.xi

    jax.eval_shape(build)
    return got[0]


def gymnax_name(env_id: str, uncertain: str | None = None, costs: str | None = None, noise: str | None = None) -> str:
    """The canonical name of preset ``env_id`` with the CLI's ``--uncertain FIELD=WIDTH,...``,
    ``--costs NAME,...`` and ``--noise STD,...`` (validated; ``ValueError`` names what is wrong)."""
    name = env_id if env_id.startswith(PREFIX) else PREFIX + env_id
    name = with_options(name, "g=0.2 or g=abs:1.5", uncertain, costs, noise=noise)
    check(name)  # every field, width and cost checked here
    return name


def _build(name: str, noise: float | None = None):
    from rcmdp_jax.envs import gymnax_any
    from rcmdp_jax.envs.gymnax_wrapper import robustify

    pre, uncertain, costs = parse_gymnax_name(name)
    env, params = gymnax_any.make_inner(pre.env_id)
    params = params.replace(**pre.params)
    state_fields = gymnax_any.float_state_fields(env, params)
    fns = {c: pre.costs[c].fn if c in pre.costs else gymnax_any.limit_cost(c, state_fields, pre.env_id)
           for c in costs}  # fmt: skip
    fns = dict(zip(cost_names(pre, costs), fns.values())) if fns else {gymnax_any.NO_COSTS: gymnax_any.zero_cost}
    return robustify(
        env, uncertain, fns, noise=pre.noise if noise is None else noise, params=params,
        derive=pre.derive, gamma=pre.gamma, lambda_max=pre.lambda_max,
        min_episode_length=pre.min_episode_length, name=f"Robust{pre.env_id}",
    )  # fmt: skip


_CACHE: dict[str, Any] = {}


def make_gymnax(name: str, noise: float | None = None):
    """The ``RobustGymnax`` environment of a ``gymnax:`` name (one instance per name);
    ``noise`` replaces the preset's kernel noise (a new, uncached instance)."""
    if noise is not None:
        return _build(name, noise)
    if name in _CACHE:
        return _CACHE[name]
    env = _build(name)
    if not _under_a_trace(env):  # built inside ``jax.eval_shape`` (sizes, checks): its arrays are not kept
        _CACHE[name] = env
    return env


def _under_a_trace(env) -> bool:
    """Whether ``env`` was built while JAX traced (its parameters are tracers)."""
    import jax

    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(env.default_params))


__all__ = ["PRESETS", "CostSpec", "GymnaxPreset", "check", "cost_names", "domain_spec", "gymnax_name", "has_costs", "make_gymnax",
           "parse_gymnax_name"]  # fmt: skip

"""Any gymnax id made robust-constrained by name, beyond the four presets.

``gymnax:MountainCar-v0@uncertain=force:0.2,gravity:0.2@costs=velocity:0.04`` names
gymnax's ``MountainCar-v0`` with ``force`` and ``gravity`` uncertain (±20 %) and one
constraint, ``|velocity| <= 0.04`` on the next state. An id without a preset has no box
and no costs of its own: the box must be named; without costs the environment carries
one zero cost (``none``) and only the unconstrained algorithms may run on it.

Also here: the derived fields gymnax *stores* in its own ``EnvParams`` (CartPole-v1's
``total_mass`` and ``polemass_length``), which ``robustify`` recomputes by itself, and the
float fields a box (``EnvParams``) or a ``FIELD:LIMIT`` cost (``EnvState``) may name.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

from rcmdp_jax.hparams import finite_f32
from rcmdp_jax.plugin import closest

NO_COSTS = "none"  # the zero cost of an environment named without costs


def cartpole_derive(p):
    """gymnax stores CartPole's ``total_mass`` and ``polemass_length``: recompute them."""
    return p.replace(total_mass=p.masscart + p.masspole, polemass_length=p.masspole * p.length)


# gymnax env class -> (the stored fields, the function that recomputes them)
KNOWN_DERIVE: dict[str, tuple[tuple[str, ...], Callable]] = {
    "CartPole": (("total_mass", "polemass_length"), cartpole_derive),
}


def known_derive(env, uncertain) -> Callable | None:
    """The ``derive`` of one of gymnax's own environments (``None`` if it stores no
    derived field); ``ValueError`` if a stored derived field itself is made uncertain."""
    fields, fn = KNOWN_DERIVE.get(type(env).__name__, ((), None))
    stored = [f for f in uncertain if f in fields]
    if stored:
        raise ValueError(f"uncertain: {type(env).__name__}'s EnvParams.{stored[0]} is computed by gymnax from other "
                         f"fields ({', '.join(fields)} are stored, not free); make the fields it is made of "
                         "uncertain instead")  # fmt: skip
    return fn


def is_limit(item: str) -> bool:
    """Whether a cost item is a generic one: ``FIELD:LIMIT`` (``|next_state.FIELD| <= LIMIT``)
    or ``FIELD>LIMIT[:BUDGET[:GAMMA_C]]`` (1 per step with ``|next_state.FIELD| > LIMIT``,
    ``BUDGET`` such steps per episode allowed: ``envs.indicator``; ``GAMMA_C`` its cost
    discount, default 1: the episode count; ``gamma``: the training discount)); a ``<`` is one
    refused in words."""
    return any(c in item for c in ":><")


def limit_name(item: str) -> str:
    """The cost's name in tables and plots: ``velocity:0.04`` -> ``|velocity|<=0.04``;
    ``velocity>0.04:5`` -> ``|velocity|>0.04 at most 5/episode`` (the undiscounted count);
    ``velocity>0.04:5:gamma`` -> ``... at most 5/episode discounted by gamma``."""
    if ">" in item:
        field, _, rest = item.partition(">")
        limit, _, budget = rest.partition(":")
        budget, _, gamma_c = budget.partition(":")
        kept = "" if gamma_c in ("", "1") else f" discounted by {gamma_c}"  # else the episode count
        return f"|{field}|>{limit} at most {budget or 0}/episode{kept}"
    field, _, limit = item.partition(":")
    return f"|{field}|<={limit}"


def parse_limit(item: str) -> tuple[str, bool, float, float, float | None]:
    """``(FIELD, whether it counts unsafe steps, LIMIT, BUDGET, GAMMA_C)`` of ``FIELD:LIMIT`` or
    ``FIELD>LIMIT[:BUDGET[:GAMMA_C]]`` (GAMMA_C: the cost discount, 1 by default, None for
    ``gamma``: the training discount), the numbers checked (finite in float32, >= 0, GAMMA_C in
    (0, 1]); ``ValueError`` naming the item and how to write it."""
    from rcmdp_jax.envs.gymnax_inputs import QUOTE_HINT

    how = ("write FIELD:LIMIT (|FIELD| <= LIMIT) or 'FIELD>LIMIT[:BUDGET[:GAMMA_C]]' (quoted; GAMMA_C the cost "
           "discount, in (0, 1] or gamma), e.g. velocity:0.04, 'velocity>0.04:5' or 'velocity>0.04:5:0.99'")
    if "<" in item:
        raise ValueError(f"costs: {item!r} — only '>' is supported: for |FIELD| <= LIMIT write FIELD:LIMIT "
                         f"(e.g. {item.partition('<')[0]}:{item.partition('<')[2].partition(':')[0] or 1}); for a "
                         "budget of unsafe steps 'FIELD>LIMIT:BUDGET' (quoted)")  # fmt: skip
    unsafe_steps = ">" in item
    field, _, raw = item.partition(">" if unsafe_steps else ":")
    raw, colon, raw_budget = raw.partition(":") if unsafe_steps else (raw, "", "")
    if not field or not raw.strip() or (colon and not raw_budget.strip()):
        what = "the field" if not field else "the limit" if not raw.strip() else "the budget after ':'"
        raise ValueError(f"costs: {item!r} — {what} is empty; {how}; {QUOTE_HINT}")
    raw_budget, colon, raw_gamma = raw_budget.partition(":")  # FIELD>LIMIT:B:GAMMA_C, the cost discount
    if colon and not raw_gamma.strip():
        raise ValueError(f"costs: {item!r} — the cost discount after the second ':' is empty; {how}; {QUOTE_HINT}")
    try:
        limit = float(raw)
        budget = float(raw_budget or 0.0)
        gamma_c = None if raw_gamma == "gamma" else float(raw_gamma or 1.0)
    except ValueError:
        raise ValueError(f"costs: {item!r} — {how}, with numbers") from None
    if not finite_f32(limit, np):  # NaN, the infinities, beyond float32
        raise ValueError(f"costs: {item!r} — the limit must be a finite number in float32, got {raw}")
    if limit < 0:  # |FIELD| <= LIMIT never holds: every run would report it broken
        raise ValueError(f"costs: {item!r} — the limit must be >= 0 (|{field}| <= {raw} can never hold)")
    if not (finite_f32(budget, np) and budget >= 0):
        raise ValueError(f"costs: {item!r} — the budget (unsafe steps per episode) must be a finite number >= 0 in "
                         f"float32 (at most 3.4e38), got {raw_budget}; {how}")  # fmt: skip
    budget = 0.0 if np.float32(budget) == 0 else budget  # 0 in float32 (below ~1e-45): none, as training reads it
    if gamma_c is not None and not 0.0 < np.float32(gamma_c) <= 1.0:  # as the discount is used: float32
        raise ValueError(f"costs: {item!r} — the cost discount (FIELD>LIMIT:B:GAMMA_C) must be in (0, 1] or "
                         "'gamma' (the training discount)")  # fmt: skip
    return field, unsafe_steps, limit, budget, gamma_c


def limit_cost(item: str, state_fields: tuple[str, ...], env_id: str) -> Callable:
    """``c(s, a, s', p) = |s'.FIELD| - LIMIT`` of the item ``FIELD:LIMIT`` (checked); of a
    vector field, ``max_i |s'.FIELD_i| - LIMIT``: kept when every entry is within the limit."""
    field, unsafe_steps, limit, budget, gamma_c = parse_limit(item)
    if field not in state_fields:
        raise ValueError(f"costs: {env_id}'s EnvState has no float field {field!r}{closest(field, state_fields)} for "
                         "FIELD:LIMIT; "
                         f"{allowed_fields(state_fields, 'no FIELD:LIMIT cost can bound it')}")  # fmt: skip

    if unsafe_steps:
        from rcmdp_jax.envs.unsafe_steps import indicator

        return indicator(FieldLimit(field, limit, flag=True), budget, gamma_c)
    return FieldLimit(field, limit)


@dataclasses.dataclass(frozen=True)
class FieldLimit:
    """The cost ``|s'.FIELD| - LIMIT`` of ``FIELD:LIMIT`` (``flag``: the flag ``|s'.FIELD| > LIMIT``
    of ``'FIELD>LIMIT'``, an indicator's). ``robustify`` calls ``at`` with the limit its
    parameters hold (``EnvParams.cost_limits``), so that the limit is an argument of the program."""

    field: str
    limit: float
    flag: bool = False

    def at(self, next_state, limit):
        """``(1,)``: how far ``|s'.FIELD|`` is past ``limit`` (``flag``: whether it is past it); a
        vector field (Reacher-misc's angle_vels) is one constraint on its largest entry."""
        excess = jnp.max(jnp.abs(jnp.asarray(getattr(next_state, self.field)))).reshape((1,)) - limit
        return excess > 0 if self.flag else excess

    def __call__(self, state, action, next_state, params):
        return self.at(next_state, self.limit)


def zero_cost(state, action, next_state, params):
    """The placeholder cost of an environment without constraints (always 0: kept)."""
    return jnp.zeros((1,), jnp.float32)


def make_inner(env_id: str):
    """``gymnax.make(env_id)``; a ``ValueError`` in one line where gymnax cannot build it here
    (FourRooms-misc and MetaMaze-misc under a trace, MNISTBandit-bsuite without a network)."""
    import gymnax

    try:
        return gymnax.make(env_id)
    except Exception as err:  # gymnax's own failure, whatever its kind
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"gymnax cannot build {env_id} here: {type(err).__name__}: {first}") from None


@functools.cache
def generic_preset(env_id: str, preset_class, presets: tuple[str, ...]):
    """The ``preset_class`` (``gymnax_presets.GymnaxPreset``) of a gymnax id without one of
    the ``presets``: gymnax's own episode length, no box, no costs, the default learner
    settings (``LearnerSpec()``)."""
    import gymnax
    from rcmdp_jax.envs import GYMNAX_PREFIX
    from rcmdp_jax.envs.domain import LearnerSpec

    if env_id not in gymnax.registered_envs:
        raise ValueError(f"unknown gymnax id {env_id!r}{closest(env_id, gymnax.registered_envs)}; presets: {', '.join(GYMNAX_PREFIX + k for k in presets)}; "
                         f"other gymnax ids (with --uncertain): {', '.join(sorted(set(gymnax.registered_envs) - set(presets)))}")  # fmt: skip
    env, params = make_inner(env_id)
    return preset_class(env_id=env_id, uncertain={}, costs={}, default_costs=(), noise=1e-3,
                        params=dict(max_steps_in_episode=int(params.max_steps_in_episode)), gamma=0.99,
                        lambda_max=50.0, learner=LearnerSpec(), derive=known_derive(env, {}))  # fmt: skip


def float_fields(params) -> list[str]:
    """The scalar float fields of a gymnax ``EnvParams``: the ones that can be uncertain."""
    out = []
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        scalar_float = np.ndim(v) == 0 and np.issubdtype(np.asarray(v).dtype, np.floating)
        if not isinstance(v, bool) and (isinstance(v, float) or scalar_float):
            out.append(f.name)
    return out


def allowed_fields(fields, none: str = "none can be made uncertain") -> str:
    """The end of an error on a field name: the float fields one may name, or that there are
    none (gymnax's Catch-bsuite has no float parameter: no box can be put on it)."""
    return f"float fields: {', '.join(fields)}" if fields else f"it has no float field ({none})"


def float_state_fields(env, params) -> tuple[str, ...]:
    """The float fields of ``env``'s ``EnvState`` (``time`` apart): what a cost may bound."""
    import jax

    _, shape = jax.eval_shape(env.reset_env, jax.random.key(0), params)
    return tuple(f.name for f in dataclasses.fields(shape)
                 if f.name != "time" and jnp.issubdtype(getattr(shape, f.name).dtype, jnp.floating))  # fmt: skip


def check_box(name: str, pre, uncertain: dict) -> None:
    """An id without a preset needs its box named."""
    if uncertain:
        return
    from rcmdp_jax.envs import GYMNAX_PREFIX

    fields = float_fields(make_inner(pre.env_id)[1])
    if not fields:
        raise ValueError(f"{GYMNAX_PREFIX}{pre.env_id}'s EnvParams has no float field: no uncertainty box can be "
                         "put on its dynamics (an environment of your own: docs/custom_envs.md)")  # fmt: skip
    raise ValueError(f"{GYMNAX_PREFIX}{pre.env_id} has no preset box: name its uncertain EnvParams fields with --uncertain "
                     f"FIELD=WIDTH,... (in a name: @uncertain=FIELD:WIDTH,...); {allowed_fields(fields)}")  # fmt: skip

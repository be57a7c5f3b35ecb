"""What ``robustify`` checks of its arguments before it builds anything: the box's
half-widths (``relative`` / ``absolute``), the kernel noise, and the cost functions, each
refused in one line that names the argument and what it may be."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import numpy as np

from rcmdp_jax.plugin import closest


def name_option(name: str, opt: str, allowed: tuple[str, ...], seen: set, usage: str) -> tuple[str, str]:
    """One ``@KEY=VALUE`` of the environment name ``name``: ``(key, value)``, ``key`` added to ``seen``;
    ``ValueError`` in one line naming what is wrong with it (unknown, repeated, empty) and ``usage``."""
    key, eq, value = opt.partition("=")
    why = ("an empty option (an @ with nothing after it)" if not opt
           else f"unknown option '@{key}'{closest(key, allowed)}" if key not in allowed
           else f"@{key} is given twice (give its items in one, comma-separated)" if key in seen
           else f"@{key} has no value" if not (eq and value.strip()) else None)  # fmt: skip
    if why:
        raise ValueError(f"{name!r}: {why}; options are {usage}, once each")
    seen.add(key)
    return key, value


def relative(fraction: float) -> tuple[str, float]:
    """A half-width of ``fraction`` x the nominal value (a plain number means the same)."""
    return ("rel", fraction)


def absolute(half_width: float) -> tuple[str, float]:
    """An absolute half-width (``uncertain={"g": absolute(1.5)}``)."""
    return ("abs", half_width)


def half_width(field: str, spec, nominal: float) -> float:
    """The box's half-width of ``field`` around ``nominal``: non-empty, finite in float32,
    and (for a nonzero nominal) on one side of zero, so no kernel flips the field's sign
    (``g=1.5``: gravity from -5 to 25 would be a box with negative gravity)."""
    kind, value = spec if isinstance(spec, tuple) and len(spec) == 2 else ("rel", spec)
    if kind not in ("rel", "abs") or isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"uncertain[{field!r}]: give a relative fraction (a number, e.g. 0.2 for ±20%) or "
                         f"absolute(half_width); got {spec!r}")  # fmt: skip
    with np.errstate(all="ignore"):  # in float32, as training holds it: 1e40 is inf there, 1e-50 is 0
        width = np.float32(abs(nominal) * float(value) if kind == "rel" else float(value))
        edges = np.float32(nominal) + np.array([-width, width], np.float32)
    if not (np.isfinite(width) and width > 0 and np.all(np.isfinite(edges))):
        raise ValueError(f"uncertain[{field!r}]: the box must be non-empty and finite in float32 (half-width > 0); "
                         f"{value!r}{'' if kind == 'rel' else ' (absolute)'} around nominal {nominal} gives "
                         f"{float(width)}")  # fmt: skip
    if nominal != 0 and width >= abs(np.float32(nominal)):
        raise ValueError(f"uncertain[{field!r}]: the box [{float(edges[0]):g}, {float(edges[1]):g}] reaches zero and "
                         f"flips the sign of {field} (nominal {nominal:g}); give a half-width below {abs(nominal):g} "
                         "(a relative one below 1)")  # fmt: skip
    return float(width)


def noise_vector(noise, state_dim: int, state_fields) -> np.ndarray:
    """The kernel's std per state entry: one number, or ``state_dim`` of them."""
    arr = np.asarray(noise, np.float32) if not isinstance(noise, str) else np.asarray(np.nan)
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != state_dim):
        raise ValueError(f"noise must be one number or {state_dim} (one per state entry: "
                         f"{', '.join(state_fields)}), got {len(np.ravel(arr))} ({np.ravel(arr).tolist()})")  # fmt: skip
    arr = np.broadcast_to(arr, (state_dim,)).copy()
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"noise must be a finite number >= 0 (a std per state entry), got {arr.tolist()}")
    # below float32's smallest normal number a std is zero where XLA's CPU code computes with it
    # (subnormals flushed: a log-density of NaN): such an entry is not drawn, as at 0
    return np.where(arr < np.finfo(np.float32).tiny, np.float32(0.0), arr)


def cost_functions(costs) -> Mapping:
    """``costs`` as ``{name: function}``: a dict as given, a list or tuple of functions by their names."""
    if isinstance(costs, Mapping):
        return costs
    if not isinstance(costs, (list, tuple)):
        raise TypeError("costs must be a dict {name: c(state, action, next_state, params)} or a list of such "
                        f"functions, got {type(costs).__name__}")  # fmt: skip
    names = [getattr(c, "__name__", f"cost{i}") for i, c in enumerate(costs)]
    if twice := sorted({n for n in names if names.count(n) > 1}):  # else one would replace the other in silence
        raise ValueError(f"costs: {names.count(twice[0])} functions are named {twice[0]!r}; give a dict {{name: "
                         "function}} to name each constraint")  # fmt: skip
    return dict(zip(names, costs))


def check_cost_fns(costs: Mapping) -> None:
    """Each cost is a function ``c(state, action, next_state, params) -> (k,)``."""
    for name, fn in costs.items():
        if not callable(fn):
            raise TypeError(f"costs[{name!r}] must be a function c(state, action, next_state, params) -> a (k,) "
                            f"array, got {type(fn).__name__} {fn!r}")  # fmt: skip


def check_cost_shapes(costs: Mapping[str, Callable], state, action, params, cost_args=lambda *a: a) -> None:
    """Each cost returns a vector ``(k,)`` of float (``jnp.abs(n.v)[None] - 0.1``, not the
    scalar ``jnp.abs(n.v) - 0.1``), found from shapes only; ``cost_args(state, action,
    next_state, params)``: what a cost is called with (a wrapper's own view of the step)."""
    for name, fn in costs.items():
        out = jax.eval_shape(lambda s, a, p, fn=fn: fn(*cost_args(s, a, s, p)), state, action, params)
        if getattr(out, "ndim", None) != 1 or out.shape[0] < 1:
            raise ValueError(f"costs[{name!r}] returns shape {tuple(getattr(out, 'shape', ()))}; a cost returns a "
                             "vector of shape (k,), one entry per constraint (e.g. jnp.abs(n.v)[None] - 0.1, not "
                             "jnp.abs(n.v) - 0.1)")  # fmt: skip


def parse_width(field: str, raw: str):
    """``0.2`` / ``rel:0.2`` (±20 %) or ``abs:1.5`` of a gymnax name's ``@uncertain=``."""
    kind, _, num = raw.rpartition(":")
    if kind not in ("", "abs", "rel"):
        raise ValueError(f"uncertain: {field}:{raw} is not a half-width; write {field}:0.2 (±20 %) or "
                         f"{field}:abs:1.5")  # fmt: skip
    try:
        value = float(num)
    except ValueError:
        raise ValueError(f"uncertain: {field}:{raw} is not a number; write {field}:0.2 (±20 %) or "
                         f"{field}:abs:1.5") from None  # fmt: skip
    return absolute(value) if kind == "abs" else relative(value)


def parse_noise(items: list[str]):
    """A gymnax name's ``@noise=STD,...``: one std, or one per state entry (length and sign
    are checked where the state is known: ``noise_vector``)."""
    try:
        values = tuple(float(v) for v in items)
    except ValueError:
        raise ValueError(f"noise: {','.join(items)} — write one std (noise=0.01) or one per state entry "
                         "(noise=0.01,0.01,0)") from None  # fmt: skip
    return values[0] if len(values) == 1 else values


def with_options(name: str, example: str, uncertain: str | None, costs: str | None, **more: str | None) -> str:
    """``name`` with the command line's ``--uncertain FIELD=WIDTH,...`` (``example``: a width to
    show in the error), ``--costs ITEM,...`` and any further ``--KEY V,...`` as ``@KEY=...``
    options (``ValueError`` for an empty one or an item without ``=``)."""
    given = {"uncertain": uncertain, "costs": costs, **more}
    for key, value in given.items():
        if value is not None and not value.replace(",", "").strip():  # never silently the defaults
            hint = f"; {QUOTE_HINT}" if key == "costs" else ""
            raise ValueError(f"--{key} is empty; name at least one, or leave it out for the preset's default{hint}")
    if uncertain:
        items = []
        for item in uncertain.split(","):
            field, eq, raw = item.strip().partition("=")
            if not eq:
                raise ValueError(f"--uncertain: {item.strip()!r} — write FIELD=WIDTH, e.g. {example}")
            items.append(f"{field.strip()}:{raw.strip()}")
        name += "@uncertain=" + ",".join(items)
    for key, value in list(given.items())[1:]:
        if value:
            name += f"@{key}=" + ",".join(c.strip() for c in value.split(","))
    return name


# a value the shell cut short: an unquoted ``>`` is a redirection (``--costs x>1:5`` passes ``x``)
QUOTE_HINT = "if the value holds '>', quote it (--costs 'FIELD>LIMIT:BUDGET'): an unquoted > is the shell's redirection"


def check_cost_items(items: list[str], known, example: str) -> None:
    """What ``--costs``/``@costs=`` items share before each kind reads its own: no empty item
    (a trailing or doubled comma), no item that differs from a named cost only in case
    (``SPEED``); ``known``: the names allowed, ``example``: one item to show."""
    if not all(items):
        raise ValueError(f"costs: {','.join(items)!r} has an empty item (a trailing or doubled comma); name each "
                         f"cost once, separated by single commas, e.g. {example}; {QUOTE_HINT}")  # fmt: skip
    for item in items:
        near = [k for k in known if k.lower() == item.lower() and k != item]
        if near:
            raise ValueError(f"costs: {item!r} is not a cost here; names are case-sensitive: write {near[0]}")


def repeated_cost(items: list[str], key) -> str | None:
    """The first item whose ``key(item)`` (its parsed value: ``theta_dot:1`` and
    ``theta_dot:1.0`` are one constraint) an earlier item already has, else None."""
    seen: dict = {}
    for item in items:
        k = key(item)
        if k in seen:
            return f"costs: {seen[k]!r} and {item!r} are the same constraint; name it once"
        seen[k] = item
    return None

"""The test kernels in a person's terms: each entry of a kernel ``xi`` as its field's
change from the nominal value (``heater_gain +30 %, loss -30 %``), the names taken from
the environment (``robustify``'s uncertain fields; ``xi[i]`` where it has none); and back,
a kernel a person names that way (``parse``: ``"masspole=+50%,length=0.6"``)."""

from __future__ import annotations

import re

import numpy as np

from rcmdp_jax.plugin import closest


def kernel_names(env_name: str, shape: tuple[int, ...]) -> tuple[str, ...]:
    """The names of a kernel's entries (flattened): the environment's uncertain fields
    (``envs.robustify``'s ``fields``), else its spec's ``kernel_names`` (the study's domains:
    ``cart velocity``), else ``xi[i]`` / ``xi[i,j]``."""
    n = int(np.prod(shape)) if shape else 1
    try:
        from rcmdp_jax import envs

        names = tuple(getattr(envs.make(env_name)[0], "fields", ()) or ()) or tuple(envs.spec(env_name).kernel_names)
    except (ValueError, TypeError):
        names = ()
    if len(names) == n:
        return names
    return tuple(f"xi[{','.join(map(str, idx))}]" for idx in np.ndindex(*shape)) if shape else ("xi",)


def describe(xi, xi_c, names) -> str:
    """``xi`` against the nominal ``xi_c``: each entry's relative change (``+30 %``), or its
    absolute change where the nominal value is 0; "the nominal kernel" if none changed."""
    xi, xi_c = np.ravel(np.asarray(xi, np.float64)), np.ravel(np.asarray(xi_c, np.float64))
    parts = []
    for name, x, c in zip(names, xi, xi_c):
        if np.isclose(x, c, rtol=1e-6, atol=1e-12):
            continue
        parts.append(f"{name} {100 * (x - c) / abs(c):+.3g} %" if c != 0 else f"{name} {x - c:+.3g}")
    return ", ".join(parts) if parts else "the nominal kernel"


def spell(xi, xi_c, names) -> str:
    """``xi`` as ``parse`` reads it back exactly: each changed entry at its absolute value
    (``g=11.7600002,m=1``), ``nominal`` if none changed."""
    xi, xi_c = np.ravel(np.asarray(xi, np.float32)), np.ravel(np.asarray(xi_c, np.float32))
    parts = [f"{name}={float(x):.9g}" for name, x, c in zip(names, xi, xi_c) if x != c]
    return ",".join(parts) if parts else "nominal"


def parse(text: str | None, xi_c, names) -> np.ndarray:
    """The kernel a person names by its fields, ``"g=+20%,m=11.0"``: each named entry at a
    relative change from its nominal value (``+20%``, ``-5%``) or at an absolute value
    (``11.0``); the entries not named stay nominal; ``None``, ``""`` or ``"nominal"``: the
    nominal kernel ``xi_c``. float32, ``xi_c``'s shape. ``ValueError`` in one line naming the
    entry and what is allowed."""
    xi_c = np.asarray(xi_c, np.float32)
    xi = np.array(xi_c, np.float64).ravel()
    if text is None or str(text).strip() in ("", "nominal"):
        return xi_c.copy()
    if not isinstance(text, str):
        raise ValueError(f"kernel must be a string such as '{names[0]}=+20%' (fields: {', '.join(names)}), "
                         f"got {type(text).__name__}")  # fmt: skip
    seen = set()
    for item in re.split(r",(?![^\[]*\])", text):  # commas inside xi[i,j] belong to the name
        name, eq, value = item.strip().partition("=")
        name, value = name.strip(), value.strip().replace("\u2212", "-")  # a typeset minus sign is a minus
        if not eq or not name or not value:
            raise ValueError(f"kernel: {item.strip()!r} is not FIELD=VALUE (a change such as +20% or an absolute value "
                             f"such as 11.0); fields: {', '.join(names)}")  # fmt: skip
        if name not in names:
            raise ValueError(f"kernel: no field {name!r} in this kernel{closest(name, names)}; fields: "
                             f"{', '.join(names)}")  # fmt: skip
        if name in seen:
            raise ValueError(f"kernel: {name} is named twice")
        seen.add(name)
        i = names.index(name)
        try:
            number = float(value[:-1] if value.endswith("%") else value)
        except ValueError:
            number = float("nan")
        if not np.isfinite(number):
            raise ValueError(f"kernel: {name}={value}: the value must be a finite number (absolute, 11.0) or a "
                             "change in percent (+20%)")  # fmt: skip
        if value.endswith("%") and xi[i] == 0:
            raise ValueError(f"kernel: {name}={value}: its nominal value is 0, so a change in percent is 0; give an "
                             "absolute value")  # fmt: skip
        xi[i] = xi[i] * (1 + number / 100) if value.endswith("%") else number
        if not abs(xi[i]) <= np.finfo(np.float32).max:
            raise ValueError(f"kernel: {name}={value} is {xi[i]:.4g}, beyond float32 (at most "
                             f"{np.finfo(np.float32).max:.3g} in size)")  # fmt: skip
    return xi.astype(np.float32).reshape(xi_c.shape)

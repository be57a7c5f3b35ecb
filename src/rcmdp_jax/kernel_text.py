"""The test kernels in a person's terms: each entry of a kernel ``xi`` as its field's
change from the nominal value (``heater_gain +30 %, loss -30 %``), the names taken from
the environment (``robustify``'s uncertain fields; ``xi[i]`` where it has none)."""

from __future__ import annotations

import numpy as np


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

"""The numbers of an environment name that a training program takes as arguments.

A name sets numbers of the environment's parameters (``EnvParams``): a study domain's limit
(``inventory@cost_threshold=0.13``), a ``gymnax:`` name's box widths (``@uncertain=g:0.2``, its
``kappa``), kernel noise (``@noise=0.01``) and its costs' limits and budgets (``@costs=x:0.5``,
``'x>0.3:5'``: ``cost_limits``, ``cost_shares``). Training reads them from the parameters it is
given, so one compiled program serves every value: ``program_key`` is the name with those numbers
blanked (what a program is built from and kept under), ``program_numbers`` the parameters' fields
the program takes as arguments. A change of only those numbers runs the program built before.

What stays in the key: the fields a box names, which noise entries are zero in float32 (only the
noisy entries are drawn; one number, one per entry or the preset's own noise, alike), whether a budget is zero and a cost's discount (as its number: 1 is the
default), the numbers of a preset's own costs (``@costs=speed``), every number of a brax name or a
registered environment. A name's options may come in any order.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

BLANK = "#"  # a number the program takes as an argument, in ``program_key``


def program_key(name: str) -> str:
    """``name`` with the numbers its program takes as arguments blanked (``BLANK``):
    ``inventory@cost_threshold=0.13`` -> ``inventory@cost_threshold=#``,
    ``gymnax:CartPole-v1@uncertain=gravity:0.3@noise=0.01`` -> ``...@uncertain=gravity:#@noise=#``;
    other names as they are."""
    from rcmdp_jax.envs import GYMNAX_PREFIX, split_limit

    limit = split_limit(name)
    if limit is not None:
        return f"{limit[0]}@{limit[1]}={BLANK}"
    if not name.startswith(GYMNAX_PREFIX):
        return name
    base, *options = name.split("@")
    out = [f"noise={_noise_item(name)}"]
    for opt in options:
        key, _, value = opt.partition("=")
        items = [item.strip() for item in value.split(",")]  # as the name's parser reads them
        if key == "uncertain":  # FIELD:WIDTH, FIELD:abs:WIDTH: the box's half-widths, params.kappa
            items = [f"{item.partition(':')[0]}:{BLANK}" for item in items]
        elif key == "noise":  # said once, per entry, whether given or not (above)
            continue
        elif key == "costs":  # FIELD:LIMIT and 'FIELD>LIMIT:BUDGET:GAMMA_C': params.cost_limits, cost_shares
            items = [_cost_item(item) for item in items]
        out.append(f"{key}={','.join(items)}")
    return "@".join([base, *sorted(out)])  # each option once, read in any order


def _noise_item(name: str) -> str:
    """The kernel's noise of a ``gymnax:`` name as its program is built: per state entry, ``0`` where
    the entry is not drawn (zero in float32, as robustify stores it), else blanked; the same for one
    number, one per entry and the preset's own (no ``@noise``), as they build the same program."""
    from rcmdp_jax.envs.gymnax_presets import noisy_entries

    dim, noisy = noisy_entries(name)
    return ",".join(BLANK if i in noisy else "0" for i in range(dim))


def _cost_item(item: str) -> str:
    """A ``@costs=`` item with its limit and budget blanked (a preset's cost by name as it is); a
    budget of zero kept, and the cost discount: with both, the constraint subtracts nothing."""
    if ">" in item:
        field, _, rest = item.partition(">")
        _, _, rest = rest.partition(":")
        budget, _, gamma_c = rest.partition(":")
        budget = "0" if not budget or _zero(budget, np.float32) else BLANK
        gamma_c = _discount(gamma_c)
        return f"{field}>{BLANK}:{budget}{':' if gamma_c else ''}{gamma_c}"
    field, colon, _ = item.partition(":")
    return f"{field}:{BLANK}" if colon else item


def _discount(gamma_c: str) -> str:
    """A cost discount as its number reads (``''``: the default, 1; ``gamma`` as it is)."""
    try:
        return "" if not gamma_c or float(gamma_c) == 1.0 else repr(float(gamma_c))
    except ValueError:  # 'gamma', or refused where the name is checked
        return gamma_c


def _zero(item: str, dtype=float) -> bool:
    """Whether ``item`` is the number zero in ``dtype`` (a noise of 1e-50 is zero in float32)."""
    try:
        with np.errstate(over="ignore", under="ignore"):
            return dtype(float(item)) == 0.0
    except ValueError:  # refused where the name is checked
        return False


def program_numbers(name: str, params: Any) -> dict[str, np.ndarray]:
    """The fields of ``params`` (environment ``name``'s default parameters) that its training
    program takes as arguments, ``{field: NumPy array}``: every field that holds an array (the
    kernel ``xi``, its box ``xi_c`` and ``kappa``, a ``gymnax:`` name's noise) and a study
    domain's limit where the name sets it. The other fields are the program's constants: no
    name that shares its ``program_key`` sets them otherwise."""
    from rcmdp_jax.envs import split_limit

    out = {}
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            out[f.name] = np.asarray(value)
    limit = split_limit(name)
    if limit is not None:
        out[limit[1]] = np.float32(getattr(params, limit[1]))
    return out

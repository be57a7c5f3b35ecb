"""A hyperparameter sweep as one vmapped call: ``sweep`` builds the batched ``HParams``
that ``jax.vmap(train, in_axes=(None, 0))`` takes, every leaf broadcast to the lanes.

    from rcmdp_jax import make_train, preset, sweep

    config = preset("cartpole", "MDPO-Lag")
    lanes = sweep(config, lam_init=[0, 1, 5, 20])            # 4 lanes
    result = jax.jit(jax.vmap(make_train(config), in_axes=(None, 0)))(rng, lanes)

A plug-in's traced number is swept the same way by its name, ``sweep(config, **{"pid.kp": [0, 5,
10]})``. Several fields given together vary together (lane ``i`` takes the ``i``-th value of
each); ``grid=True`` takes every combination instead.
"""

from __future__ import annotations

import itertools
import reprlib

import numpy as np

from rcmdp_jax.hparams import HPARAM_FIELDS, HParams, validate_hparams
from rcmdp_jax.options import declared_numbers


def sweep(base, grid: bool = False, **values) -> HParams:
    """Batched ``HParams``: ``base`` (an ``HParams`` or a ``Config``, whose ``hparams``
    are taken) with the named fields set lane by lane, and every other field repeated
    on each lane (float32 arrays of shape ``(lanes,)``)."""
    hp = getattr(base, "hparams", base)
    if not isinstance(hp, HParams):
        raise TypeError(f"sweep needs an HParams or a Config, got {type(base).__name__}")
    fields = [*HPARAM_FIELDS, *declared_numbers()]
    if not values:
        raise ValueError(f"sweep: name at least one field with its values, e.g. lam_init=[0, 1, 5]; fields: "
                         f"{', '.join(fields)}")  # fmt: skip
    for name, vals in values.items():
        if name not in fields:
            raise ValueError(f"sweep: {name!r} is not a hyperparameter; fields: {', '.join(fields)}")
        try:
            kind = np.asarray(vals).dtype.kind if np.ndim(vals) == 1 and len(vals) > 0 else ""
        except (TypeError, ValueError, OverflowError):  # ragged, or an int beyond every dtype
            kind = ""
        if kind not in ("i", "u", "f"):  # not bools, complex numbers, times, strings or objects
            raise ValueError(f"sweep: {name} must be a non-empty list of real numbers, got {reprlib.repr(vals)}")
    if not isinstance(grid, (bool, np.bool_)):
        raise ValueError(f"sweep: grid must be True or False, got {grid!r}")
    names = list(values)
    if grid:
        lanes = list(itertools.product(*(values[n] for n in names)))
    else:
        sizes = {n: len(values[n]) for n in names}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"sweep: the fields vary together, so their lists need one length (got {sizes}); "
                             "pass grid=True for every combination")  # fmt: skip
        lanes = list(zip(*(values[n] for n in names)))
    columns = {n: np.asarray([lane[i] for lane in lanes], np.float32) for i, n in enumerate(names)}
    column = lambda f: columns.get(f, np.full(len(lanes), float(getattr(hp, f) if "." not in f else hp.number(f)),
                                              np.float32))  # fmt: skip
    out = HParams(**{f: column(f) for f in HPARAM_FIELDS}).with_numbers(**{f: column(f) for f in fields if "." in f})
    validate_hparams(out)
    return out

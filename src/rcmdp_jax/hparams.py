"""Numeric, vmappable hyperparameters (``HParams``), each declared once with its range (a
``plugin.Number``, the declaration plug-ins' numbers use too) and checked from it on concrete
values (``validate_hparams``) and on traced ones (``hparams_ok``).

Besides the fields every program reads, ``HParams`` carries the plug-ins' own traced numbers
(``plugin.Number``, named ``"NAME.number"``, e.g. ``"pid.kp"``): a config holds those it sets
(``plugin_names``/``plugin_values``), and a program's inputs hold those its plug-ins read
(``for_program``), so that they are arguments of the compiled program like the fields."""

from __future__ import annotations

import dataclasses
import math

from flax import struct

from rcmdp_jax.options import declared_numbers
from rcmdp_jax.plugin import Number, finite_f32, refusal, unknown_names  # noqa: F401 (finite_f32: the environments' checks read it here)


def number(default: float, low: float = -math.inf, high: float = math.inf, what: str = "", **more):
    """A field of ``HParams``: a traced number, its range on its declaration (``plugin.Number``)."""
    return struct.field(default=default, metadata={"number": Number(default, low, high, what, **more)})


@struct.dataclass
class HParams:
    """Numeric hyperparameters; every leaf may be an array (vmap = sweep). Each field declares its
    range (``number``): ``validate_hparams`` and ``hparams_ok`` read those declarations."""

    lr: float = number(3e-4, 0.0, what="the policy's and critic's learning rate", open_low=True)
    alpha: float = number(2.0, 0.0, what="MDPO's KL penalty alpha_0")
    # the geometric schedule's factor (the domain's gamma, docs/method.md §2d)
    alpha_decay: float = number(0.99, 0.0, what="geometric alpha's factor", open_low=True)
    eta_lam: float = number(1e-3, 0.0, what="the dual step size")
    lam_init: float = number(5.0, 0.0, what="the first multiplier")
    lam_clip: float = number(50.0, 0.0, what="the multiplier's upper clip", inf="inf: no clip")
    eta_xi: float = number(1e-7, 0.0, what="LTMA's step size")
    # ltma-norm: each step moves xi by this fraction of the box's half-width
    xi_step: float = number(0.05, 0.0, 1.0, what="ltma-norm's step, a fraction of the half-width")
    clip_eps: float = number(0.2, 0.0, what="PPO's clip", open_low=True)
    gae_lambda: float = number(0.95, 0.0, 1.0, what="GAE's lambda")
    gamma: float = number(0.99, 0.0, 1.0, what="the discount")
    target_kl: float = number(
        math.inf, 0.0, what="PPO's early stop at 1.5 target_kl", open_low=True, inf="inf disables early stopping"
    )
    vf_coef: float = number(0.5, 0.0, what="the critic loss's weight")
    ent_coef: float = number(0.0, what="the entropy bonus's weight")
    # the safety margin: every constraint rule steers towards C <= -cost_margin, not C <= 0
    # (docs/method.md §2a.4; the dual phase reads C^ + cost_margin)
    cost_margin: float = number(0.0, 0.0, what="the safety margin, in units of C")
    # the data margin on top: margin_z sigma_j / sqrt(margin_n), sigma_j the per-episode spread of
    # constraint j's C in the dual's own episodes (``dual.margin_of``); margin_n: the test episodes
    # per kernel the verdict reads (the run's n_test); margin_z 0: no data margin (the study's)
    margin_z: float = number(0.0, 0.0, 100.0, what="standard errors of the test's mean C")
    margin_n: float = number(100.0, 1.0, what="test episodes per kernel")
    # the optimiser (``learners.make_optimizer``): Adam's eps (SB3's; torch's 1e-8 for MCPMD) and
    # the global gradient-norm clip (SB3's 0.5; inf: none, an optimiser built without it: ``BUILT_FOR``)
    adam_eps: float = number(1e-5, 0.0, what="Adam's eps", open_low=True)
    max_grad_norm: float = number(0.5, 0.0, what="the global gradient-norm clip", open_low=True, inf="inf: no clip")
    # the networks' dropout after their first hidden layer, in updates only (0: a program without it,
    # ``BUILT_FOR``); the study's choice 0.6 (envs.domain.STUDY_CHOICES)
    dropout: float = number(0.6, 0.0, 1.0, what="the networks' dropout rate", open_high=True)
    # the plug-ins' traced numbers (``plugin.Number``): names static, values traced
    plugin_names: tuple = struct.field(pytree_node=False, default=())
    plugin_values: tuple = ()
    # ``dropout`` as a program reads it (``networks.dropout_form``), set by ``for_program``: () until then
    dropout_form: tuple = ()

    def number(self, name: str):
        """Plug-in number ``name`` (``"NAME.number"``): this HParams' value, else its default."""
        if name in self.plugin_names:
            return self.plugin_values[self.plugin_names.index(name)]
        known = declared_numbers()
        if name not in known:
            raise ValueError(f"no plug-in declares the number {name!r}; declared: {', '.join(known) or 'none'}")
        return known[name].default

    def numbers(self) -> dict:
        """The plug-in numbers this HParams sets, ``{name: value}``."""
        return dict(zip(self.plugin_names, self.plugin_values))

    def with_numbers(self, **values) -> HParams:
        """A copy with plug-in numbers ``values`` set (``{"pid.kp": 5.0}``), names in order."""
        merged = dict(sorted({**self.numbers(), **values}.items()))
        return self.replace(plugin_names=tuple(merged), plugin_values=tuple(merged.values()))

    def for_program(self, names) -> HParams:
        """A copy holding exactly the plug-in numbers ``names`` (those a program's plug-ins read:
        ``options.numbers_read``), each at this HParams' value or its default: one tree shape for
        every lane of the program, and nothing of a plug-in the program does not run."""
        names = tuple(sorted(names))
        from rcmdp_jax.networks import dropout_form

        values = tuple(self.number(n) for n in names)
        return self.replace(plugin_names=names, plugin_values=values, dropout_form=dropout_form(self.dropout))

    def with_all_numbers(self) -> HParams:
        """A copy with every registered plug-in number, those it does not set at their defaults:
        the one tree shape every program of the process takes (``train.resolve_hparams``)."""
        full = {k: float(n.default) for k, n in declared_numbers().items()}
        return self.with_numbers(**{**full, **self.numbers()})


# The values of a number that a program is built for, not given as an argument: ``max_grad_norm``
# inf (an optimiser without the clip: MCPMD's), ``dropout`` 0 (networks without the layer). A config at one and one off it are not one program
# (``family.family_key``); either way the number itself is an argument of the program.
BUILT_FOR = {"max_grad_norm": math.inf, "dropout": 0.0}


def built_for(hp: HParams) -> HParams:
    """``HParams()`` with the numbers of ``hp`` that are at a value of ``BUILT_FOR``: what of
    ``hp`` a program is built from (its part of ``family.family_key``)."""
    return HParams(**{f: v for f, v in BUILT_FOR.items() if getattr(hp, f, None) == v})


# every field's declaration (``number``), in order
NUMBERS = {f.name: f.metadata["number"] for f in dataclasses.fields(HParams) if "number" in f.metadata}
HPARAM_FIELDS = tuple(NUMBERS)  # the numeric fields (``plugin_names``/``plugin_values`` hold the plug-ins')


def validate_hparams(hp: HParams) -> None:
    """Range checks on concrete hyperparameters (arrays are checked element-wise)."""
    import numpy as np

    known = declared_numbers()
    names, values = hp.plugin_names, hp.plugin_values
    if not isinstance(names, tuple) or not isinstance(values, tuple) or len(names) != len(values):
        raise ValueError("HParams' plug-in numbers must be set with HParams.with_numbers(**{'NAME.number': value})")
    if unknown := [n for n in names if n not in known]:
        raise unknown_names(unknown, known, "plug-in number", " (no plug-in declares them)")
    for field, declared, v in _declared(hp):
        if isinstance(v, (bool, str, list, tuple, dict)) or v is None:
            raise refusal(field, "a number", v)
        if np.iscomplexobj(v):
            raise refusal(field, "a real number", v)
        try:
            arr = np.asarray(v, dtype=float)
        except OverflowError:  # an int beyond every float
            raise refusal(field, declared.words(), v) from None
        except Exception:  # traced values: ``hparams_ok`` flags them inside the program
            continue
        if not np.all(declared.ok(arr, np)):
            raise refusal(field, declared.words(), v)


def check_one_run(hp: HParams) -> None:
    """One run's hyperparameters are single numbers (traced ones too: under ``vmap``, each lane's); a
    batch of them (``sweep``) is vmapped. ``ValueError`` naming the first that is an array."""
    for field, _, v in _declared(hp):
        if getattr(v, "ndim", 0):
            raise ValueError(f"{field} has shape {tuple(v.shape)}; one run takes a single number (a batch of "
                             "hyperparameters is vmapped: jax.vmap(train, in_axes=(None, 0)), rcmdp_jax.sweep)")  # fmt: skip


def hparams_ok(hp: HParams):
    """Traced: whether every hyperparameter is in range (a bool array; under ``vmap``, one
    per lane): what ``validate_hparams`` checks on concrete values."""
    import jax.numpy as jnp

    ok = jnp.bool_(True)
    for _, declared, v in _declared(hp):
        ok = ok & jnp.all(declared.ok(jnp.asarray(v, jnp.float32), jnp))
    return ok


def _declared(hp: HParams) -> list:
    """``(name, its Number, value)`` of every number ``hp`` holds: its fields, then the plug-ins'."""
    known = declared_numbers()
    return [(f, NUMBERS[f], getattr(hp, f)) for f in HPARAM_FIELDS] + [
        (n, known[n], v) for n, v in zip(hp.plugin_names, hp.plugin_values)]  # fmt: skip

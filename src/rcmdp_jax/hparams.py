"""Numeric, vmappable hyperparameters (``HParams``) and their ranges, written once and
checked on concrete values (``validate_hparams``) and on traced ones (``hparams_ok``).

Besides the fields every program reads, ``HParams`` carries the plug-ins' own traced numbers
(``plugin.Number``, named ``"NAME.number"``, e.g. ``"pid.kp"``): a config holds those it sets
(``plugin_names``/``plugin_values``), and a program's inputs hold those its plug-ins read
(``for_program``), so that they are arguments of the compiled program like the fields."""

from __future__ import annotations

import math

from flax import struct

from rcmdp_jax.options import declared_numbers


@struct.dataclass
class HParams:
    """Numeric hyperparameters; every leaf may be an array (vmap = sweep)."""

    lr: float = 3e-4
    alpha: float = 2.0  # MDPO KL penalty alpha_0
    alpha_decay: float = 0.99  # geometric schedule factor (the domain's gamma, docs/method.md §2d)
    eta_lam: float = 1e-3  # dual step size
    lam_init: float = 5.0
    lam_clip: float = 50.0  # upper clip of lam in lagrangian mode
    eta_xi: float = 1e-7  # LTMA step size
    xi_step: float = 0.05  # ltma-norm: each step moves xi by this fraction of the box's half-width
    clip_eps: float = 0.2  # PPO clip
    gae_lambda: float = 0.95
    gamma: float = 0.99
    target_kl: float = math.inf  # PPO early stop at 1.5 * target_kl; inf = off
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    # the safety margin: every constraint rule steers towards C <= -cost_margin, not C <= 0
    # (docs/method.md §2a.4; the dual phase reads C^ + cost_margin)
    cost_margin: float = 0.0
    # the data margin on top: margin_z sigma_j / sqrt(margin_n), sigma_j the per-episode spread of
    # constraint j's C in the dual's own episodes (``dual.margin_of``); margin_n: the test episodes
    # per kernel the verdict reads (the run's n_test); margin_z 0: no data margin (the study's)
    margin_z: float = 0.0
    margin_n: float = 100.0
    # the optimiser (``learners.make_optimizer``): Adam's eps (SB3's; torch's 1e-8 for MCPMD) and
    # the global gradient-norm clip (SB3's 0.5; inf: none)
    adam_eps: float = 1e-5
    max_grad_norm: float = 0.5
    # the plug-ins' traced numbers (``plugin.Number``): names static, values traced
    plugin_names: tuple = struct.field(pytree_node=False, default=())
    plugin_values: tuple = ()

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
        return self.replace(plugin_names=names, plugin_values=tuple(self.number(n) for n in names))

    def with_all_numbers(self) -> HParams:
        """A copy with every registered plug-in number, those it does not set at their defaults:
        the one tree shape every program of the process takes (``train.resolve_hparams``)."""
        full = {k: float(n.default) for k, n in declared_numbers().items()}
        return self.with_numbers(**{**full, **self.numbers()})


# The values of a number that a program is built for, not given as an argument: ``max_grad_norm``
# inf (an optimiser without the clip: MCPMD's). A config at one and one off it are not one program
# (``family.family_key``); either way the number itself is an argument of the program.
BUILT_FOR = {"max_grad_norm": math.inf}


def built_for(hp: HParams) -> HParams:
    """``HParams()`` with the numbers of ``hp`` that are at a value of ``BUILT_FOR``: what of
    ``hp`` a program is built from (its part of ``family.family_key``)."""
    return HParams(**{f: v for f, v in BUILT_FOR.items() if getattr(hp, f) == v})


def finite_f32(x, xp):  # and representable in float32, the dtype training uses
    return xp.isfinite(x) & (xp.abs(x) <= 3.4028235e38)


# The range of every hyperparameter, once: ``(rule(x, xp), words)``; ``xp`` is NumPy for
# concrete values (``validate_hparams``) or jax.numpy for traced ones (``hparams_ok``).
HPARAM_RULES = {
    "lr": (
        lambda x, xp: finite_f32(x, xp) & (x.astype(xp.float32) > 0),
        "finite and > 0 in float32 (at least ~1.4e-45)",
    ),
    "alpha": (lambda x, xp: finite_f32(x, xp) & (x >= 0), "finite and >= 0"),
    "alpha_decay": (lambda x, xp: finite_f32(x, xp) & (x > 0), "finite and > 0"),
    "eta_lam": (lambda x, xp: finite_f32(x, xp) & (x >= 0), "finite and >= 0"),
    "lam_init": (lambda x, xp: finite_f32(x, xp) & (x >= 0), "finite and >= 0"),
    "lam_clip": (lambda x, xp: x >= 0, ">= 0 (inf: no clip)"),
    "eta_xi": (lambda x, xp: finite_f32(x, xp) & (x >= 0), "finite and >= 0"),
    "xi_step": (lambda x, xp: finite_f32(x, xp) & (x >= 0) & (x <= 1), "in [0, 1] (a fraction of the half-width)"),
    "clip_eps": (lambda x, xp: finite_f32(x, xp) & (x > 0), "finite and > 0"),
    "gae_lambda": (lambda x, xp: (x >= 0) & (x <= 1), "in [0, 1]"),
    "gamma": (lambda x, xp: (x >= 0) & (x <= 1), "in [0, 1]"),
    "target_kl": (lambda x, xp: x > 0, "> 0 (inf disables early stopping)"),
    "vf_coef": (lambda x, xp: finite_f32(x, xp) & (x >= 0), "finite and >= 0"),
    "ent_coef": (lambda x, xp: finite_f32(x, xp), "finite"),
    "cost_margin": (lambda x, xp: finite_f32(x, xp) & (x >= 0), "finite and >= 0 (in units of C)"),
    "margin_z": (lambda x, xp: (x >= 0) & (x <= 100), "in [0, 100] (standard errors of the test's mean C)"),
    "margin_n": (lambda x, xp: finite_f32(x, xp) & (x >= 1), "finite and >= 1 (test episodes per kernel)"),
    "adam_eps": (lambda x, xp: finite_f32(x, xp) & (x.astype(xp.float32) > 0), "finite and > 0 in float32"),
    "max_grad_norm": (lambda x, xp: x > 0, "> 0 (inf: no clip)"),
}


def validate_hparams(hp: HParams) -> None:
    """Range checks on concrete hyperparameters (arrays are checked element-wise)."""
    import numpy as np

    known = declared_numbers()
    names, values = hp.plugin_names, hp.plugin_values
    if not isinstance(names, tuple) or not isinstance(values, tuple) or len(names) != len(values):
        raise ValueError("HParams' plug-in numbers must be set with HParams.with_numbers(**{'NAME.number': value})")
    if unknown := [n for n in names if n not in known]:
        raise ValueError(f"no plug-in declares the number(s) {unknown}; declared: {', '.join(known) or 'none'}")
    checks = [(f, rule, what, getattr(hp, f)) for f, (rule, what) in HPARAM_RULES.items()]
    checks += [(n, known[n].ok, known[n].words(), v) for n, v in zip(names, values)]
    for field, rule, what, v in checks:
        if isinstance(v, (bool, str, list, tuple, dict)) or v is None:
            raise ValueError(f"{field} must be a number, got {v!r}")
        if np.iscomplexobj(v):
            raise ValueError(f"{field} must be a real number, got {v!r}")
        try:
            arr = np.asarray(v, dtype=float)
        except Exception:  # traced values: ``hparams_ok`` flags them inside the program
            continue
        if not np.all(rule(arr, np)):
            raise ValueError(f"{field} must be {what}, got {v!r}")


def hparams_ok(hp: HParams):
    """Traced: whether every hyperparameter is in range (a bool array; under ``vmap``, one
    per lane): what ``validate_hparams`` checks on concrete values."""
    import jax.numpy as jnp

    ok = jnp.bool_(True)
    for field, (rule, _) in HPARAM_RULES.items():
        ok = ok & jnp.all(rule(jnp.asarray(getattr(hp, field), jnp.float32), jnp))
    known = declared_numbers()
    for name, v in zip(hp.plugin_names, hp.plugin_values):
        ok = ok & jnp.all(known[name].ok(jnp.asarray(v, jnp.float32), jnp))
    return ok


# the numeric fields, in order (``plugin_names``/``plugin_values`` hold the plug-ins' numbers)
HPARAM_FIELDS = tuple(HPARAM_RULES)

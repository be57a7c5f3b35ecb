"""One typed spec per environment: ``DomainSpec`` (how to build it, its discount, λ_max,
episode lengths, cost names, test episodes) and ``LearnerSpec`` (the learners' settings
on it: networks, budgets, PPO epochs, LTMA's sizes, hyperparameters; docs/method.md §3).

The reference study's domains keep their spec beside their class (``envs.cartpole.SPEC``), the
``gymnax:`` presets build theirs from the preset (``gymnax_presets.domain_spec``) and a
user's environment gets one from ``register`` (``from_env``) or writes its own. No JAX
work here: the config reads a spec before any backend starts.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from typing import Any

import numpy as np

from rcmdp_jax import env_settings
from rcmdp_jax.hparams import finite_f32

# a run's budgets: a domain gives the policy steps of each. "short" is the default: where the
# learners have converged (docs/budgets.md) outside the study, the study's own short budget on
# its domains; "quick" a first look (a domain without one: its short budget)
REQUIRED_BUDGETS = ("short", "long")
BUDGETS = ("short", "long", "quick")


def budget_steps(budgets: dict, budget: str) -> int:
    """The policy steps of ``budget`` in a domain's ``budgets`` ("quick" falls back to "short")."""
    return int(budgets.get(budget, budgets["short"]))
# the reference study's own choices where docs/method.md §3 is silent (the defaults of ``HParams.dropout``
# and ``Config.dual_estimator``)
STUDY_CHOICES = dict(dropout=0.6, adversary="ltma", dual_estimator="cost_to_go", plugins={"ltma": {"dual_reading": "found"}})


# the data margin outside the study (docs/method.md §2a.4): the dual keeps each constraint's C^ at
# least MARGIN_Z standard errors of the test's mean below the limit, from the spread its own episodes show
MARGIN_Z = 2.0


def _default_hp() -> dict[str, float]:
    return dict(lr=3e-4, gae_lambda=0.95, eta_lam=1e-3, lam_clip=50.0, eta_xi=1e-4, margin_z=MARGIN_Z)


@dataclasses.dataclass(frozen=True)
class LearnerSpec:
    """The learners' settings on one environment. The defaults are those of every
    environment outside the study (docs/custom_envs.md); the study's domains carry the
    tables of docs/method.md §3 (``study_learner``)."""

    policy_hidden: tuple[int, ...] = (64, 64)
    critic_hidden: tuple[int, ...] = (64, 64)
    optimizer: str = "adam"
    dropout: float = 0.0
    # -Robust's method on the environments outside the study: the one docs/robustness.md's written rule
    # ranks first (the gradient search, restarted from random corners), where it runs as measured
    # (presets.robust_default: else worst-of-n)
    adversary: str = "search"
    # the start state's value: the reading under which the constrained learners keep their
    # constraint at the nominal kernel on every gymnax preset (the multiplier batch's
    # cost-to-go, the study domains' reading, breaks it on Pendulum: docs/robustness.md)
    dual_estimator: str = "start_value"
    n_dual_episodes: int = 4  # the dual's fresh episodes (PPO, MDPO) for its C^
    budgets: dict[str, int] = dataclasses.field(default_factory=lambda: {"short": 20_000, "long": 200_000})
    hp: dict[str, float] = dataclasses.field(default_factory=_default_hp)  # HParams fields
    # a plug-in's own settings on this environment, by its registered name: {"ppo": {"epochs": 50}}; each
    # plug-in declares which it takes and their defaults (``Plugin.env_settings``; rcmdp_jax.env_settings)
    plugins: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        _check_budgets(self.budgets)
        _check_hp(self.hp)
        env_settings.check_shape(self.plugins)


def _hparam_fields() -> list[str]:
    from rcmdp_jax.hparams import HPARAM_FIELDS

    return sorted(HPARAM_FIELDS)


def _learner_keys() -> list[str]:
    return sorted(f.name for f in dataclasses.fields(LearnerSpec))


def _check_budgets(budgets) -> None:
    if (
        not isinstance(budgets, dict)
        or not set(REQUIRED_BUDGETS) <= set(budgets) <= set(BUDGETS)
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in budgets.values())
    ):
        raise ValueError(f"learner['budgets'] must be {{'short': N, 'long': N}} (policy steps; 'quick': N too, else "
                         f"the short one), got {budgets!r}")  # fmt: skip


def _check_hp(hp) -> None:
    if not isinstance(hp, dict):
        raise ValueError(f"learner['hp'] must be a dict of HParams fields, got {type(hp).__name__}")
    allowed, top = _hparam_fields(), _learner_keys()
    own = {"gamma": "the environment's own: give gamma to robustify or to the DomainSpec",
           "target_kl": "PPO's: write learner={'plugins': {'ppo': {'target_kl': ...}}}"}  # fmt: skip
    for key in hp:
        if key in own:
            raise ValueError(f"learner['hp'][{key!r}] is {own[key]}")
        if key in env_settings.LEGACY_KEYS:
            name, setting = env_settings.LEGACY_KEYS[key]
            raise ValueError(f"learner['hp'][{key!r}] is not a hyperparameter: write learner={{'plugins': "
                             f"{{{name!r}: {{{setting!r}: ...}}}}}}")  # fmt: skip
        if key in top:
            raise ValueError(f"learner['hp'][{key!r}] is not a hyperparameter: write learner={{{key!r}: ...}}")
        if key not in allowed:
            raise ValueError(f"unknown hyperparameter learner['hp'][{key!r}]; allowed: {', '.join(allowed)}")
    from rcmdp_jax.hparams import HParams, validate_hparams

    for key, value in hp.items():  # one number each: not an array, a bool, a string, beyond float
        number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
        try:
            number = number and finite_f32(float(value), np)
        except OverflowError:  # an int beyond every float
            number = False
        if not number:
            raise ValueError(f"learner['hp'][{key!r}] must be a finite number in float32, got {reprlib.repr(value)}")
    try:  # the ranges too, here rather than when a run's configurations are built (blamed on --set there)
        with np.errstate(all="ignore"):
            validate_hparams(HParams().replace(**hp))
    except (ValueError, TypeError) as err:
        raise ValueError(f"learner['hp']: {err}") from None


def learner_spec(learner: dict | LearnerSpec | None = None) -> LearnerSpec:
    """The ``LearnerSpec`` of a settings dict over the defaults (its ``"hp"`` over the default
    hyperparameters); ``ValueError`` naming the allowed keys for any other key."""
    if learner is None or isinstance(learner, LearnerSpec):
        return learner or LearnerSpec()
    if not isinstance(learner, dict):
        raise ValueError(f"learner must be a dict or a LearnerSpec, got {type(learner).__name__}")
    top, hp = _learner_keys(), _hparam_fields()
    env_settings.check_shape(learner.get("plugins", {}))
    learner = env_settings.lift_legacy(learner)
    for key in learner:
        if key in hp:
            raise ValueError(f"learner[{key!r}] is a hyperparameter: write learner={{'hp': {{{key!r}: ...}}}}")
        if key not in top:
            raise ValueError(f"unknown learner key {key!r}; allowed: {', '.join(top)}")
    own_hp = learner.get("hp", {})
    _check_hp(own_hp)
    return LearnerSpec(**{**learner, "hp": {**_default_hp(), **own_hp}})


def study_learner(**table: Any) -> LearnerSpec:
    """A study domain's table (docs/method.md §3, complete: no default hyperparameter is
    kept); what §3 leaves out (dropout, robust method, multiplier estimator) is the
    study's own choice (``STUDY_CHOICES``; the defaults of ``HParams.dropout`` and ``Config.dual_estimator``)."""
    plugins = {n: {**STUDY_CHOICES["plugins"].get(n, {}), **v} for n, v in table.pop("plugins", {}).items()}
    return LearnerSpec(**{**STUDY_CHOICES, **table, "plugins": {**STUDY_CHOICES["plugins"], **plugins}})


# what both the spec and its environment state (``DomainSpec.build`` checks they agree)
_CONSTANTS = ("gamma", "lambda_max", "episode_length", "min_episode_length")


@dataclasses.dataclass(frozen=True)
class DomainSpec:
    """Everything the framework reads of one environment besides the environment itself.

    ``factory()`` builds the ``RobustEnvironment`` (a class, or a function without
    arguments). ``gamma``, ``lambda_max``, ``episode_length`` and ``min_episode_length``
    (the shortest episode any policy can end in, which sizes MCPMD's iteration slots) are
    the environment's own; ``n_test``: the robustness test's episodes per test kernel
    (docs/method.md §4); ``cost_names``: what each constraint bounds, for the report;
    ``kernel_size``: the number of the kernel's coordinates, which sizes the robustness
    test's memory (None: read from the environment, built abstractly); ``kernel_names``: what
    each entry of the flattened kernel ``xi`` perturbs, in the report's kernel text
    (``cart velocity +5 %``; empty: the environment's uncertain fields, else ``xi[i]``)."""

    factory: Callable[[], Any]
    gamma: float
    lambda_max: float
    episode_length: int
    min_episode_length: int
    learner: LearnerSpec = dataclasses.field(default_factory=LearnerSpec)
    n_test: int = 20
    cost_names: tuple[str, ...] = ()
    kernel_size: int | None = None  # the kernel's coordinates when known without building (presets)
    kernel_names: tuple[str, ...] = ()  # what each entry of xi (flattened) perturbs, for the report

    def __post_init__(self):
        if not callable(self.factory):
            raise ValueError(f"DomainSpec.factory must build the environment (a class or a function), got "
                             f"{type(self.factory).__name__}")  # fmt: skip
        for field in ("episode_length", "min_episode_length", "n_test"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"DomainSpec.{field} must be a positive integer, got {value!r}")
        size = self.kernel_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"DomainSpec.kernel_size must be None or a positive integer, got {size!r}")
        names = self.kernel_names
        if not isinstance(names, tuple) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"DomainSpec.kernel_names must be a tuple of non-empty strings, got {names!r}")
        if self.min_episode_length > self.episode_length:
            raise ValueError(f"DomainSpec.min_episode_length={self.min_episode_length} exceeds episode_length="
                             f"{self.episode_length}")  # fmt: skip
        if not (isinstance(self.gamma, float) and 0.0 < self.gamma <= 1.0):
            raise ValueError(f"DomainSpec.gamma must be a float in (0, 1], got {self.gamma!r}")
        lam = self.lambda_max
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not (finite_f32(lam, np) and lam >= 0):
            raise ValueError(f"DomainSpec.lambda_max (the multipliers' cap) must be a finite number >= 0, got {lam!r}")
        if not isinstance(self.learner, LearnerSpec):
            raise ValueError(f"DomainSpec.learner must be a LearnerSpec (envs.learner_spec(dict)), got "
                             f"{type(self.learner).__name__}")  # fmt: skip

    def build(self):
        """``factory()``, checked: a ``RobustEnvironment`` whose own constants are the spec's
        (training reads the environment's, the config the spec's); ``ValueError`` naming a
        field where they differ."""
        from rcmdp_jax.envs.base import RobustEnvironment

        env = self.factory()
        if not isinstance(env, RobustEnvironment):
            raise ValueError(f"DomainSpec.factory must return a RobustEnvironment, got {type(env).__name__}")
        for field in _CONSTANTS:
            if getattr(env, field) != getattr(self, field):
                raise ValueError(f"DomainSpec.{field}={getattr(self, field)!r} but the environment's {field} is "
                                 f"{getattr(env, field)!r}: make them agree")  # fmt: skip
        return env

    @classmethod
    def of(cls, **fields: Any) -> DomainSpec:
        """A spec from keyword fields; ``ValueError`` naming the allowed ones for any other."""
        allowed = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(fields) - set(allowed))
        if unknown:
            raise ValueError(f"unknown DomainSpec key(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
        return cls(**{**fields, "learner": learner_spec(fields.get("learner"))})


def of_class(cls, learner: LearnerSpec, n_test: int, cost_names: tuple[str, ...],
             kernel_names: tuple[str, ...] = ()) -> DomainSpec:  # fmt: skip
    """The spec of a built-in environment class: its constants (``gamma``, ``lambda_max``,
    ``episode_length``, ``min_episode_length``) are the class's own attributes."""
    constants = {field: getattr(cls, field) for field in _CONSTANTS}
    return DomainSpec(factory=cls, learner=learner, n_test=n_test, cost_names=cost_names, kernel_names=kernel_names,
                      **constants)  # fmt: skip


def from_env(env, learner: dict | LearnerSpec | None = None, n_test: int = 20) -> DomainSpec:
    """The spec of an environment instance (e.g. from ``robustify``): its own constants
    and cost names, the learner settings over the defaults."""
    from rcmdp_jax.envs.base import RobustEnvironment

    if not isinstance(env, RobustEnvironment):
        raise TypeError(f"needs a RobustEnvironment (e.g. robustify(gymnax_env, ...)), got {type(env).__name__}")
    return DomainSpec(factory=lambda: env, gamma=float(env.gamma), lambda_max=float(env.lambda_max),
                      episode_length=int(env.episode_length), min_episode_length=int(env.min_episode_length),
                      learner=learner_spec(learner), n_test=n_test,
                      cost_names=tuple(getattr(env, "cost_names", ())))  # fmt: skip


# a study domain's budget measured by docs/budgets.md's rule at a limit of its own (Inventory 1-D at a
# cost threshold of 0.13: 400,000, the study's long budget): its default (short) at any limit but the
# study's, where the study's short budget left robust lanes breaking the constraint at the nominal kernel
RULE_BUDGETS = {"inventory": 400_000}


def with_limit(spec: DomainSpec, field: str, value: float, name: str | None = None) -> DomainSpec:
    """``spec`` with its environment's constraint limit (``field`` of its default parameters,
    e.g. Inventory's ``cost_threshold``) set to ``value``; the cost names say the new limit."""
    cls = spec.factory
    if not isinstance(cls, type):
        raise ValueError(f"{field}: only a built-in domain's limit is set by name, not {cls!r}'s")
    base = cls.default_params.fget

    def default_params(self):
        return base(self).replace(**{field: value})

    limited = type(cls.__name__, (cls,), {"default_params": property(default_params), "__module__": cls.__module__})
    old = getattr(base(None), field)
    names = tuple(n.replace(f"{old:g}", f"{value:g}") if old and f"{old:g}" in n else f"{n}{-value:+g}"
                  for n in spec.cost_names)  # fmt: skip
    learner = off_study(spec.learner, RULE_BUDGETS.get(name))
    return dataclasses.replace(spec, factory=limited, cost_names=names, learner=learner)


def off_study(learner: LearnerSpec, converged: int | None = None) -> LearnerSpec:
    """A study domain's learner settings at a setting the study did not run (another limit): the
    study's method where the study is reproduced, the safe one elsewhere. LTMA reads ``C^`` on the
    guarded kernel (the constraint's own worse of the kernel found and the nominal one), not the
    study's kernel found alone, under which robust lanes broke the constraint at the nominal kernel
    in more seeds than the plain ones (docs/robustness_findings.md); the default budget is the one
    the budget rule measured on the domain (``converged``, the study's short kept as ``quick``)."""
    plugins = {**learner.plugins, "ltma": {**learner.plugins.get("ltma", {}), "dual_reading": "guarded"}}
    budgets = learner.budgets
    if converged is not None:
        budgets = {**budgets, "quick": budgets["short"], "short": converged, "long": max(budgets["long"], 2 * converged)}
    return dataclasses.replace(learner, plugins=plugins, budgets=budgets)


# what a user's file may return for ``--env FILE.py:NAME`` as a dict: ``from_env``'s arguments
USER_KEYS = ("env", "learner", "n_test")


def from_dict(obj: dict) -> DomainSpec:
    """The spec of ``{"env": ..., "learner": {...}, "n_test": N}``; ``ValueError`` naming
    the allowed keys for any other."""
    unknown = sorted(set(obj) - set(USER_KEYS))
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(USER_KEYS)}")
    return from_env(obj.get("env"), obj.get("learner"), obj.get("n_test", 20))


__all__ = ["DomainSpec", "LearnerSpec", "USER_KEYS", "from_dict", "from_env", "learner_spec", "of_class",
           "study_learner"]  # fmt: skip

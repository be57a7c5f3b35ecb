"""Robust-constrained environments with differentiable parametric kernels (gymnax API).

The one place environments are named: the study's domains (``ENV_NAMES``), the
``gymnax:`` presets (any gymnax classic-control env made robust-constrained, see
``envs.gymnax_presets``) and environments a user ``register``s (e.g. a ``robustify``-ed
gymnax env of their own). Each has one ``DomainSpec`` (``spec(name)``, see ``envs.spec``):
what the config, the presets and the robustness test read of it (``envs.domain``). Modules are imported
lazily, so checking a study domain's name (the config does, before anything starts JAX)
imports no JAX code.
"""

from importlib import import_module
from typing import Any

# name -> "module:SPEC" of each built-in domain, in the study's order (a new built-in
# environment: its module with a DomainSpec, and one line here)
_BUILTIN = {
    "cartpole": "rcmdp_jax.envs.cartpole:SPEC",
    "inventory": "rcmdp_jax.envs.inventory:SPEC",
    "inventory3d": "rcmdp_jax.envs.inventory:SPEC_3D",
}
ENV_NAMES = tuple(_BUILTIN)
# each built-in domain's constraint limit, a field of its parameters: ``NAME@FIELD=NUMBER`` (e.g.
# ``inventory@cost_threshold=0.13``) is the domain with that limit, everything else the same
LIMITS = {"cartpole": "velocity_limit", "inventory": "cost_threshold", "inventory3d": "cost_threshold"}
# the limits that bound a magnitude (CartPole's |x_dot| <= velocity_limit): below 0 they can never hold
MAGNITUDE_LIMITS = ("cartpole",)
FLOAT32_MAX = 3.4028235e38  # a limit beyond it is inf in float32, the dtype training uses
GYMNAX_PREFIX = "gymnax:"
BRAX_PREFIX = "brax:"  # brax environments (the optional extra ``brax``: envs.brax_presets)

_REGISTERED: dict[str, Any] = {}  # user environments: name -> DomainSpec

_PUBLIC = {
    "RobustEnvironment": "rcmdp_jax.envs.base",
    "RobustState": "rcmdp_jax.envs.base",
    "CartPole": "rcmdp_jax.envs.cartpole",
    "CartPoleParams": "rcmdp_jax.envs.cartpole",
    "InventoryManagement": "rcmdp_jax.envs.inventory",
    "InventoryManagement3D": "rcmdp_jax.envs.inventory",
    "InventoryParams": "rcmdp_jax.envs.inventory",
    "Inventory3DParams": "rcmdp_jax.envs.inventory",
    "robustify": "rcmdp_jax.envs.gymnax_wrapper",
    "cost_minimising": "rcmdp_jax.envs.minimise_cost",
    "indicator": "rcmdp_jax.envs.unsafe_steps",
    "with_gamma_c": "rcmdp_jax.envs.unsafe_steps",
    "relative": "rcmdp_jax.envs.gymnax_inputs",
    "absolute": "rcmdp_jax.envs.gymnax_inputs",
    "RobustGymnax": "rcmdp_jax.envs.gymnax_wrapper",
    "gymnax_name": "rcmdp_jax.envs.gymnax_presets",
    "brax_name": "rcmdp_jax.envs.brax_presets",
    "speed_cost": "rcmdp_jax.envs.brax_wrapper",
    "velocity_cost": "rcmdp_jax.envs.brax_wrapper",
    "DomainSpec": "rcmdp_jax.envs.domain",
    "LearnerSpec": "rcmdp_jax.envs.domain",
    "learner_spec": "rcmdp_jax.envs.domain",
}


def check_name(name: str) -> None:
    """Raise ``ValueError`` naming the choices unless ``name`` is an environment."""
    if not isinstance(name, str):
        raise ValueError(f"env must be a name (str), got {type(name).__name__}")
    if name in _BUILTIN or name in _REGISTERED:
        return
    if name.partition("@")[0] in _BUILTIN:
        split_limit(name)
        return
    if name.startswith(GYMNAX_PREFIX):
        import_module("rcmdp_jax.envs.gymnax_presets").parse_gymnax_name(name)
        return
    if name.startswith(BRAX_PREFIX):
        import_module("rcmdp_jax.envs.brax_presets").parse_brax_name(name)
        return
    from rcmdp_jax.envs.brax_presets import PRESETS as BRAX
    from rcmdp_jax.envs.gymnax_presets import PRESETS

    from rcmdp_jax.plugin import closest

    names = [*ENV_NAMES, *(GYMNAX_PREFIX + k for k in PRESETS), *(BRAX_PREFIX + k for k in BRAX), *_REGISTERED]
    raise ValueError(f"unknown environment {name!r}{closest(name, names)}; valid names: {', '.join(names)}")


def split_limit(name: str) -> tuple[str, str, float] | None:
    """``NAME@FIELD=NUMBER`` of a built-in domain -> ``(NAME, FIELD, NUMBER)`` (None for any other
    name); ``ValueError`` naming the spelling when FIELD is not the domain's limit (``LIMITS``)
    or NUMBER not a finite number."""
    base, at, rest = name.partition("@")
    if not at or base not in _BUILTIN:
        return None
    field, eq, raw = rest.partition("=")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if field != LIMITS[base] or not eq or value != value or abs(value) > FLOAT32_MAX:
        raise ValueError(f"environment {name!r}: write {base}@{LIMITS[base]}=NUMBER (the constraint's limit, a "
                         f"finite number in float32; {base}'s own is in docs/method.md)")  # fmt: skip
    if base in MAGNITUDE_LIMITS and value < 0:
        raise ValueError(f"environment {name!r}: {field} must be >= 0 (it bounds a magnitude, which a negative "
                         "limit can never keep)")  # fmt: skip
    return base, field, value


def check(name: str) -> None:
    """``check_name``, and for a ``gymnax:`` or ``brax:`` name its fields, widths and costs,
    the environment built (gymnax abstractly; brax for real): ``ValueError`` naming what is wrong."""
    check_name(name)
    if name.startswith(GYMNAX_PREFIX):
        import_module("rcmdp_jax.envs.gymnax_presets").check(name)
    elif name.startswith(BRAX_PREFIX):
        import_module("rcmdp_jax.envs.brax_presets").check(name)


def cost_names(name: str, m: int) -> tuple[str, ...]:
    """The names of environment ``name``'s ``m`` constraint costs: its spec's, ``C_1, C_2, ...`` where
    it names none, or another number of them (or is not known)."""
    try:
        names = tuple(spec(name).cost_names)
    except (ValueError, TypeError):
        names = ()
    return names if len(names) == m else tuple(f"C_{j + 1}" for j in range(m))


def spec(name: str):
    """The ``DomainSpec`` of environment ``name``, without building the environment: a
    built-in domain's ``SPEC``, a ``gymnax:`` name's (``gymnax_presets.domain_spec``) or
    the one ``register`` made."""
    check_name(name)
    if name in _BUILTIN:
        module, _, attr = _BUILTIN[name].partition(":")
        return getattr(import_module(module), attr)
    limit = split_limit(name)
    if limit is not None:
        return import_module("rcmdp_jax.envs.domain").with_limit(spec(limit[0]), *limit[1:], name=limit[0])
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name.startswith(BRAX_PREFIX):
        return import_module("rcmdp_jax.envs.brax_presets").domain_spec(name)
    return import_module("rcmdp_jax.envs.gymnax_presets").domain_spec(name)


def make(name: str):
    """``(env, default_params)`` for an environment name, like ``gymnax.make``."""
    env = spec(name).build()
    return env, env.default_params


def register(name: str, env, *, learner: dict | None = None, n_test: int = 20) -> str:
    """Make an environment trainable by name in this process: ``preset(name, "PPO-Lag")``,
    ``make_train``, ``make_eval``; the registration of every plug-in kind, ``register(name,
    what)`` (``learners``, ``constraints`` and ``adversary`` take a class). ``env`` is a
    ``DomainSpec`` (then nothing else is given: the spec carries its learner settings, the
    defaults of a config on it, and ``n_test``), or a ``RobustEnvironment`` (e.g. from
    ``robustify``) with ``learner``, settings over the defaults (fields of ``LearnerSpec``,
    hyperparameters under ``"hp"``; other keys are refused), and ``n_test``, the robustness
    test's episodes per kernel. Returns ``name``."""
    from rcmdp_jax.envs.domain import DomainSpec, from_env

    if not isinstance(name, str) or not name.strip() or name in _BUILTIN or name.startswith((GYMNAX_PREFIX, BRAX_PREFIX)):
        raise ValueError(f"register: {name!r} must be a name with a character other than whitespace, not a built-in "
                         "domain's, gymnax:... or brax:... (a name registered before is replaced)")  # fmt: skip
    if (base := name.partition("@")[0]) in _BUILTIN:  # NAME@FIELD=NUMBER: a built-in domain at another limit
        raise ValueError(f"register: {name!r} is how a built-in domain is named at another limit (NAME@FIELD=NUMBER, "
                         f"e.g. {base}@{LIMITS[base]}=0.2): choose a name without '@' after a built-in domain's")  # fmt: skip
    try:
        if isinstance(env, DomainSpec):
            if learner is not None or n_test != 20:
                raise ValueError("a DomainSpec carries its learner settings and n_test: give them in the spec")
            own = env
        else:
            own = from_env(env, learner, n_test)
    except (ValueError, TypeError) as err:
        raise type(err)(f"register: {err}") from None
    _REGISTERED[name] = own
    return name


def unregister(name: str) -> None:
    """Remove environment ``name`` that ``register`` made (the built-in ones stay)."""
    if name not in _REGISTERED:
        what = "built-in" if name in _BUILTIN else "not registered"
        raise ValueError(f"environment {name!r} is {what}; registered: {', '.join(_REGISTERED) or 'none'}")
    del _REGISTERED[name]


def registered() -> tuple[str, ...]:
    """The names ``register`` made in this process."""
    return tuple(_REGISTERED)


def registered_spec(name: str):
    """The ``DomainSpec`` that ``register`` gave ``name`` in this process, or None."""
    return _REGISTERED.get(name)


def gymnax_has_costs(name: str) -> bool:
    """Whether a ``gymnax:`` or ``brax:`` name carries constraint costs (see ``gymnax_any``)."""
    if name.startswith(BRAX_PREFIX):
        return import_module("rcmdp_jax.envs.brax_presets").has_costs(name)
    return import_module("rcmdp_jax.envs.gymnax_presets").has_costs(name)


def __getattr__(name):
    if name == "REGISTRY":  # the built-in domains' specs, by name
        return {n: spec(n) for n in ENV_NAMES}
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'rcmdp_jax.envs' has no attribute {name!r}")


__all__ = ["BRAX_PREFIX", "ENV_NAMES", "GYMNAX_PREFIX", "REGISTRY", "check", "check_name", "gymnax_has_costs", "make", "register", "registered", "spec", "unregister",
           *_PUBLIC]  # fmt: skip

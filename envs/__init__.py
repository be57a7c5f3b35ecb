"""Robust-constrained environments with differentiable parametric kernels (gymnax API).

The one place environments are named: the study's domains (``ENV_NAMES``), the
``gymnax:`` presets (any gymnax classic-control env made robust-constrained, see
``envs.gymnax_presets``) and environments a user ``register``s (e.g. a ``robustify``-ed
gymnax env of their own). Each environment is the one source of its episode length and
discount (``episode_length``, ``gamma``; the config's presets read them). Modules are
imported lazily, so checking a study domain's name (the config does, before anything
starts JAX) imports no JAX code.
"""

from importlib import import_module
from typing import Any

# name -> (module, class), in the study's order
_CLASSES = {
    "cartpole": ("rcmdp_jax.envs.cartpole", "CartPole"),
    "inventory": ("rcmdp_jax.envs.inventory", "InventoryManagement"),
    "inventory3d": ("rcmdp_jax.envs.inventory", "InventoryManagement3D"),
}
ENV_NAMES = tuple(_CLASSES)
GYMNAX_PREFIX = "gymnax:"

# user environments: name -> (env, learner settings or None, test episodes per kernel)
_REGISTERED: dict[str, tuple[Any, dict | None, int]] = {}

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
    "relative": "rcmdp_jax.envs.gymnax_wrapper",
    "absolute": "rcmdp_jax.envs.gymnax_wrapper",
    "RobustGymnax": "rcmdp_jax.envs.gymnax_wrapper",
    "gymnax_name": "rcmdp_jax.envs.gymnax_presets",
}


def check_name(name: str) -> None:
    """Raise ``ValueError`` naming the choices unless ``name`` is an environment."""
    if not isinstance(name, str):
        raise ValueError(f"env must be a name (str), got {type(name).__name__}")
    if name in _CLASSES or name in _REGISTERED:
        return
    if name.startswith(GYMNAX_PREFIX):
        import_module("rcmdp_jax.envs.gymnax_presets").parse_gymnax_name(name)
        return
    from rcmdp_jax.envs.gymnax_presets import PRESETS

    names = [*ENV_NAMES, *(GYMNAX_PREFIX + k for k in PRESETS), *_REGISTERED]
    raise ValueError(f"unknown environment {name!r}; valid names: {', '.join(names)}")


def env_class(name: str):
    """What the config reads of environment ``name`` (``episode_length``,
    ``min_episode_length``, ``gamma``, ``lambda_max``), without JAX work: a study
    domain's class, a ``gymnax:`` preset's ``EnvInfo``, or a registered instance."""
    check_name(name)
    if name in _CLASSES:
        module, cls = _CLASSES[name]
        return getattr(import_module(module), cls)
    if name in _REGISTERED:
        return _REGISTERED[name][0]
    return import_module("rcmdp_jax.envs.gymnax_presets").info(name)


def make(name: str):
    """``(env, default_params)`` for an environment name, like ``gymnax.make``."""
    check_name(name)
    if name in _CLASSES:
        env = env_class(name)()
    elif name in _REGISTERED:
        env = _REGISTERED[name][0]
    else:
        env = import_module("rcmdp_jax.envs.gymnax_presets").make_gymnax(name)
    return env, env.default_params


def register(name: str, env, learner: dict | None = None, n_test: int = 20) -> str:
    """Make ``env`` (a ``RobustEnvironment``, e.g. from ``robustify``) trainable by name in
    this process: ``preset(name, "PPO-Lag")``, ``make_train``, ``make_eval``. ``learner``
    overrides the default learner settings: keys of ``presets.DEFAULT_LEARNER``, its
    hyperparameters under ``"hp"`` (``HParams`` fields); other keys are refused."""
    from rcmdp_jax.envs.base import RobustEnvironment

    if not isinstance(env, RobustEnvironment):
        raise TypeError(f"register needs a RobustEnvironment (e.g. robustify(gymnax_env, ...)), got "
                        f"{type(env).__name__}")  # fmt: skip
    if not isinstance(name, str) or not name or name in _CLASSES or name.startswith(GYMNAX_PREFIX):
        raise ValueError(f"register: {name!r} must be a new non-empty name (not a study domain or gymnax:...)")
    if isinstance(n_test, bool) or not isinstance(n_test, int) or n_test < 1:
        raise ValueError(f"register: n_test must be a positive integer, got {n_test!r}")
    check_learner(learner)
    _REGISTERED[name] = (env, None if learner is None else dict(learner), n_test)
    return name


def check_learner(learner: dict | None) -> None:
    """``ValueError`` naming the allowed keys unless ``learner`` holds only keys of
    ``presets.DEFAULT_LEARNER`` (hyperparameters, ``HParams`` fields, under ``"hp"``)."""
    if learner is None:
        return
    import dataclasses

    from rcmdp_jax.hparams import HParams
    from rcmdp_jax.presets import DEFAULT_LEARNER

    if not isinstance(learner, dict):
        raise ValueError(f"register: learner must be a dict, got {type(learner).__name__}")
    top, hp = sorted(DEFAULT_LEARNER), sorted(f.name for f in dataclasses.fields(HParams))
    for key in learner:
        if key in hp:
            raise ValueError(
                f"register: learner[{key!r}] is a hyperparameter: write learner={{'hp': {{{key!r}: ...}}}}"
            )
        if key not in top:
            raise ValueError(f"register: unknown learner key {key!r}; allowed: {', '.join(top)}")
    inner = learner.get("hp", {})
    if not isinstance(inner, dict):
        raise ValueError(f"register: learner['hp'] must be a dict of HParams fields, got {type(inner).__name__}")
    for key in inner:
        if key in top:
            raise ValueError(
                f"register: learner['hp'][{key!r}] is not a hyperparameter: write learner={{{key!r}: ...}}"
            )
        if key not in hp:
            raise ValueError(f"register: unknown hyperparameter learner['hp'][{key!r}]; allowed: {', '.join(hp)}")
    budgets = learner.get("budgets", DEFAULT_LEARNER["budgets"])
    if (
        not isinstance(budgets, dict)
        or set(budgets) != {"short", "long"}
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in budgets.values())
    ):
        raise ValueError(
            f"register: learner['budgets'] must be {{'short': N, 'long': N}} (policy steps), got {budgets!r}"
        )


def registered() -> tuple[str, ...]:
    """The names ``register`` made in this process."""
    return tuple(_REGISTERED)


def gymnax_has_costs(name: str) -> bool:
    """Whether a ``gymnax:`` name carries constraint costs (see ``gymnax_any``)."""
    return import_module("rcmdp_jax.envs.gymnax_presets").has_costs(name)


def learner_settings(name: str) -> dict | None:
    """The learner settings a non-study environment carries (``None``: the defaults)."""
    check_name(name)
    if name in _REGISTERED:
        return _REGISTERED[name][1]
    if name.startswith(GYMNAX_PREFIX):
        return import_module("rcmdp_jax.envs.gymnax_presets").preset_of(name).learner
    return None


def test_episodes(name: str) -> int | None:
    """Episodes per test kernel of a non-study environment (study domains: docs/method.md §4)."""
    if name in _REGISTERED:
        return _REGISTERED[name][2]
    if name.startswith(GYMNAX_PREFIX):
        return import_module("rcmdp_jax.envs.gymnax_presets").preset_of(name).n_test
    return None


def __getattr__(name):
    if name == "REGISTRY":
        return {n: env_class(n) for n in ENV_NAMES}
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'rcmdp_jax.envs' has no attribute {name!r}")


__all__ = ["ENV_NAMES", "GYMNAX_PREFIX", "REGISTRY", "check_name", "env_class", "gymnax_has_costs", "learner_settings",
           "make", "register", "registered", "test_episodes", *_PUBLIC]  # fmt: skip

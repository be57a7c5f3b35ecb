"""Robust-constrained environments with differentiable parametric kernels (gymnax API).

The one place the domains are named (``ENV_NAMES``); each environment class is the
one source of its episode length and discount (``episode_length``, ``gamma``; the
presets read them). The classes are imported lazily, so reading ``ENV_NAMES`` (the
config does, to check a name before anything starts JAX) imports no JAX code.
"""

from importlib import import_module

# name -> (module, class), in the study's order
_CLASSES = {
    "cartpole": ("rcmdp_jax.envs.cartpole", "CartPole"),
    "inventory": ("rcmdp_jax.envs.inventory", "InventoryManagement"),
    "inventory3d": ("rcmdp_jax.envs.inventory", "InventoryManagement3D"),
}
ENV_NAMES = tuple(_CLASSES)

_PUBLIC = {
    "RobustEnvironment": "rcmdp_jax.envs.base",
    "RobustState": "rcmdp_jax.envs.base",
    "CartPole": "rcmdp_jax.envs.cartpole",
    "CartPoleParams": "rcmdp_jax.envs.cartpole",
    "InventoryManagement": "rcmdp_jax.envs.inventory",
    "InventoryManagement3D": "rcmdp_jax.envs.inventory",
    "InventoryParams": "rcmdp_jax.envs.inventory",
    "Inventory3DParams": "rcmdp_jax.envs.inventory",
}


def env_class(name: str):
    """The environment class of ``name`` in ``ENV_NAMES``."""
    if name not in _CLASSES:
        raise ValueError(f"unknown environment {name!r}; valid names: {', '.join(ENV_NAMES)}")
    module, cls = _CLASSES[name]
    return getattr(import_module(module), cls)


def make(name: str):
    """``(env, default_params)`` for ``name`` in ``ENV_NAMES``, like ``gymnax.make``."""
    env = env_class(name)()
    return env, env.default_params


def __getattr__(name):
    if name == "REGISTRY":
        return {n: env_class(n) for n in ENV_NAMES}
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'rcmdp_jax.envs' has no attribute {name!r}")


__all__ = ["ENV_NAMES", "REGISTRY", "env_class", "make", *_PUBLIC]

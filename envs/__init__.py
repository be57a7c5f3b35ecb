"""Robust-constrained environments with differentiable parametric kernels (gymnax API)."""

from rcmdp_jax.envs.base import RobustEnvironment, RobustState
from rcmdp_jax.envs.cartpole import CartPole, CartPoleParams
from rcmdp_jax.envs.inventory import (
    Inventory3DParams,
    InventoryManagement,
    InventoryManagement3D,
    InventoryParams,
)

REGISTRY = {
    "cartpole": CartPole,
    "inventory": InventoryManagement,
    "inventory3d": InventoryManagement3D,
}
ENV_NAMES = tuple(REGISTRY)


def make(name: str):
    """``(env, default_params)`` for ``name`` in ``ENV_NAMES``, like ``gymnax.make``."""
    if name not in REGISTRY:
        raise ValueError(f"unknown environment {name!r}; valid names: {', '.join(ENV_NAMES)}")
    env = REGISTRY[name]()
    return env, env.default_params


__all__ = [
    "ENV_NAMES",
    "REGISTRY",
    "CartPole",
    "CartPoleParams",
    "Inventory3DParams",
    "InventoryManagement",
    "InventoryManagement3D",
    "InventoryParams",
    "RobustEnvironment",
    "RobustState",
    "make",
]

"""The uncertainty box ``U = {xi : |xi - xi_c| <= kappa}`` (docs/method.md §1): its
projection, its corners, uniform draws from it and the robustness test's kernels
(``distorted_kernels``), once
for the environments (``envs.base``), the robust methods (``rcmdp_jax.adversary``) and the
worst-case search (``rcmdp_jax.worst_case``). Arrays are ``xi``-shaped, ``[*xi]``."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np


def reach(kappa):
    """How far ``xi`` may lie from ``xi_c`` and count as inside the box: ``kappa`` with a
    relative 1e-6 and an absolute 1e-9 of slack for the float32 rounding of a projected
    ``xi`` (numpy or traced arrays alike)."""
    return kappa * (1 + 1e-6) + 1e-9


def project(xi: jax.Array, xi_c: jax.Array, kappa: jax.Array) -> jax.Array:
    """Euclidean projection onto the box (element-wise clip)."""
    return jnp.clip(xi, xi_c - kappa, xi_c + kappa)


def sign_directions(n: int) -> np.ndarray:
    """All ``2^n`` sign vectors in ``{-1, +1}^n``, shape ``(2^n, n)``."""
    return np.array(list(itertools.product((-1.0, 1.0), repeat=n)), dtype=np.float32)


def corners(xi_c, kappa):
    """The ``2^n`` corners ``xi_c + kappa * d``, ``[2^n, *xi]`` (numpy in, numpy out)."""
    d = sign_directions(int(np.prod(np.shape(xi_c)))).reshape((-1,) + tuple(np.shape(xi_c)))
    if isinstance(xi_c, np.ndarray) and isinstance(kappa, np.ndarray):
        return xi_c + kappa * d
    return xi_c + kappa * jnp.asarray(d)


def uniform(key, xi_c: jax.Array, kappa: jax.Array, n: int) -> jax.Array:
    """``n`` kernels drawn uniformly from the box: ``[n, *xi]``."""
    u = jax.random.uniform(key, (n,) + jnp.shape(xi_c), minval=-1.0, maxval=1.0)
    return xi_c + kappa * u


def distorted_kernels(xi_c: jax.Array, kappa: jax.Array, levels: jax.Array) -> jax.Array:
    """The robustness test's kernels ``xi_c + level^2 * kappa * d`` over ``levels x
    directions``: ``[len(levels), 2^n, *xi]``."""
    levels = jnp.asarray(levels, dtype=jnp.float32)
    shape = jnp.shape(xi_c)
    dirs = jnp.asarray(sign_directions(int(np.prod(shape))))
    d = dirs.reshape((dirs.shape[0],) + shape)
    return xi_c + (levels**2)[:, None].reshape((-1, 1) + (1,) * len(shape)) * (kappa * d)[None]

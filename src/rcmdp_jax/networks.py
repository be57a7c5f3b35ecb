"""Policy and critic networks (flax linen) returning distrax distributions.

Initialisation (``Config.init``): ``"orthogonal"`` is Stable-Baselines3's (orthogonal
weights, gain sqrt(2) on hidden layers, 0.01 on the policy output, 1.0 on the value
output, zero biases), used by PPO and MDPO; ``"torch"`` is PyTorch's ``nn.Linear``
default (weights and biases uniform in ``±1/sqrt(fan_in)``), used by MCPMD as in its
reference code; ``"lecun"`` is flax's default.

Dropout sits after the first hidden layer and is active only when
``train=True`` (gradient updates); rollouts and evaluation use ``train=False``.
Its rate is a number of the program (``HParams.dropout``; a config at 0 builds
networks without the layer). Dropout masks dominate the random bits of an update;
by default they come from a cheap counter-based hash (``hash_bits``), cheaper than
threefry bits on a CPU (docs/performance.md); ``Config.dropout_rng = "threefry"``
draws them as flax's ``nn.Dropout`` does (``jax.random.bernoulli``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def _fmix32(x: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finaliser: a bijective avalanche mix of uint32 words."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def hash_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Counter-based uint32 bits: ``fmix32(fmix32(i ^ a) + b)`` for element index ``i``
    and words ``a, b`` of ``key``. About 10 integer ops per element, versus ~100 for
    threefry: on the CPU this makes dropout masks several times cheaper."""
    data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    data = data.reshape(-1).astype(jnp.uint32)
    a, b = _fmix32(data[0] ^ jnp.uint32(0x9E3779B9)), _fmix32(data[-1] + jnp.uint32(0x7F4A7C15))
    i = jax.lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)
    return _fmix32(_fmix32(i ^ a) + b)


def dropout_form(rate) -> tuple:
    """Dropout at ``rate`` as the networks read it in a program (``Dropout``): ``(keep,
    scale, cut_high, cut_low)``, the keep probability ``1 - rate`` in float32, the kept units'
    scale ``1 / keep`` in float32 and the hash masks' uint32 cut ``round(rate 2^32)`` in two 16-bit
    halves (each exact in float32). Computed in float64 where ``rate`` is concrete (a config's, a
    family's table): the numbers a program built for that one rate computed (``1 - rate`` and the
    cut rounded from the double, not from float32's rate, which is one ulp off; XLA turns a
    division by a constant into a multiply by its float32 reciprocal); in float32 where traced."""
    try:
        r = np.asarray(rate, np.float64)
    except Exception:  # traced (a sweep the caller vmaps): float32's numbers
        r = jnp.asarray(rate, jnp.float32)
        cut = jnp.round(r * 2.0**32)
        high = jnp.floor(cut / 2.0**16)
        return 1.0 - r, 1.0 / (1.0 - r), high, cut - high * 2.0**16
    keep = (1.0 - r).astype(np.float32)
    cut = np.minimum(np.round(r * 2.0**32), 2.0**32 - 1)
    return keep, np.float32(1) / keep, cut // 2**16, cut % 2**16


class Dropout(nn.Module):
    """Inverted dropout as ``flax.linen.Dropout`` (drop with probability ``rate``, scale kept
    units by ``1 / (1 - rate)``, identity when ``deterministic``) at a rate that may be traced:
    ``rate`` a float or its program form (``dropout_form``). flax's module cannot take a
    traced rate (it tests ``rate == 0.0`` in Python); this one draws the mask as flax does
    (``jax.random.bernoulli`` of the keep probability, ``bits="threefry"``) or from ``hash_bits``
    (``bits="hash"``: kept where the bits reach the cut ``round(rate 2^32)``); kept units times
    ``1 / (1 - rate)`` in float32, what XLA makes of flax's division by the constant ``1 - rate``."""

    rate: Any
    bits: str = "hash"
    deterministic: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.deterministic or (isinstance(self.rate, (int, float)) and self.rate == 0.0):
            return x
        keep, scale, high, low = dropout_form(self.rate) if isinstance(self.rate, (int, float)) else self.rate
        key = self.make_rng("dropout")
        if self.bits == "hash":
            cut = (jnp.asarray(high).astype(jnp.uint32) << 16) | jnp.asarray(low).astype(jnp.uint32)
            return jnp.where(hash_bits(key, x.shape) >= cut, x * scale, jnp.zeros_like(x))
        return jax.lax.select(jax.random.bernoulli(key, keep, x.shape), x * scale, jnp.zeros_like(x))


def q_factor(z: jax.Array) -> jax.Array:
    """``Q`` of ``z = QR`` (``z`` ``[m, k]``, ``m >= k``) with ``R``'s diagonal positive:
    Gram-Schmidt with one re-orthogonalisation (CGS2: orthonormal to float precision),
    as plain XLA operations. ``jnp.linalg.qr`` calls LAPACK, and several LAPACK calls
    in one XLA CPU program (the layers of an init, vmapped) deadlocked jaxlib 0.10.2
    now and then (docs/known_issues.md)."""
    k = z.shape[1]

    def column(j, q):
        v = z[:, j]
        earlier = (jnp.arange(k) < j).astype(z.dtype)
        for _ in range(2):
            v = v - q @ (earlier * (q.T @ v))
        return q.at[:, j].set(v / jnp.linalg.norm(v))

    return jax.lax.fori_loop(0, k, column, jnp.zeros_like(z))


def orthogonal(gain: float):
    """The orthogonal initializer of ``jax.nn.initializers.orthogonal(gain)`` for a
    ``Dense`` kernel (same normal draw, same matrix up to float rounding), its QR
    done by ``q_factor``."""

    def init(key, shape, dtype=jnp.float32):
        n_rows, n_cols = shape
        q = q_factor(jax.random.normal(key, (max(n_rows, n_cols), min(n_rows, n_cols)), dtype))
        return jnp.asarray(gain, dtype) * (q.T if n_rows < n_cols else q)

    return init


def dense(width: int, fan_in: int, init: str, gain: float) -> nn.Dense:
    """A ``Dense`` layer initialised by scheme ``init`` (``gain``: orthogonal only)."""
    if init == "orthogonal":
        return nn.Dense(width, kernel_init=orthogonal(gain), bias_init=nn.initializers.zeros)
    if init == "torch":
        bound = 1.0 / math.sqrt(fan_in)
        uniform = lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)
        return nn.Dense(width, kernel_init=uniform, bias_init=uniform)
    return nn.Dense(width)


class MLP(nn.Module):
    hidden: Sequence[int]
    out_dim: int
    dropout: Any = None  # the rate after the first hidden layer, or its program form; None or 0: none
    dropout_rng: str = "hash"  # the mask bits: "hash" or "threefry" (``Dropout``)
    init_scheme: str = "lecun"
    out_gain: float = 1.0  # orthogonal gain of the output layer

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        for i, width in enumerate(self.hidden):
            x = nn.relu(dense(width, x.shape[-1], self.init_scheme, math.sqrt(2.0))(x))
            if i == 0 and self.dropout is not None and not (isinstance(self.dropout, float) and self.dropout == 0.0):
                name = "HashDropout_0" if self.dropout_rng == "hash" else "Dropout_0"  # their random keys' path
                x = Dropout(self.dropout, self.dropout_rng, deterministic=not train, name=name)(x)
        return dense(self.out_dim, x.shape[-1], self.init_scheme, self.out_gain)(x)


class Actor(nn.Module):
    """Softmax policy over ``action_dim`` actions, or a Gaussian with a
    state-independent log-std (initialised to 0) when ``discrete=False``."""

    action_dim: int
    hidden: Sequence[int]
    discrete: bool = True
    dropout: Any = None
    dropout_rng: str = "hash"
    init_scheme: str = "lecun"

    @nn.compact
    def __call__(self, obs: jax.Array, train: bool = False) -> distrax.Distribution:
        out = MLP(self.hidden, self.action_dim, self.dropout, self.dropout_rng, self.init_scheme, 0.01)(obs, train)
        if self.discrete:
            return distrax.Categorical(logits=out)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return distrax.MultivariateNormalDiag(out, jnp.exp(log_std) * jnp.ones_like(out))


class Critic(nn.Module):
    """Values of the reward and of each constraint-cost stream: ``(..., 1 + m)``."""

    num_heads: int
    hidden: Sequence[int]
    dropout: Any = None
    dropout_rng: str = "hash"
    init_scheme: str = "lecun"

    @nn.compact
    def __call__(self, obs: jax.Array, train: bool = False) -> jax.Array:
        return MLP(self.hidden, self.num_heads, self.dropout, self.dropout_rng, self.init_scheme, 1.0)(obs, train)


def build_networks(cfg, env, hp=None) -> tuple[Actor, Critic]:
    """The actor and critic of config ``cfg`` (an ``rcmdp_jax.Config``) on ``env``: the
    critic has one value head for the return and one per constraint; as the config's learner
    wraps them (``Learner.networks``). Their dropout is ``hp``'s (a program's, may be traced;
    None: ``cfg``'s); a config at 0 has none (``hparams.BUILT_FOR``)."""
    hp = cfg.hparams if hp is None else hp
    rate = None if cfg.hparams.dropout == 0.0 else (hp.dropout_form or dropout_form(hp.dropout))
    actor = Actor(env.action_dim, tuple(cfg.policy_hidden), env.discrete, rate, cfg.dropout_rng, cfg.init)
    critic = Critic(1 + env.num_constraints, tuple(cfg.critic_hidden), rate, cfg.dropout_rng, cfg.init)
    from rcmdp_jax import learners

    return learners.get(cfg.learner).networks(actor, critic)  # a learner's own wrapping (Learner.networks)

"""rcmdp_jax: robust constrained MDPs in JAX, fused and vectorised.

The public names are imported lazily, so ``import rcmdp_jax.sharding`` can split
the CPU into devices (``sharding.split_cpu``) before anything starts JAX's
backends (importing gymnax does).
"""

from importlib import import_module

from rcmdp_jax import cpu_prng

cpu_prng.apply_default()  # same random bits, faster CPU code (see cpu_prng)

_PUBLIC = {
    "ALGORITHMS": "rcmdp_jax.config",
    "Config": "rcmdp_jax.config",
    "HParams": "rcmdp_jax.config",
    "parse_algorithm": "rcmdp_jax.config",
    "preset": "rcmdp_jax.config",
    "TrainResult": "rcmdp_jax.train",
    "TrainState": "rcmdp_jax.train",
    "make_train": "rcmdp_jax.train",
    "make_family": "rcmdp_jax.family",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        value = getattr(import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rcmdp_jax' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))

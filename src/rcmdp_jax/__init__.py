"""rcmdp_jax: robust constrained MDPs in JAX, fused and vectorised.

The public names are imported lazily, so ``import rcmdp_jax.sharding`` can split
the CPU into devices (``sharding.split_cpu``) before anything starts JAX's
backends (importing gymnax does). Importing the package changes nothing global:
the faster CPU lowering of JAX's random numbers is a switch
(``rcmdp_jax.cpu_prng.use_unrolled_threefry()``) that the runner turns on.
"""

from importlib import import_module

_PUBLIC = {
    "ALGORITHMS": "rcmdp_jax.presets",
    "Config": "rcmdp_jax.config",
    "HParams": "rcmdp_jax.hparams",
    "load_policy": "rcmdp_jax.study.policy",
    "parse_algorithm": "rcmdp_jax.presets",
    "preset": "rcmdp_jax.presets",
    "TrainResult": "rcmdp_jax.train",
    "TrainState": "rcmdp_jax.step",
    "make_train": "rcmdp_jax.train",
    "make_family": "rcmdp_jax.family",
    "sweep": "rcmdp_jax.sweeps",
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

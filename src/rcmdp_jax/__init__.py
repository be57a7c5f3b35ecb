"""rcmdp_jax: robust constrained MDPs in JAX, fused and vectorised."""

from rcmdp_jax import cpu_prng
from rcmdp_jax.config import ALGORITHMS, Config, HParams, parse_algorithm, preset
from rcmdp_jax.family import make_family
from rcmdp_jax.train import TrainResult, TrainState, make_train

cpu_prng.apply_default()  # same random bits, faster CPU code (see cpu_prng)

__all__ = [
    "ALGORITHMS",
    "Config",
    "HParams",
    "TrainResult",
    "TrainState",
    "make_family",
    "make_train",
    "parse_algorithm",
    "preset",
]

"""rcmdp_jax: robust constrained MDPs in JAX, fused and vectorised."""

from rcmdp_jax.config import ALGORITHMS, Config, HParams, parse_algorithm, preset
from rcmdp_jax.train import TrainResult, TrainState, make_train

__all__ = [
    "ALGORITHMS",
    "Config",
    "HParams",
    "TrainResult",
    "TrainState",
    "make_train",
    "parse_algorithm",
    "preset",
]

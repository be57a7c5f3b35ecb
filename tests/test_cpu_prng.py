"""The unrolled CPU lowering of threefry gives bit-identical keys and random numbers."""

import os

import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax import cpu_prng


def _draws(key):
    k1, k2 = jax.random.split(key)
    keys = jax.random.split(k1, 37)
    folded = jax.vmap(lambda k, i: jax.random.fold_in(k, i))(keys, jnp.arange(37))
    return dict(
        keys=jax.random.key_data(keys) if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key) else keys,
        folded=folded,
        bits=jax.random.bits(k2, (5, 33), jnp.uint32),
        normal=jax.random.normal(folded[3], (7, 11)),
        categorical=jax.random.categorical(folded[5], jnp.log(jnp.array([0.1, 0.2, 0.7])), shape=(1000,)),
        permutation=jax.random.permutation(folded[7], 64),
    )


def test_unrolled_threefry_is_bit_identical_to_the_rolled_lowering():
    key = jax.random.PRNGKey(123)
    try:  # fresh function objects, so no compiled program is reused across lowerings
        assert cpu_prng.use_rolled_threefry()
        rolled_fn = jax.jit(lambda k: _draws(k))
        rolled, rolled_text = rolled_fn(key), rolled_fn.lower(key).as_text()
        assert cpu_prng.use_unrolled_threefry()
        unrolled_fn = jax.jit(lambda k: _draws(k))
        unrolled, unrolled_text = unrolled_fn(key), unrolled_fn.lower(key).as_text()
    finally:
        cpu_prng.apply_default()  # the session's lowering (tests/conftest.py)
    after = jax.jit(lambda k: jax.random.split(k, 3)).lower(key).as_text()
    assert ("stablehlo.while" in after) == (os.environ.get("RCMDP_JAX_ROLLED_THREEFRY") == "1")
    # the two programs really differ (one 5-round loop per threefry call is gone) ...
    assert unrolled_text.count("stablehlo.while") + 5 <= rolled_text.count("stablehlo.while")
    # ... and give the same bits
    for name in rolled:
        np.testing.assert_array_equal(np.asarray(rolled[name]), np.asarray(unrolled[name]), err_msg=name)

"""Networks: dropout only in updates; HashDropout has nn.Dropout's semantics."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax.networks import Actor, HashDropout, hash_bits, orthogonal


def test_hash_dropout_keep_rate_scaling_and_independence():
    layer = HashDropout(0.6)
    x = jnp.ones((2000, 128))
    masks = [np.asarray(layer.apply({}, x, rngs={"dropout": jax.random.PRNGKey(i)})) for i in range(4)]
    for m in masks:
        assert abs((m > 0).mean() - 0.4) < 0.005  # 256k draws: SE ~ 0.001
        np.testing.assert_allclose(m[m > 0], 1.0 / 0.4, rtol=1e-6)  # inverted dropout scaling
    # different keys: masks independent (joint keep rate 0.16), neighbours too
    for a, b in [(0, 1), (1, 2), (0, 3)]:
        assert abs(((masks[a] > 0) & (masks[b] > 0)).mean() - 0.16) < 0.005
    flat = masks[0].ravel() > 0
    assert abs((flat[:-1] & flat[1:]).mean() - 0.16) < 0.005  # no serial correlation
    # same key, same mask; deterministic mode is the identity
    again = np.asarray(layer.apply({}, x, rngs={"dropout": jax.random.PRNGKey(0)}))
    np.testing.assert_array_equal(masks[0], again)
    np.testing.assert_array_equal(HashDropout(0.6, deterministic=True).apply({}, x), x)


def test_hash_dropout_matches_flax_dropout_in_distribution():
    x = jnp.arange(1.0, 129.0)[None].repeat(4000, 0)
    ours = HashDropout(0.6).apply({}, x, rngs={"dropout": jax.random.PRNGKey(5)})
    flax_out = nn.Dropout(0.6, deterministic=False).apply({}, x, rngs={"dropout": jax.random.PRNGKey(5)})
    # both are unbiased: E[out / x] = 1 (512k draws each: SE of the mean ratio ~0.002)
    assert abs(float((ours / x).mean()) - 1.0) < 0.01
    assert abs(float((flax_out / x).mean()) - 1.0) < 0.01
    assert hash_bits(jax.random.PRNGKey(0), (3, 5)).dtype == jnp.uint32


def test_dropout_only_in_training_mode():
    actor = Actor(2, (128,), True, 0.6)
    obs = jnp.ones((8, 4))
    params = actor.init(jax.random.PRNGKey(0), obs)
    a = actor.apply(params, obs).logits
    b = actor.apply(params, obs).logits
    np.testing.assert_array_equal(a, b)
    c = actor.apply(params, obs, train=True, rngs={"dropout": jax.random.PRNGKey(1)}).logits
    assert not np.allclose(a, c)
    threefry = Actor(2, (128,), True, 0.6, "threefry")
    d = threefry.apply(params, obs, train=True, rngs={"dropout": jax.random.PRNGKey(1)}).logits
    assert not np.allclose(a, d) and not np.allclose(c, d)


def test_orthogonal_init_is_jax_orthogonal_without_lapack():
    """Our orthogonal initializer draws jax.nn.initializers.orthogonal's matrix (same
    normal draw; numpy's QR as the reference here), and the init program of a family
    has no LAPACK call (several of them in one XLA CPU program deadlocked jaxlib)."""
    for shape, gain in [((3, 128), 2**0.5), ((128, 128), 2**0.5), ((128, 4), 0.01), ((64, 1), 1.0)]:
        key = jax.random.PRNGKey(shape[0] + shape[1])
        got = np.asarray(orthogonal(gain)(key, shape))
        n_rows, n_cols = shape
        z = np.asarray(jax.random.normal(key, (max(shape), min(shape))), np.float64)
        q, r = np.linalg.qr(z)
        q = q * np.sign(np.diag(r))
        want = gain * (q.T if n_rows < n_cols else q)
        np.testing.assert_allclose(got, want, atol=2e-6 * gain)
        small = min(shape)
        gram = got.T @ got if n_rows >= n_cols else got @ got.T
        np.testing.assert_allclose(gram / gain**2, np.eye(small), atol=1e-5)

    from rcmdp_jax import preset
    from rcmdp_jax.family import make_family

    fam = make_family([preset("inventory3d", a) for a in ("MDPO", "MDPO-Robust-Lag")])
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    hlo = jax.jit(jax.vmap(fam.init)).lower(keys, jnp.array([0, 0, 1, 1])).as_text()
    assert "lapack" not in hlo.lower()

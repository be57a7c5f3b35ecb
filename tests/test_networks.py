"""Networks: dropout only in updates; the hash masks have nn.Dropout's semantics; a traced rate
drops what the fixed one does."""

from fractions import Fraction

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax.networks import Actor, Dropout, dropout_form, hash_bits, orthogonal


def test_hash_dropout_keep_rate_scaling_and_independence():
    layer = Dropout(0.6)
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
    np.testing.assert_array_equal(Dropout(0.6, deterministic=True).apply({}, x), x)


def test_hash_dropout_matches_flax_dropout_in_distribution():
    x = jnp.arange(1.0, 129.0)[None].repeat(4000, 0)
    ours = Dropout(0.6).apply({}, x, rngs={"dropout": jax.random.PRNGKey(5)})
    flax_out = nn.Dropout(0.6, deterministic=False).apply({}, x, rngs={"dropout": jax.random.PRNGKey(5)})
    # both are unbiased: E[out / x] = 1 (512k draws each: SE of the mean ratio ~0.002)
    assert abs(float((ours / x).mean()) - 1.0) < 0.01
    assert abs(float((flax_out / x).mean()) - 1.0) < 0.01
    assert hash_bits(jax.random.PRNGKey(0), (3, 5)).dtype == jnp.uint32


def test_the_program_form_of_a_rate_is_the_fixed_rates_numbers():
    """``1 - rate`` rounded once to float32 and the cut ``round(rate 2^32)`` of the double rate
    (exact fractions here); the float32 rate a traced number is would give another cut (0.6:
    102 above) and another keep (1 - 0.6f is 0.4f less one ulp), so the host computes the form."""
    rng = np.random.default_rng(0)
    rates = np.concatenate([[0.0, 0.6, 0.4, 0.1, 0.5, 1 - 2**-40], rng.uniform(0, 1, 200)])
    keep, scale, high, low = dropout_form(rates)
    for r, k, s, h, lo in zip(rates, keep, scale, high, low):
        exact = min(round(Fraction(r) * 2**32), 2**32 - 1)
        assert int(h) * 2**16 + int(lo) == exact and 0 <= lo < 2**16, r
        assert k == np.float32(Fraction(1) - Fraction(r)), r
        assert s == np.float32(1 / Fraction(float(k))), r  # the float32 reciprocal, rounded once
    assert np.float32(1) - np.float32(0.6) != np.float32(0.4)
    f32 = [float(x) for x in jax.jit(dropout_form)(jnp.float32(0.6))]
    assert f32[2] * 2**16 + f32[3] == round(Fraction(float(np.float32(0.6))) * 2**32) != round(Fraction(0.6) * 2**32)


class _Key(nn.Module):
    """The dropout key a top-level layer draws (flax derives it from the one given)."""

    @nn.compact
    def __call__(self):
        return self.make_rng("dropout")


def test_a_traced_rate_drops_what_the_fixed_rate_does():
    """Lanes of one program at rates given as numbers (their host form) give, bit for bit, what a
    layer at each fixed rate gives: flax's ``nn.Dropout`` for threefry bits, a NumPy mask of the
    hash bits at the cut for hash bits."""
    x = jax.random.normal(jax.random.PRNGKey(3), (64, 128))
    key = jax.random.PRNGKey(7)
    rates = np.array([0.6, 0.1, 0.37, 0.0])
    for bits in ("hash", "threefry"):
        drop = jax.vmap(lambda form: Dropout(form, bits).apply({}, x, rngs={"dropout": key}))
        lanes = jax.jit(drop)(dropout_form(rates))
        for r, got in zip(rates, np.asarray(lanes)):
            if bits == "threefry":
                want = np.asarray(nn.Dropout(float(r), deterministic=False).apply({}, x, rngs={"dropout": key}))
            else:
                cut = min(round(Fraction(float(r)) * 2**32), 2**32 - 1)
                kept = np.asarray(hash_bits(_Key().apply({}, rngs={"dropout": key}), x.shape)).astype(np.int64) >= cut
                # XLA divides by a scalar as a multiply by its float32 reciprocal (traced or not)
                want = np.where(kept, np.asarray(x) * (np.float32(1) / np.float32(1 - r)), 0.0)
            np.testing.assert_array_equal(got, want, err_msg=f"{bits} at {r}")
            np.testing.assert_array_equal(got, Dropout(float(r), bits).apply({}, x, rngs={"dropout": key}))


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

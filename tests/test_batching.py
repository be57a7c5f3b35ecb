"""batching.only_where: the values of a plain lax.cond, with the work only on flagged lanes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax.batching import only_where


def _expensive(x, y):
    return {"a": jnp.sin(x) * y, "b": jnp.sum(x)}


def _cheap(x, y):
    return {"a": x, "b": jnp.float32(-1.0)}


@pytest.mark.parametrize("flags", [[1, 0, 1, 1, 0], [0] * 5, [1] * 5, [0, 0, 0, 0, 1] * 3 + [1, 0]])
def test_values_are_those_of_the_plain_cond(flags):
    flags = np.array(flags, bool)
    n = len(flags)
    x = np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32)
    y = np.float32(2.5)
    got = jax.jit(jax.vmap(only_where(_expensive, _cheap, chunk=4), in_axes=(0, 0, None)))(flags, x, y)
    want = jax.vmap(lambda f, x: jax.lax.cond(f, _expensive, _cheap, x, y))(flags, x)
    for k in ("a", "b"):
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-6)
    # the reference by hand, lane by lane
    for i in range(n):
        ref = np.sin(x[i]) * y if flags[i] else x[i]
        np.testing.assert_allclose(np.asarray(got["a"][i]), ref, rtol=1e-6)


def test_only_chunks_with_flagged_lanes_run_the_expensive_branch():
    lanes_run = []

    def expensive(x):
        jax.debug.callback(lambda v: lanes_run.append(v.size), x)
        return 2.0 * x

    flags = np.zeros(17, bool)
    flags[[3, 9, 16]] = True  # three flagged lanes, spread out
    x = np.arange(17, dtype=np.float32)
    out = jax.vmap(only_where(expensive, lambda x: x, chunk=8))(flags, x)
    jax.effects_barrier()
    np.testing.assert_allclose(np.asarray(out), np.where(flags, 2 * x, x))
    # 17 lanes -> 3 chunks of 6; the flagged lanes are sorted into the first chunk only
    assert sum(lanes_run) == 6, lanes_run
    # unbatched, the cond skips or runs
    lanes_run.clear()
    assert float(only_where(expensive, lambda x: x)(False, jnp.float32(3.0))) == 3.0
    jax.effects_barrier()
    assert lanes_run == []


def test_one_algorithm_picks_its_adversary_while_tracing():
    """Trained alone, an algorithm's robustness is known while tracing: its program holds
    LTMA (robust) or not (non-robust), no run-time choice; a family's holds the choice."""
    from rcmdp_jax import make_train, preset
    from rcmdp_jax.family import make_family

    small = dict(total_timesteps=64, n_steps=16, minibatch_size=16, ltma_iterations=2)
    key = jax.random.PRNGKey(0)

    def program(fn, *args):
        return str(jax.make_jaxpr(fn)(*args))

    robust, plain = (program(make_train(preset("inventory", a, **small)), key) for a in ("MDPO-Robust", "MDPO"))
    assert "custom_vmap_call" not in robust and "custom_vmap_call" not in plain
    # LTMA's loops (its steps, their episodes) are in the robust program only
    assert robust.count("scan[") > plain.count("scan[")
    family = make_family([preset("inventory", a, **small) for a in ("MDPO-Robust", "MDPO")])
    assert "custom_vmap_call" in program(family, key, jnp.int32(0))


def test_the_function_is_traced_once_inside_a_vmapped_scan():
    """``only_where``'s primal traces ``fn``, and its batching rule runs again each time the
    enclosing ``scan`` batches its body: ``fn`` (a robust method's phase) was traced three
    times per family program. Now once, replayed from its jaxpr; the values those of a cond."""
    traced = []

    def fn(x, k):
        traced.append(x)
        return x * k

    g = only_where(fn, lambda x, k: x + 1.0, chunk=2)
    body = lambda c, flag: (g(flag, c, 2.0), c)  # noqa: E731
    run = jax.jit(jax.vmap(lambda x, flags: jax.lax.scan(body, x, flags)))
    flags = jnp.array([[True, True, False], [False, False, False], [False, True, True]])
    x, seen = run(jnp.array([1.0, 2.0, 3.0]), flags)
    assert len(traced) == 1, f"fn was traced {len(traced)} times"
    np.testing.assert_array_equal(x, [5.0, 5.0, 16.0])  # 1*2*2+1; 2+1+1+1; (3+1)*2*2
    np.testing.assert_array_equal(seen, [[1.0, 2.0, 4.0], [2.0, 3.0, 4.0], [3.0, 4.0, 8.0]])

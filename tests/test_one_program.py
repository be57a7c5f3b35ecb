"""One compiled program, many runs (issue 53 item 4): a family's hyperparameters, variants and
budget are arguments of the study's compiled program (``rcmdp_jax.chunked.Prepared``), so a run
whose only change is the learning rate or the budget compiles nothing, and trains what a
program built for it alone trains (``make_family`` with its numbers as constants, the reference)."""

import collections

import jax
import numpy as np
import pytest

from rcmdp_jax import chunked as compiled
from rcmdp_jax import make_family, preset
from rcmdp_jax.chunked import Prepared, train_prepared

ALGOS = ("MDPO", "MDPO-Lag")


def configs(iterations: int, lr_scale: float = 1.0):
    """A tiny cartpole MDPO family of ``iterations`` iterations (64 policy steps each); MDPO-Lag
    runs the linear alpha schedule, whose K is the run's iterations (so a budget baked into the
    program would show)."""
    out = []
    for a in ALGOS:
        cfg = preset("cartpole", a, total_timesteps=64 * iterations, n_steps=16, minibatch_size=16, epochs=2,
                     eval_episodes=2, n_dual_episodes=2, dual_batch=32)  # fmt: skip
        cfg = cfg.replace(lr=cfg.hparams.lr * lr_scale)
        out.append(cfg.replace(alpha_schedule="linear") if a == "MDPO-Lag" else cfg)
    assert all(c.num_iterations == iterations for c in out)
    return out


class Compiles:
    """XLA compilations while the block runs (JAX's compile events, ``jax.monitoring``)."""

    n = collections.Counter()
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: Compiles.n.update([event]) if event == "/jax/core/compile/backend_compile_duration" else None
    )

    def __enter__(self):
        self.start = Compiles.n["/jax/core/compile/backend_compile_duration"]
        return self

    def __exit__(self, *exc):
        self.count = Compiles.n["/jax/core/compile/backend_compile_duration"] - self.start


def reference(cfgs, keys):
    """The family trained by one program built for it alone (``make_family``: its numbers and
    budget constants; the whole run one scan), its lanes laid out as the runner's (members x
    seeds), member by member."""
    members = np.repeat(np.arange(len(cfgs), dtype=np.int32), len(keys))
    out = jax.jit(jax.vmap(make_family(cfgs)))(np.tile(keys, (len(cfgs), 1)), members)
    return [jax.tree.map(lambda x, i=i: x[i * len(keys) : (i + 1) * len(keys)], out) for i in range(len(cfgs))]


def assert_same(per_member, ref):
    """The same numbers up to float rounding (a metric's reduction may fuse otherwise in the
    runner's chunked scan; the rounding is ~1e-8 here, a changed number moves them by far more)."""
    for r, e in zip(per_member, ref):
        for name in ("eval_return", "lam", "policy_loss", "c_hat", "xi"):
            np.testing.assert_allclose(r.metrics[name], e.metrics[name], rtol=1e-5, atol=1e-7, err_msg=name)
        for a, b in zip(jax.tree.leaves(r.state.params), jax.tree.leaves(e.state.params)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def keys():
    return np.asarray(jax.random.split(jax.random.PRNGKey(7), 2))


@pytest.fixture(scope="module")
def first(keys):
    """The family of 7 iterations (two chunks, the second past the run's end), built first."""
    compiled.clear()
    prep = Prepared(configs(7), keys, True)
    return prep, train_prepared(prep, "first")[0]


def test_a_changed_learning_rate_compiles_nothing_and_trains_its_own_numbers(first, keys):
    built = compiled.counts["built"]
    with Compiles() as compiles:
        prep = Prepared(configs(7, lr_scale=3.0), keys, True)
    assert compiled.counts["built"] == built, "a new learning rate built a new program"
    assert compiles.count == 0, f"{compiles.count} XLA compilation(s) for a new learning rate"
    trained, _ = train_prepared(prep, "lr x3")
    before = first[1]
    with pytest.raises(AssertionError):  # the learning rate did enter: other numbers
        assert_same(trained, before)
    assert_same(trained, reference(configs(7, lr_scale=3.0), keys))


def test_a_shorter_budget_runs_the_same_program(first, keys):
    built = compiled.counts["built"]
    with Compiles() as compiles:
        prep = Prepared(configs(3), keys, True)
    assert compiled.counts["built"] == built and compiles.count == 0
    assert prep.chunk == first[0].chunk > 3  # one chunk, two slots past the end
    trained, _ = train_prepared(prep, "3 iterations")
    assert trained[0].metrics["lam"].shape[:2] == (2, 3)  # [seeds, iterations]: the idle slots cut
    assert_same(trained, reference(configs(3), keys))


def test_training_a_prepared_family_compiles_nothing_more(first, keys):
    """Once the family's programs are built, training runs them only: the chunks' metrics cut at
    the run's end, joined and split per member on the host (each of these as a JAX op was a small
    program of its own, one per leaf shape: 133 of them, 10.9 s, after the quick start's training)."""
    prep = Prepared(configs(6), keys, True)  # 6 iterations: a chunk cut at 1, shapes no other test has
    with Compiles() as compiles:
        trained, _ = train_prepared(prep, "6 iterations")
    assert compiles.count == 0, f"{compiles.count} XLA compilation(s) while training a built family"
    assert trained[1].metrics["lam"].shape[:2] == (2, 6)
    assert all(isinstance(x, np.ndarray) for x in jax.tree.leaves(trained))
    assert_same(trained, reference(configs(6), keys))


def test_a_bounded_slot_is_traced_once(monkeypatch):
    """``step.until`` gives its idle branch the slot's shapes from the slot's own trace (a second
    trace of the train step was seconds of every family's compile), and still idles past ``total``."""
    import jax.numpy as jnp

    from rcmdp_jax import step

    monkeypatch.setattr(step, "idle_metrics", lambda s: {"active": jnp.float32(0.0)})
    traced = []

    def slot(s, it):
        traced.append(it)
        return s + 1.0, {"x": s * 2.0, "active": jnp.float32(1.0)}

    run = jax.jit(lambda s, total: jax.lax.scan(step.until(slot, total), s, jnp.arange(5)))
    state, metrics = run(jnp.float32(1.0), jnp.int32(3))
    assert len(traced) == 1, f"the slot was traced {len(traced)} times"
    assert float(state) == 4.0  # three slots ran: 1 + 3
    np.testing.assert_array_equal(metrics["x"], [2.0, 4.0, 6.0, np.nan, np.nan])
    np.testing.assert_array_equal(metrics["active"], [1, 1, 1, 0, 0])


@pytest.mark.parametrize("vmap", [True, False])
def test_the_callback_gets_each_members_chunks_and_a_true_return_stops(first, keys, vmap):
    """``train_prepared``'s ``on_chunk``: each member's chunk (leaves ``[seeds, iterations]``, the
    slots past the run's end cut), in order, with its first iteration and seeds; joined, the
    member's metrics. A true return stops there (``--budget auto``'s search): one chunk trained."""
    prep = first[0] if vmap else Prepared(configs(7)[:1], keys, False)  # the loop: one member, seed by seed
    seen = []
    trained, _ = train_prepared(prep, None, lambda *call: seen.append(call))
    n = len(prep.cfgs)
    want = [(m, 0, None) for m in range(n)] + [(m, 5, None) for m in range(n)]  # chunks of 5, 7 iterations
    if not vmap:  # a batch per seed, each its two chunks
        want = [(0, start, [s]) for s in range(len(keys)) for start in (0, 5)]
    assert [(m, start, seeds) for m, _, start, seeds in seen] == want
    for m in range(n):
        for s in range(len(keys)):
            parts = [t["lam"][0 if seeds else s] for mm, t, _, seeds in seen if mm == m and seeds in (None, [s])]
            assert [len(p) for p in parts] == [5, 2]
            np.testing.assert_array_equal(np.concatenate(parts), trained[m].metrics["lam"][s])
    stopped, _ = train_prepared(prep, None, lambda *call: True)
    assert stopped[0].metrics["lam"].shape[:2] == (len(keys) if vmap else 1, 5)
    np.testing.assert_array_equal(stopped[0].metrics["lam"][0], trained[0].metrics["lam"][0, :5])


def test_an_episodic_slot_is_traced_once():
    """MCPMD's slot (``MCPMD.iteration_slot``: a ``while_loop`` of at most one trip) takes its idle
    metrics' shapes from the iteration's one trace (a second, ``jax.eval_shape``, traced the whole
    train step again in every MCPMD family's compile), and each lane still stops at its budget."""
    import jax.numpy as jnp

    from rcmdp_jax.learners.mcpmd import MCPMD

    State = collections.namedtuple("State", "samples x")
    traced = []

    def iteration(s):
        traced.append(s)
        return State(s.samples + 10.0, s.x * 2.0), {"y": s.x + 1.0, "active": jnp.float32(1.0)}

    def slot(s, _):
        return MCPMD.iteration_slot(None, iteration, s, lambda s: {"active": jnp.float32(0.0)}, 25.0)

    run = jax.jit(jax.vmap(lambda s: jax.lax.scan(slot, s, None, length=4)))
    state, metrics = run(State(jnp.array([[0.0], [20.0]]), jnp.array([1.0, 3.0])))
    assert len(traced) == 1, f"the iteration was traced {len(traced)} times"
    np.testing.assert_array_equal(state.samples[:, 0], [30.0, 30.0])  # lane 0: three trips, lane 1: one
    np.testing.assert_array_equal(state.x, [8.0, 6.0])
    np.testing.assert_array_equal(metrics["y"], [[2.0, 3.0, 5.0, np.nan], [4.0, np.nan, np.nan, np.nan]])
    np.testing.assert_array_equal(metrics["active"], [[1, 1, 1, 0], [1, 0, 0, 0]])

"""A family stopped mid-training continues from its last snapshot (``rcmdp_jax.snapshots``,
``chunked.train_prepared(..., snapshot=)``) and trains what an uninterrupted run trains, bit for
bit; its metrics so far reach the callback once; a snapshot of another family or a damaged one is
said and the family trains from the start; the file goes when the family is trained."""

import jax
import numpy as np
import pytest

from rcmdp_jax import preset, snapshots
from rcmdp_jax.chunked import Prepared, train_prepared
from rcmdp_jax.snapshots import FILE


def configs(lr_scale: float = 1.0):
    """A tiny cartpole family (MDPO-Lag and MDPO-Robust-Lag: a multiplier and a kernel in the state)
    of 7 iterations."""
    out = []
    for a in ("MDPO-Lag", "MDPO-Robust-Lag"):
        cfg = preset("cartpole", a, total_timesteps=64 * 7, n_steps=16, minibatch_size=16, epochs=2, eval_episodes=2,
                     n_dual_episodes=2, dual_batch=32, ltma_iterations=2)  # fmt: skip
        out.append(cfg.replace(lr=cfg.hparams.lr * lr_scale))
    return out


class Stop(Exception):
    pass


def assert_bit_identical(a, b):
    for ra, rb in zip(a, b):
        for name in ra.metrics:
            np.testing.assert_array_equal(ra.metrics[name], rb.metrics[name], err_msg=name)
        for x, y in zip(jax.tree.leaves(ra.state), jax.tree.leaves(rb.state)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def family():
    """The tiny family, 7 iterations in chunks of 2 (four chunks, the last cut at 1), and what it
    trains uninterrupted."""
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(3), 2))
    prep = Prepared(configs(), keys, True, chunk=2)
    return prep, keys, train_prepared(prep)[0]


def test_a_stopped_family_continues_from_its_snapshot_bit_for_bit(family, tmp_path, monkeypatch):
    prep, _, whole = family
    monkeypatch.setattr(snapshots, "EVERY_S", 0.0)  # a snapshot after every chunk
    path = tmp_path / FILE

    def stop_at_4(member, metrics, start, seeds):
        if start == 4:
            raise Stop  # Ctrl-C during the third chunk's logging: the snapshot holds iterations 0-3

    with pytest.raises(Stop):
        train_prepared(prep, None, stop_at_4, path)
    assert path.exists()
    seen = []
    record = lambda member, metrics, start, seeds: seen.append((member, start, metrics["lam"].shape[1]))
    again, _ = train_prepared(prep, "[again]", record, path)
    assert_bit_identical(again, whole)
    # the metrics so far once (iterations 0-3), then the chunks from 4: each member's 7 iterations once
    for m in range(len(whole)):
        assert [(s, n) for mm, s, n in seen if mm == m] == [(0, 4), (4, 2), (6, 1)]
    assert not path.exists()  # trained: the snapshot goes


def test_another_familys_or_a_damaged_snapshot_is_said_and_ignored(family, tmp_path, monkeypatch, capsys):
    prep, keys, whole = family
    path = tmp_path / FILE
    monkeypatch.setattr(snapshots, "EVERY_S", 0.0)
    other = Prepared(configs(lr_scale=3.0), keys, True, chunk=2)  # other numbers: the same program
    with pytest.raises(Stop):
        train_prepared(other, None, lambda m, x, start, s: (_ for _ in ()).throw(Stop) if start == 2 else None, path)
    assert path.exists()
    again, _ = train_prepared(prep, "[mine]", None, path)
    assert "is of another family" in capsys.readouterr().out
    assert_bit_identical(again, whole)
    path.write_bytes(b"not a snapshot")
    again, _ = train_prepared(prep, "[mine]", None, path)
    assert "could not be read" in capsys.readouterr().out
    assert_bit_identical(again, whole)

"""The command's input limits: sizes the memory estimate must see and the
int32 counts, gymnax boxes in float32, the small ones, a multiplier step that blows up
behind its clip. Each is one line (exit 2) before anything is written."""

import numpy as np
import pytest
from cli_helpers import _one_line
from tiny_configs import HOSTILE_TINY as TINY

from rcmdp_jax.study import cli


# ------------------------------------------------------------------ 2. sizes
@pytest.mark.parametrize(
    "args,message",
    [
        (["--n-test", "100000000"], "mostly for --n-test"),
        (["--set", "dual_batch=1000000000"], "mostly for dual_batch"),
        (["--set", "ltma_episodes=100000000"], "mostly for ltma_episodes"),
        (["--set", "ltma_horizon=100000000"], "mostly for ltma_horizon"),
        (["--set", "n_dual_episodes=400000000", "--set", "dual_estimator=start_value"], "mostly for n_dual_episodes"),
        (["--set", "n_dual_episodes=400000000"], "n_dual_episodes=400000000 must divide"),
        (["--algos", "MDPO-Robust-Lag:linear-epoch", "--set", "epochs=2000000000"], "--set epochs: "),
        (["--set", "dual_epochs=100000000", "--set", "dual_minibatch=1"], "--set dual_epochs: "),
    ],
)
def test_sizes_beyond_memory_or_int32_are_refused_before_writing(tmp_path, capsys, args, message):
    out = tmp_path / "never"
    assert cli.main([*args, "--out", str(out)]) == 2
    _one_line(capsys, message)
    assert not out.exists()


def test_the_memory_estimate_counts_every_buffer():
    from rcmdp_jax import preset
    from rcmdp_jax.sizes import kernel_count, lane_bytes, sweep_bytes

    cfg = preset("cartpole", "MDPO-Robust-Lag")
    base = lane_bytes(cfg)
    for field in ("dual_batch", "n_dual_episodes", "ltma_episodes", "ltma_horizon", "eval_episodes", "n_steps"):
        value = cfg.option(field) if field.startswith("ltma_") else getattr(cfg, field)  # ltma's options
        bigger = cfg.replace(**{field: value * 8}) if field != "dual_batch" else cfg.replace(
            dual_batch=cfg.dual_batch * 8, dual_minibatch=cfg.dual_minibatch)  # fmt: skip
        assert lane_bytes(bigger) > base, field
    assert lane_bytes(preset("cartpole", "MDPO").replace(ltma_horizon=10**6)) == lane_bytes(preset("cartpole", "MDPO"))
    assert kernel_count("cartpole") == 11 * 16 and kernel_count("inventory3d") == 11 * 64
    assert kernel_count("gymnax:Pendulum-v1@uncertain=g:0.2") == 11 * 2
    assert sweep_bytes(cfg, 200, 10, 176) > 1.9 * sweep_bytes(cfg, 100, 10, 176)


# ------------------------------------------------------------------ 4. gymnax boxes
@pytest.mark.parametrize(
    "args,message",
    [
        (["--env", "gymnax:Pendulum-v1@uncertain=g:nan"], "the box must be non-empty and finite in float32"),
        (["--env", "gymnax:Pendulum-v1@uncertain=g:abs:1e40"], "the box must be non-empty and finite in float32"),
        (["--env", "gymnax:Pendulum-v1", "--uncertain", "g=abs:1e40"], "finite in float32"),
        (["--env", "gymnax:Pendulum-v1", "--uncertain", "g=1e-50"], "the box must be non-empty"),
        (["--env", "gymnax:Pendulum-v1", "--uncertain", ""], "--uncertain is empty"),
        (["--env", "gymnax:Pendulum-v1", "--costs", ""], "--costs is empty"),
        (["--env", "gymnax:Pendulum-v1", "--costs", " , "], "--costs is empty"),
    ],
)
def test_gymnax_boxes_are_checked_in_float32_in_every_spelling(tmp_path, capsys, args, message):
    out = tmp_path / "never"
    assert cli.main([*args, "--algos", "PPO", "--out", str(out)]) == 2
    _one_line(capsys, message)
    assert not out.exists()


# ------------------------------------------------------------------ 7. the small ones
@pytest.mark.parametrize(
    "args,message",
    [
        (["--set", "lr=nan", "--set", "lr=1e-3"], "--set lr=... is given more than once"),
        (["--compile-cache", ""], "--compile-cache is empty"),
        (["--seeds", "abc"], "argument --seeds: invalid int value: 'abc'"),
        (["--nope"], "unrecognized arguments: --nope"),
        (["--algos", "MDPO-Lag@lr=1e-3,MDPO-Lag@lr=0.001"], "MDPO-Lag@lr=1e-3 and MDPO-Lag@lr=0.001 are the same"),
        (["--algos", "MDPO-Lag,MDPO-Lag@lr=3e-4"], "MDPO-Lag and MDPO-Lag@lr=3e-4 are the same configuration"),
        (["--set", "lr=1e39"], "lr must be a finite number > 0 in float32"),
    ],
)
def test_small_bad_inputs_are_one_line(tmp_path, capsys, recwarn, args, message):
    out = tmp_path / "never"
    assert cli.main([*args, "--out", str(out)]) == 2
    _one_line(capsys, "run.py: error: ", message)
    assert not out.exists()
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]  # no NumPy warning first


def test_distributed_input_is_checked_before_the_handshake(tmp_path, capsys, monkeypatch):
    from rcmdp_jax.study import runtime

    def handshake(args):
        raise AssertionError("joined the other processes before checking the input")

    monkeypatch.setattr(runtime, "start_processes", handshake)
    args = ["--distributed", "--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "0"]
    assert cli.main([*args, "--set", "lr=nan", "--out", str(tmp_path / "never")]) == 2
    _one_line(capsys, "lr must be a finite number > 0 in float32, got nan")


def test_a_multiplier_step_that_blows_up_behind_the_clip_is_divergence(tmp_path, capsys):
    """``eta_lam=1e30`` on MDPO-Lag: ``lam`` stays within [0, lam_clip] (the clip), but its
    ascent step ``eta_lam * C^`` is beyond ``BLOW_UP``: diverged, never bold."""
    out = tmp_path / "dual"
    assert cli.main(TINY + ["--set", "eta_lam=1e30", "--out", str(out)]) == 4
    lam = np.load(out / "cartpole" / "MDPO-Lag" / "train_metrics.npz")["lam"]
    assert np.all(np.isfinite(lam)) and lam.max() <= 50.0  # what the 1e12 rule on lam alone would pass
    assert "DIVERGED" in capsys.readouterr().out
    md = (out / "cartpole" / "summary.md").read_text()
    assert "MDPO-Lag (0/2 seeds; 2 diverged) | diverged: no seed left" in md and "**" not in md


def test_a_field_the_algorithms_name_decides_is_refused_by_set(tmp_path, capsys):
    """``--set alpha_schedule=linear`` was taken by the plan and then refused by the run's own
    run.json on ``--resume`` and ``report``: the fields an algorithm's name decides are one list
    (``config.ALGORITHM_FIELDS``), which the command line and the saved run's check both read."""
    from rcmdp_jax.config import ALGORITHM_FIELDS
    from rcmdp_jax.study import run_plan

    assert ALGORITHM_FIELDS == ("learner", "constraint", "adversary", "alpha_schedule", "alpha_tick")
    for key, value in (("alpha_schedule", "linear"), ("alpha_tick", "batch"), ("constraint", "pid")):
        out = tmp_path / key
        assert cli.main(["--set", f"{key}={value}", "--out", str(out)]) == 2
        _one_line(capsys, f"--set {key}=...", "--algos")
        assert not out.exists()
    assert run_plan.ALGORITHM_FIELDS is ALGORITHM_FIELDS

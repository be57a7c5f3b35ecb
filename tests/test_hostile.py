"""Issue 31, a hostile user's cases: an edited run.json, sizes the memory estimate must
see, a full disk, another user's folder, odd names, gymnax boxes, the API's gaps, the
lock under a race, and the small ones. Each refused command is one line (exit 2) and
changes nothing already written. CLI cases run in process through the entry point; the
SIGTERM case runs the command itself."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from rcmdp_jax import runner

RUN_PY = Path(__file__).resolve().parent.parent / "experiments" / "run.py"
TINY = ["--algos", "MDPO-Lag", "--seeds", "2", "--steps", "128", "--n-test", "3", "--set", "n_steps=16",
        "--set", "minibatch_size=16", "--set", "ltma_iterations=2", "--set", "eval_episodes=2"]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile") / "run"
    assert runner.main(TINY + ["--out", str(out)]) == 0
    return out


def _copy(run, tmp_path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(run, out)
    return out


def _snapshot(root: Path) -> dict:
    """Every file under ``root``: its bytes (what a refused command must leave as it was)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line(capsys, *words) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


# ------------------------------------------------------------------ 1. an edited run.json
def _edit(plan, what):
    cfg = plan["configs"]["cartpole"]["MDPO-Lag"]
    if what == "seed=-5":
        plan["seed"] = -5
    elif what == "seed=true":
        plan["seed"] = True
    elif what == "seed=2**40":
        plan["seed"] = 2**40
    elif what == "lr='abc'":
        cfg["hparams"]["lr"] = "abc"
    elif what == "gamma=5":
        cfg["hparams"]["gamma"] = 5
    elif what == "unknown field":
        cfg["colour"] = "blue"
    elif what == "envs=['nope']":
        plan["envs"] = ["nope"]
        plan["configs"]["nope"] = plan["configs"].pop("cartpole")
    elif what == "env='inventory'":
        cfg["env"] = "inventory"
    elif what == "policy_hidden=[7]":
        cfg["policy_hidden"] = [7]
    return plan


EDITS = {"seed=-5": "seed must be an integer in [0, 2**32)", "seed=true": "seed must be an integer",
         "seed=2**40": "seed must be an integer in [0, 2**32)", "lr='abc'": "hparams.lr='abc' is not a number",
         "gamma=5": "gamma must be in [0, 1]", "unknown field": "unknown config field(s) ['colour']",
         "envs=['nope']": "unknown environment 'nope'", "env='inventory'": "its env is 'inventory', not 'cartpole'",
         "policy_hidden=[7]": "the config of cartpole/MDPO-Lag does not match its checkpoint"}  # fmt: skip


@pytest.mark.parametrize("what", list(EDITS))
def test_an_edited_run_json_is_refused_and_nothing_changes(trained, tmp_path, capsys, what):
    import report

    out = _copy(trained, tmp_path)
    (out / "run.json").write_text(json.dumps(_edit(json.loads((out / "run.json").read_text()), what)))
    before = _snapshot(out)
    assert runner.main(["--eval-only", str(out)]) == 2
    _one_line(capsys, EDITS[what])
    assert runner.main(TINY + ["--resume", "--out", str(out)]) == 2
    capsys.readouterr()
    if what != "policy_hidden=[7]":  # the report reads results only, never a checkpoint
        assert report.main([str(out)]) == 2
        _one_line(capsys, EDITS[what])
    assert _snapshot(out) == before


# ------------------------------------------------------------------ 2. sizes
@pytest.mark.parametrize(
    "args,message",
    [
        (["--n-test", "100000000"], "mostly for --n-test"),
        (["--set", "dual_batch=1000000000"], "mostly for dual_batch"),
        (["--set", "ltma_episodes=100000000"], "mostly for ltma_episodes"),
        (["--set", "ltma_horizon=100000000"], "mostly for ltma_horizon"),
        (["--set", "n_dual_episodes=400000000", "--set", "dual_estimator=start_value"], "mostly for n_dual_episodes"),
        (["--set", "epochs=2000000000", "--set", "alpha_schedule=linear"], "--set epochs: "),
        (["--set", "dual_epochs=100000000", "--set", "dual_minibatch=1"], "--set dual_epochs: "),
    ],
)
def test_sizes_beyond_memory_or_int32_are_refused_before_writing(tmp_path, capsys, args, message):
    out = tmp_path / "never"
    assert runner.main([*args, "--out", str(out)]) == 2
    _one_line(capsys, message)
    assert not out.exists()


def test_the_memory_estimate_counts_every_buffer():
    from rcmdp_jax import preset
    from rcmdp_jax.sizes import kernel_count, lane_bytes, sweep_bytes

    cfg = preset("cartpole", "MDPO-Robust-Lag")
    base = lane_bytes(cfg)
    for field in ("dual_batch", "n_dual_episodes", "ltma_episodes", "ltma_horizon", "eval_episodes", "n_steps"):
        bigger = cfg.replace(**{field: getattr(cfg, field) * 8}) if field != "dual_batch" else cfg.replace(
            dual_batch=cfg.dual_batch * 8, dual_minibatch=cfg.dual_minibatch)  # fmt: skip
        assert lane_bytes(bigger) > base, field
    assert lane_bytes(preset("cartpole", "MDPO").replace(ltma_horizon=10**6)) == lane_bytes(preset("cartpole", "MDPO"))
    assert kernel_count("cartpole") == 11 * 16 and kernel_count("inventory3d") == 11 * 64
    assert kernel_count("gymnax:Pendulum-v1@uncertain=g:0.2") == 11 * 2
    assert sweep_bytes(cfg, 200, 10, 176) > 1.9 * sweep_bytes(cfg, 100, 10, 176)


# ------------------------------------------------------------------ 3. disk, permissions, names
class _FullDisk:
    """``open`` for the module under test: files named ``names`` get a few bytes, then ENOSPC."""

    def __init__(self, *names):
        self.names = names

    def __call__(self, path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        if any(n in str(path) for n in self.names) and "w" in mode:
            write = f.write

            def full(data):
                write(data[:3])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

            f.write = full
        return f


def test_a_full_disk_on_run_json_leaves_nothing_that_blocks_a_rerun(tmp_path, capsys, monkeypatch):
    from rcmdp_jax import run_folder

    out = tmp_path / "full"
    monkeypatch.setattr(run_folder, "open", _FullDisk("run.json"), raising=False)
    assert runner.main(TINY + ["--out", str(out)]) == 2
    _one_line(capsys, f"--out {out}: cannot write run.json: No space left on device")
    assert not out.exists()  # a re-run with the same --out is not blocked


def test_a_full_disk_while_saving_is_one_line_and_resume_finishes(trained, tmp_path, capsys, monkeypatch):
    import orbax.checkpoint as ocp

    from rcmdp_jax import run_folder

    out = tmp_path / "full"
    real = ocp.StandardCheckpointer.save

    def save_then_fail(self, path, *args, **kwargs):
        (Path(path).parent / f"{Path(path).name}.orbax-checkpoint-tmp-1").mkdir()  # what orbax leaves
        raise ValueError("OUT_OF_RANGE: Error writing file: No space left on device")

    monkeypatch.setattr(ocp.StandardCheckpointer, "save", save_then_fail)
    assert runner.main(TINY + ["--out", str(out)]) == 2
    _one_line(capsys, "checkpoint: cannot write the checkpoint (OUT_OF_RANGE: Error writing file: No space left on "
                      "device)", "--resume")  # fmt: skip
    algo = out / "cartpole" / "MDPO-Lag"
    assert sorted(p.name for p in algo.iterdir()) == ["timing.json", "train_metrics.npz"]  # no partial checkpoint
    monkeypatch.setattr(ocp.StandardCheckpointer, "save", real)
    # a result file cut short: the old one stays, no temporary file is left
    monkeypatch.setattr(run_folder, "open", _FullDisk("test_results.npz"), raising=False)
    assert runner.main(TINY + ["--out", str(out), "--resume"]) == 2
    _one_line(capsys, "test_results.npz: No space left on device")
    assert not (algo / "test_results.npz").exists() and not list(algo.glob(".*.tmp"))
    monkeypatch.undo()
    assert runner.main(TINY + ["--out", str(out), "--resume"]) == 0
    for name in ("test_results.npz", "train_metrics.npz"):
        want, got = np.load(trained / "cartpole" / "MDPO-Lag" / name), np.load(algo / name)
        for key in want.files:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_a_full_disk_in_the_report_keeps_the_old_summary(trained, tmp_path, capsys, monkeypatch):
    import report

    from rcmdp_jax import run_folder

    out = _copy(trained, tmp_path)
    before = (out / "cartpole" / "summary.md").read_text()
    monkeypatch.setattr(run_folder, "open", _FullDisk("summary.md"), raising=False)
    assert report.main([str(out)]) == 2
    _one_line(capsys, "summary.md: No space left on device")
    assert (out / "cartpole" / "summary.md").read_text() == before
    assert not list((out / "cartpole").glob(".*.tmp"))


def test_another_users_run_folder_is_one_line_and_untouched(trained, tmp_path, capsys, monkeypatch):
    """Tests run as root, who may write anywhere: the permission check is injected."""
    import pathlib

    import report

    out = _copy(trained, tmp_path)
    before = _snapshot(out)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p).startswith(str(out)) else real_access(
        p, mode, **kw))  # fmt: skip
    assert runner.main(["--eval-only", str(out)]) == 2
    _one_line(capsys, f"{out}: Permission denied")
    assert runner.main(TINY + ["--resume", "--out", str(out)]) == 2
    _one_line(capsys, f"{out}: Permission denied")
    assert report.main([str(out)]) == 2
    _one_line(capsys, "Permission denied", "nothing was rewritten")
    # a run.json this user may not read
    real_read = pathlib.Path.read_text

    def unreadable(self, *args, **kwargs):
        if self.name == "run.json":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", unreadable)
    assert runner.main(["--eval-only", str(out)]) == 2
    _one_line(capsys, f"cannot read {out / 'run.json'}: Permission denied")
    assert report.main([str(out)]) == 2
    _one_line(capsys, "Permission denied")
    monkeypatch.undo()
    assert _snapshot(out) == before


def test_odd_names_a_long_out_and_a_lock_that_is_a_folder(trained, tmp_path, capsys):
    long = tmp_path / ("x" * 300)
    assert runner.main(TINY + ["--out", str(long)]) == 2
    _one_line(capsys, "File name too long")
    out = _copy(trained, tmp_path)
    (out / ".lock").mkdir()
    before = _snapshot(out)
    assert runner.main(["--eval-only", str(out)]) == 2
    _one_line(capsys, f"{out / '.lock'}: cannot take the run folder's lock (Is a directory)")
    assert _snapshot(out) == before and (out / ".lock").is_dir()


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
    assert runner.main([*args, "--algos", "PPO", "--out", str(out)]) == 2
    _one_line(capsys, message)
    assert not out.exists()


# ------------------------------------------------------------------ 5. the API's gaps
def test_a_family_member_outside_the_family_is_flagged_per_lane_under_vmap():
    import jax

    from rcmdp_jax import make_family, preset
    from rcmdp_jax.divergence import diverged_seeds
    from rcmdp_jax.train import TrainResult

    cfgs = [preset("cartpole", a, total_timesteps=64, n_steps=16, minibatch_size=16, eval_episodes=2,
                   ltma_iterations=2) for a in ("MDPO", "MDPO-Lag")]  # fmt: skip
    fam = make_family(cfgs)
    with pytest.raises(ValueError, match="member must index the family's 2 config"):
        fam(jax.random.PRNGKey(0), np.array([1, 7]))
    members = np.array([1, 7, 0])
    res = jax.jit(jax.vmap(fam))(jax.random.split(jax.random.PRNGKey(0), 3), members)
    valid = np.asarray(res.metrics["valid_input"]).reshape(3, -1)
    assert valid[0].all() and not valid[1].any() and valid[2].all()
    np.testing.assert_array_equal(diverged_seeds(TrainResult(res.state, res.metrics)), [False, True, False])


def test_an_infinite_kappa_is_refused_and_flagged_when_traced():
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import envs, make_train, preset

    env, params = envs.make("cartpole")
    inf = params.replace(kappa=jnp.array([np.inf, 0.05, 0.005, 0.05]))
    with pytest.raises(ValueError, match="kappa must be finite"):
        env.validate_params(inf)
    cfg = preset("cartpole", "MDPO", total_timesteps=64, n_steps=16, minibatch_size=16)
    with pytest.raises(ValueError, match="kappa must be finite"):
        make_train(cfg)(jax.random.PRNGKey(0), None, inf)
    assert not bool(jax.jit(env.kernel_ok)(inf)) and bool(jax.jit(env.kernel_ok)(params))


@pytest.mark.parametrize("name,action", [("gymnax:CartPole-v1", 7), ("gymnax:CartPole-v1", -1),
                                         ("gymnax:Pendulum-v1", [np.nan]), ("gymnax:Acrobot-v1", 3)])  # fmt: skip
def test_the_gymnax_wrapper_under_jit_makes_a_bad_action_nan_and_ends_the_episode(name, action):
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import envs

    env, params = envs.make(name)
    _, state = env.reset(jax.random.PRNGKey(0), params)
    good = jnp.zeros((), jnp.int32) if env.discrete else jnp.zeros((env.action_dim,), jnp.float32)
    step = jax.jit(env.step_env)
    _, s, r, done, info = step(jax.random.PRNGKey(1), state, good, params)
    assert np.isfinite(r) and np.all(np.isfinite(s.s)) and not done
    bad = jnp.asarray(action, good.dtype)
    _, s, r, done, info = step(jax.random.PRNGKey(1), state, bad, params)
    assert np.isnan(r) and np.all(np.isnan(s.s)) and np.all(np.isnan(info["costs"])) and bool(done)


@pytest.mark.parametrize("action", ["1", None, True, 7, np.nan])
def test_cartpole_step_names_an_action_that_is_not_one(action):
    import jax

    from rcmdp_jax import envs

    env, params = envs.make("cartpole")
    _, state = env.reset(jax.random.PRNGKey(0), params)
    with pytest.raises(ValueError, match=r"RobustCartPole: action .* is not in the action space; expected an integer"):
        env.step(jax.random.PRNGKey(1), state, action, params)


# ------------------------------------------------------------------ 6. the lock
def test_the_lock_is_taken_by_exactly_one_of_racing_takers(tmp_path):
    """Eight takers at once on a stale lock (a killed run's), fifteen times: one holds it.
    ``flock`` locks are per open file, so threads race like processes do."""
    from rcmdp_jax.plan import UsageError
    from rcmdp_jax.run_folder import RunFolder

    folder = RunFolder(tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    for _ in range(15):
        (tmp_path / ".lock").write_text(str(dead.pid))
        barrier, held, refused = threading.Barrier(8), [], []

        def take():
            barrier.wait()
            try:
                held.append(folder.lock())
            except UsageError as err:
                refused.append(str(err))

        threads = [threading.Thread(target=take) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(held) == 1 and len(refused) == 7, (len(held), refused)
        assert all("is in use by another run (PID" in r for r in refused)
        held[0]()
        assert not (tmp_path / ".lock").exists()
    release = folder.lock()  # released: free again
    release()


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
        (["--set", "lr=1e39"], "lr must be finite and > 0 in float32"),
    ],
)
def test_small_bad_inputs_are_one_line(tmp_path, capsys, recwarn, args, message):
    out = tmp_path / "never"
    assert runner.main([*args, "--out", str(out)]) == 2
    _one_line(capsys, "run.py: error: ", message)
    assert not out.exists()
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]  # no NumPy warning first


def test_distributed_input_is_checked_before_the_handshake(tmp_path, capsys, monkeypatch):
    from rcmdp_jax import runtime

    def handshake(args):
        raise AssertionError("joined the other processes before checking the input")

    monkeypatch.setattr(runtime, "start_processes", handshake)
    args = ["--distributed", "--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "0"]
    assert runner.main([*args, "--set", "lr=nan", "--out", str(tmp_path / "never")]) == 2
    _one_line(capsys, "lr must be a number, got 'nan'")


def test_eval_only_checks_the_compile_cache_and_devices(trained, tmp_path, capsys):
    out = _copy(trained, tmp_path)
    before = _snapshot(out)
    assert runner.main(["--eval-only", str(out), "--compile-cache", "/etc/passwd"]) == 2
    _one_line(capsys, "--compile-cache /etc/passwd: cannot use it as a folder")
    assert runner.main(["--eval-only", str(out), "--devices", "99"]) == 2
    _one_line(capsys, "--devices 99: this host has")
    assert _snapshot(out) == before


def test_sigterm_is_handled_like_ctrl_c_and_frees_the_lock(tmp_path):
    """The command itself: SIGTERM (a scheduler's stop) prints one line, exits 143 and
    leaves no lock behind."""
    out = tmp_path / "stopped"
    args = [a if a != "128" else "64000" for a in TINY]  # long enough to be stopped while training
    proc = subprocess.Popen([sys.executable, str(RUN_PY), *args, "--out", str(out), "--compile-cache", "off"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, JAX_PLATFORMS="cpu"))  # fmt: skip
    for line in proc.stdout:
        if "compiled in" in line:
            break
    assert (out / ".lock").read_text() == str(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "interrupted" in err and "--resume" in err and "Traceback" not in err
    assert not (out / ".lock").exists()


def test_a_multiplier_step_that_blows_up_behind_the_clip_is_divergence(tmp_path, capsys):
    """``eta_lam=1e30`` on MDPO-Lag: ``lam`` stays within [0, lam_clip] (the clip), but its
    ascent step ``eta_lam * C^`` is beyond ``BLOW_UP``: diverged, never bold."""
    out = tmp_path / "dual"
    assert runner.main(TINY + ["--set", "eta_lam=1e30", "--out", str(out)]) == 4
    lam = np.load(out / "cartpole" / "MDPO-Lag" / "train_metrics.npz")["lam"]
    assert np.all(np.isfinite(lam)) and lam.max() <= 50.0  # what the 1e12 rule on lam alone would pass
    assert "DIVERGED" in capsys.readouterr().out
    md = (out / "cartpole" / "summary.md").read_text()
    assert "MDPO-Lag (0/2 seeds; 2 diverged) | diverged: no seed left" in md and "**" not in md


def test_a_truncated_checkpoint_is_set_aside_without_event_loop_noise(trained, tmp_path):
    """orbax's reads still in flight when a restore fails finish on a closed event loop;
    their tracebacks, printed from tensorstore's threads as the process goes on, are kept
    off. The command itself: the noise belongs to the process, not to one call."""
    out = _copy(trained, tmp_path)
    ckpt = out / "cartpole" / "MDPO-Lag" / "checkpoint"
    for f in ckpt.iterdir():
        if f.name not in ("_CHECKPOINT_METADATA", "_METADATA"):
            shutil.rmtree(f) if f.is_dir() else f.unlink()
    proc = subprocess.run([sys.executable, str(RUN_PY), "--eval-only", str(out)], capture_output=True, text=True,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=300)  # fmt: skip
    assert proc.returncode == 5, proc.stderr
    assert "Event loop is closed" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().endswith("damaged checkpoint(s) of cartpole/MDPO-Lag set aside; --resume retrains them")
    assert (out / "cartpole" / "MDPO-Lag" / "checkpoint.damaged").is_dir()


def test_the_event_loop_noise_filter_drops_only_that_noise():
    import io

    from rcmdp_jax.checkpoint import _LoopClosedFilter

    buf = io.StringIO()
    f = _LoopClosedFilter(buf)
    noise = ('Traceback (most recent call last):\n  File "base_events.py", line 806, in call_soon_threadsafe\n'
             "    self._check_closed()\nRuntimeError: Event loop is closed\n")  # fmt: skip
    other = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nValueError: kept\n'
    for piece in ("run.py: error: ", "one line\n", noise, noise[:40], noise[40:], other, "partial"):
        f.write(piece)
    f.flush()
    assert buf.getvalue() == "run.py: error: one line\n" + other + "partial"

"""Issue 31, the run folder as a hostile user meets it: an edited run.json, a full disk,
another user's folder, odd names, a truncated checkpoint, SIGTERM. Each refused command
is one line (exit 2) and changes nothing already written. In process through the entry
point; the SIGTERM and event-loop cases run the command itself."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rcmdp_jax.study import cli

RUN_PY = Path(__file__).resolve().parent.parent / "experiments" / "run.py"
TINY = ["--algos", "MDPO-Lag", "--seeds", "2", "--steps", "128", "--n-test", "3", "--set", "n_steps=16",
        "--set", "minibatch_size=16", "--set", "ltma_iterations=2", "--set", "eval_episodes=2"]  # fmt: skip
# ``trained`` (conftest.py): this command's run folder


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
         "envs=['nope']": "environment 'nope'", "env='inventory'": "its env is 'inventory', not 'cartpole'",
         "policy_hidden=[7]": "the config of cartpole/MDPO-Lag does not match its checkpoint"}  # fmt: skip


@pytest.mark.parametrize("what", list(EDITS))
def test_an_edited_run_json_is_refused_and_nothing_changes(trained, tmp_path, capsys, what):
    import report

    out = _copy(trained, tmp_path)
    (out / "run.json").write_text(json.dumps(_edit(json.loads((out / "run.json").read_text()), what)))
    before = _snapshot(out)
    assert cli.main(["--eval-only", str(out)]) == 2
    _one_line(capsys, EDITS[what])
    assert cli.main(TINY + ["--resume", "--out", str(out)]) == 2
    capsys.readouterr()
    if what != "policy_hidden=[7]":  # the report reads results only, never a checkpoint
        assert report.main([str(out)]) == 2
        _one_line(capsys, EDITS[what])
    assert _snapshot(out) == before


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
    from rcmdp_jax.study import run_folder

    out = tmp_path / "full"
    monkeypatch.setattr(run_folder, "open", _FullDisk("run.json"), raising=False)
    assert cli.main(TINY + ["--out", str(out)]) == 2
    _one_line(capsys, f"--out {out}: cannot write run.json: No space left on device")
    assert not out.exists()  # a re-run with the same --out is not blocked
    # Ctrl-C while run.json is written: no folder left either
    monkeypatch.setattr(run_folder, "write_text", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        run_folder.RunFolder(out).create(SimpleNamespace(to_json=lambda: "{}"))
    assert not out.exists()


def test_a_full_disk_while_saving_is_one_line_and_resume_finishes(trained, tmp_path, capsys, monkeypatch):
    import orbax.checkpoint as ocp

    from rcmdp_jax.study import run_folder

    out = tmp_path / "full"
    real = ocp.StandardCheckpointer.save

    def save_then_fail(self, path, *args, **kwargs):
        tmp = Path(path).parent / f"{Path(path).name}.orbax-checkpoint-tmp"  # what orbax leaves, metadata too
        (tmp / "d").mkdir(parents=True)
        (tmp / "_CHECKPOINT_METADATA").write_text("{}")
        raise ValueError(
            f'RESOURCE_EXHAUSTED: Error writing "x" in OCDBT database at local file "{path}": Failed '
            "to write 875 bytes to file 5: No space left on device [os_error_code='28']"
        )

    monkeypatch.setattr(ocp.StandardCheckpointer, "save", save_then_fail)
    assert cli.main(TINY + ["--out", str(out)]) == 2
    _one_line(capsys, "MDPO-Lag/checkpoint: No space left on device (writing the checkpoint)", "--resume")
    algo = out / "cartpole" / "MDPO-Lag"
    assert sorted(p.name for p in algo.iterdir()) == ["timing.json", "train_metrics.npz"]  # no partial checkpoint
    monkeypatch.setattr(ocp.StandardCheckpointer, "save", real)
    # a result file cut short: the old one stays, no temporary file is left
    monkeypatch.setattr(run_folder, "open", _FullDisk("test_results.npz"), raising=False)
    assert cli.main(TINY + ["--out", str(out), "--resume"]) == 2
    _one_line(capsys, "test_results.npz: No space left on device")
    assert not (algo / "test_results.npz").exists() and not list(algo.glob(".*.tmp"))
    monkeypatch.undo()
    assert cli.main(TINY + ["--out", str(out), "--resume"]) == 0
    for name in ("test_results.npz", "train_metrics.npz"):
        want, got = np.load(trained / "cartpole" / "MDPO-Lag" / name), np.load(algo / name)
        for key in want.files:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_a_full_disk_in_the_report_keeps_the_old_summary(trained, tmp_path, capsys, monkeypatch):
    import report

    from rcmdp_jax.study import run_folder

    out = _copy(trained, tmp_path)
    before = (out / "cartpole" / "summary.md").read_text()
    monkeypatch.setattr(run_folder, "open", _FullDisk("summary.md"), raising=False)
    assert report.main([str(out)]) == 2
    _one_line(capsys, "summary.md: No space left on device")
    assert (out / "cartpole" / "summary.md").read_text() == before
    assert not list((out / "cartpole").glob(".*.tmp"))


def test_the_report_names_a_run_that_still_writes_the_folder(trained, tmp_path, capsys, monkeypatch):
    """A run writing the folder holds its lock: the report says so instead of "no test
    results", and rewrites nothing; once the lock is free it reports."""
    import report

    from rcmdp_jax.study.run_folder import RunFolder

    out = _copy(trained, tmp_path)
    before = _snapshot(out)
    release = RunFolder(out).lock()
    try:
        assert report.main([str(out)]) == 2
        _one_line(capsys, f"{out} is in use by another run or report (PID {os.getpid()})", "nothing was rewritten")
        real_access = os.access  # a folder this user may not write (its env folders writable): still refused
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(out) else real_access(
            p, mode, **kw))  # fmt: skip
        (out / ".lock").write_text("4242\n\x1b[31mRED")  # what the holder wrote is repeated only as a PID
        assert report.main([str(out)]) == 2
        _one_line(capsys, f"{out} is in use by another run or report (PID ?)", "nothing was rewritten")
        monkeypatch.undo()
    finally:
        release()
    assert _snapshot(out) == before
    assert report.main([str(out)]) == 0 and not (out / ".lock").exists()


def test_a_lock_that_is_a_link_is_refused_and_what_it_points_to_is_untouched(trained, tmp_path, capsys):
    import report

    out = _copy(trained, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("not the run's")
    (out / ".lock").symlink_to(victim)
    before = _snapshot(out)
    assert report.main([str(out)]) == 2
    _one_line(capsys, "cannot take the run folder's lock")
    assert cli.main(["--eval-only", str(out)]) == 2
    _one_line(capsys, "cannot take the run folder's lock")
    assert victim.read_text() == "not the run's" and (out / ".lock").is_symlink()
    assert _snapshot(out) == before


def test_another_users_run_folder_is_one_line_and_untouched(trained, tmp_path, capsys, monkeypatch):
    """Tests run as root, who may write anywhere: the permission check is injected."""
    import pathlib

    import report

    out = _copy(trained, tmp_path)
    before = _snapshot(out)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p).startswith(str(out)) else real_access(
        p, mode, **kw))  # fmt: skip
    assert cli.main(["--eval-only", str(out)]) == 2
    _one_line(capsys, f"{out}: Permission denied")
    assert cli.main(TINY + ["--resume", "--out", str(out)]) == 2
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
    assert cli.main(["--eval-only", str(out)]) == 2
    _one_line(capsys, f"cannot read {out / 'run.json'}: Permission denied")
    assert report.main([str(out)]) == 2
    _one_line(capsys, "Permission denied")
    monkeypatch.undo()
    assert _snapshot(out) == before


def test_odd_names_a_long_out_and_a_lock_that_is_a_folder(trained, tmp_path, capsys):
    long = tmp_path / ("x" * 300)
    assert cli.main(TINY + ["--out", str(long)]) == 2
    _one_line(capsys, "File name too long")
    out = _copy(trained, tmp_path)
    (out / ".lock").mkdir()
    before = _snapshot(out)
    assert cli.main(["--eval-only", str(out)]) == 2
    _one_line(capsys, f"{out / '.lock'}: cannot take the run folder's lock (Is a directory)")
    assert _snapshot(out) == before and (out / ".lock").is_dir()


def test_eval_only_checks_the_compile_cache_and_devices(trained, tmp_path, capsys):
    out = _copy(trained, tmp_path)
    before = _snapshot(out)
    assert cli.main(["--eval-only", str(out), "--compile-cache", "/etc/passwd"]) == 2
    _one_line(capsys, "--compile-cache /etc/passwd: cannot use it as a folder")
    assert cli.main(["--eval-only", str(out), "--devices", "99"]) == 2
    _one_line(capsys, "--devices 99: this host has")
    assert _snapshot(out) == before


@pytest.mark.slow
def test_sigterm_is_handled_like_ctrl_c_and_frees_the_lock(tmp_path):
    """The command itself: SIGTERM (a scheduler's stop) prints one line, exits 143 and
    leaves no lock behind."""
    out = tmp_path / "stopped"
    args = [a if a != "128" else "64000" for a in TINY]  # long enough to be stopped while training
    proc = subprocess.Popen([sys.executable, str(RUN_PY), *args, "--out", str(out)],
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


def test_a_truncated_checkpoint_is_set_aside_without_event_loop_noise(trained, tmp_path):
    """A checkpoint whose files are not those listed when it was saved is refused before
    orbax reads it (orbax's reads of a cut checkpoint end on a closed event loop, whose
    tracebacks tensorstore's threads print as the process goes on). The command itself:
    stderr is the one line."""
    out = _copy(trained, tmp_path)
    ckpt = out / "cartpole" / "MDPO-Lag" / "checkpoint"
    for f in ckpt.iterdir():
        if f.name not in ("_CHECKPOINT_METADATA", "_METADATA"):
            shutil.rmtree(f) if f.is_dir() else f.unlink()
    proc = subprocess.run([sys.executable, str(RUN_PY), "--eval-only", str(out)], capture_output=True, text=True,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=300)  # fmt: skip
    assert proc.returncode == 5, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "damaged checkpoint(s) of cartpole/MDPO-Lag set aside; --resume retrains them" in proc.stderr
    assert "is missing" in proc.stdout, proc.stdout  # the file list names what is gone
    assert (out / "cartpole" / "MDPO-Lag" / "checkpoint.damaged").is_dir()
    assert (out / "cartpole" / "MDPO-Lag" / "checkpoint.damaged.files.json").is_file()


def test_a_checkpoint_file_cut_short_or_missing_is_named_by_the_file_list(trained, tmp_path):
    from rcmdp_jax import checkpoint

    out = _copy(trained, tmp_path)
    ckpt = out / "cartpole" / "MDPO-Lag" / "checkpoint"
    assert checkpoint.files_problem(ckpt) is None
    listing = json.loads(checkpoint.files_path(ckpt).read_text())
    big = max(listing, key=listing.get)  # the largest file: cut it to half
    with open(ckpt / big, "r+b") as f:
        f.truncate(listing[big] // 2)
    assert checkpoint.files_problem(ckpt) == f"{big} has {listing[big] // 2} bytes, {listing[big]} when saved"
    (ckpt / big).unlink()
    assert checkpoint.files_problem(ckpt) == f"{big} is missing"
    checkpoint.files_path(ckpt).write_text("[")
    assert "cannot be read" in checkpoint.files_problem(ckpt)

"""The run folder's refusals (1 of 2): an edited
run.json (by the run, --eval-only and the report), a folder a run still writes, a lock that is
a link or a folder or raced for, another user's folder, odd names, options --eval-only checks. Each refused command is one line (exit 2)
and changes nothing already written. In process through the entry point, on copies of
``trained`` (conftest.py). Full disks, SIGTERM and cut checkpoints:
``test_run_folder_writes.py``."""

import errno
import json
import os
import subprocess
import threading

import pytest
from cli_helpers import _copy, _one_line, _snapshot
from tiny_configs import HOSTILE_TINY as TINY

from rcmdp_jax.study import cli


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
         "seed=2**40": "seed must be an integer in [0, 2**32)", "lr='abc'": "lr must be a number, got 'abc'",
         "gamma=5": "gamma must be a number in [0, 1]", "unknown field": "unknown config field(s) ['colour']",
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


# ------------------------------------------------------------------ 3. locks, permissions, names
def test_the_report_names_a_run_that_still_writes_the_folder(trained, tmp_path, capsys, monkeypatch):
    """A run writing the folder holds its lock: the report says so instead of "no test
    results", and rewrites nothing; once the lock is free it reports."""
    import report

    from rcmdp_jax.study.run_folder import take

    out = _copy(trained, tmp_path)
    before = _snapshot(out)
    release = take(out)
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


def test_eval_only_on_an_unreadable_train_metrics_file_is_one_line(trained, tmp_path, capsys):
    """--eval-only re-creates no training metrics (--resume does): the report cannot read them."""
    out = _copy(trained, tmp_path)
    metrics = out / "cartpole" / "MDPO-Lag" / "train_metrics.npz"
    metrics.write_bytes(metrics.read_bytes()[:100])
    assert cli.main(["--eval-only", str(out)]) == 2  # not a DamagedFile's traceback
    _one_line(capsys, f"{metrics} cannot be read", "--resume re-creates it from the checkpoint")
    assert not (out / ".lock").exists() and metrics.stat().st_size == 100


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


# ------------------------------------------------------------------ an edited run.json, through --eval-only and the report
@pytest.mark.parametrize(
    "edit,message",
    [
        ({"seed": 1}, "run.json says seed 1 but cartpole/MDPO-Lag was trained with seed 0"),
        ({"n_test": 7}, "run.json says 7 test episode(s) per kernel (n_test) but cartpole/MDPO-Lag was tested with 3"),
        ({"seeds": 3}, "run.json says 3 seed(s) but cartpole/MDPO-Lag was trained with 2"),
        ({"colour": "blue"}, "unknown key(s) ['colour']"),
    ],
)
def test_an_edited_run_json_is_refused_by_eval_only_and_the_report(trained, tmp_path, capsys, edit, message):
    import report

    out = _copy(trained, tmp_path)
    (out / "run.json").write_text(json.dumps({**json.loads((out / "run.json").read_text()), **edit}))
    before = _snapshot(out)
    assert cli.main(["--eval-only", str(out)]) == 2
    _one_line(capsys, message)
    assert report.main([str(out)]) == 2
    _one_line(capsys, "report: error: ", message)
    assert _snapshot(out) == before


# ------------------------------------------------------------------ the lock under a race
def test_the_lock_is_taken_by_exactly_one_of_racing_takers(tmp_path):
    """Eight takers at once on a stale lock (a killed run's), fifteen times: one holds it.
    ``flock`` locks are per open file, so threads race like processes do."""
    from rcmdp_jax.study.run_folder import take
    from rcmdp_jax.study.run_plan import RunFolderError

    dead = subprocess.Popen(["true"])
    dead.wait()
    for _ in range(15):
        (tmp_path / ".lock").write_text(str(dead.pid))
        barrier, held, refused = threading.Barrier(8), [], []

        def taker():
            barrier.wait()
            try:
                held.append(take(tmp_path))
            except RunFolderError as err:
                refused.append(str(err))

        threads = [threading.Thread(target=taker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(held) == 1 and len(refused) == 7, (len(held), refused)
        assert all("is in use by another run or report (PID" in r for r in refused)
        held[0]()
        assert not (tmp_path / ".lock").exists()
    release = take(tmp_path)  # released: free again
    release()

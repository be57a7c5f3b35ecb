"""The run folder when a write is cut short (2 of 2): a full
disk while run.json, a checkpoint, the results or the report are written; SIGTERM while
training; a checkpoint truncated or with a file missing. Each is one line, and leaves
nothing that blocks a rerun or --resume. In process through the entry point; the SIGTERM
and event-loop cases run the command itself. Edited and locked folders:
``test_run_folder_refusals.py``."""

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
from cli_helpers import RUN_PY, _copy, _one_line
from tiny_configs import HOSTILE_TINY as TINY

from rcmdp_jax import atomic
from rcmdp_jax.study import cli


# ------------------------------------------------------------------ 3. a full disk
class _FullDisk:
    """``open`` for ``rcmdp_jax.atomic`` (the run folder's writes): files named ``names`` get a few bytes, then ENOSPC."""

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


def test_a_write_cut_short_keeps_the_old_file_and_names_it(tmp_path, monkeypatch):
    """``rcmdp_jax.atomic`` (the run folder's, the program store's and a checkpoint's file list's
    writes): a full disk or Ctrl-C leaves the old file whole and no temporary file."""
    path = tmp_path / "x.json"
    atomic.write_text(path, "old")
    monkeypatch.setattr(atomic, "open", _FullDisk("x.json"), raising=False)
    with pytest.raises(OSError) as err:
        atomic.write_bytes(path, b"new")
    assert (err.value.errno, err.value.filename) == (errno.ENOSPC, str(path))  # the file, not the temporary one
    monkeypatch.setattr(atomic, "open", open, raising=False)
    monkeypatch.setattr(atomic.os, "replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text(path, "new")
    assert path.read_text() == "old" and list(tmp_path.iterdir()) == [path]


def test_a_full_disk_on_run_json_leaves_nothing_that_blocks_a_rerun(tmp_path, capsys, monkeypatch):
    from rcmdp_jax.study import run_folder

    out = tmp_path / "full"
    monkeypatch.setattr(atomic, "open", _FullDisk("run.json"), raising=False)
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
    # no partial checkpoint (the training log is there: it is written while training)
    assert sorted(p.name for p in algo.iterdir()) == ["tensorboard", "timing.json", "train_metrics.csv", "train_metrics.npz"]
    monkeypatch.setattr(ocp.StandardCheckpointer, "save", real)
    # a result file cut short: the old one stays, no temporary file is left
    monkeypatch.setattr(atomic, "open", _FullDisk("test_results.npz"), raising=False)
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

    out = _copy(trained, tmp_path)
    before = (out / "cartpole" / "summary.md").read_text()
    monkeypatch.setattr(atomic, "open", _FullDisk("summary.md"), raising=False)
    assert report.main([str(out)]) == 2
    _one_line(capsys, "summary.md: No space left on device")
    assert (out / "cartpole" / "summary.md").read_text() == before
    assert not list((out / "cartpole").glob(".*.tmp"))


# ------------------------------------------------------------------ SIGTERM, cut checkpoints
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


SECOND_SIGNAL = """
import os, signal, threading, time
from rcmdp_jax.study.commands import signals_exit
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()  # a thread that may take a signal, as JAX's
with signals_exit("prog", "said") as state:
    state.undo.append(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(0.5)))  # a second one, undoing
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
"""


@pytest.mark.slow  # starts another Python process (pyproject.toml's markers)
def test_a_second_signal_while_undoing_is_not_run_again():
    """A second SIGTERM that another thread takes while the first is being handled: said once,
    the undoing run once (the handler ran again inside itself, said it again, undid again)."""
    proc = subprocess.run([sys.executable, "-c", SECOND_SIGNAL], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert proc.stderr.count("prog: interrupted: said") == 1, proc.stderr


@pytest.mark.slow  # starts another Python process (pyproject.toml's markers)
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


# ------------------------------------------------------------------ orbax's event-loop noise
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

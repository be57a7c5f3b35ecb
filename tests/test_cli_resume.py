"""Reports and resume on a finished run folder (a copy of ``full_run``, conftest.py):
stale or missing results never served, NaN and foreign results in the report, --resume
naming the option that differs, reading an older run.json and retraining only a damaged
family; the folder's rules for --eval-only, --resume, its lock and damaged files."""

import json
import shutil
import sys

import numpy as np
import pytest
from cli_helpers import _assert_same_run, _copy, _load
from tiny_configs import ALGOS, QUICK, TINY

from rcmdp_jax.study import cli


@pytest.mark.slow
def test_stale_results_are_never_served(full_run, tmp_path, capsys):
    import report

    out = _copy(full_run, tmp_path)
    env_dir = out / "cartpole"
    # eval-only with a checkpoint gone: non-zero, names it, and its stale row leaves the table
    shutil.rmtree(env_dir / "PPO-Lag" / "checkpoint")
    assert cli.main(["--eval-only", str(out)]) == 5
    assert "no checkpoint for cartpole/PPO-Lag" in capsys.readouterr().err
    assert "PPO-Lag" not in (env_dir / "summary.md").read_text()
    # --eval-only cannot silently ignore another --n-test
    assert cli.main(["--eval-only", str(out), "--n-test", "50"]) == 2
    assert "--n-test" in capsys.readouterr().err
    # report.py refuses when an algorithm's test results are missing, and rewrites nothing
    before = (env_dir / "summary.md").read_text()
    (env_dir / "MDPO-Lag" / "test_results.npz").unlink()
    assert report.main([str(out)]) == 2
    assert "no test results for cartpole/MDPO-Lag" in capsys.readouterr().err
    assert (env_dir / "summary.md").read_text() == before


@pytest.mark.slow
def test_report_on_results_with_nan_says_so_instead_of_nan(full_run, tmp_path, capsys):
    import report

    out = _copy(full_run, tmp_path)
    path = out / "cartpole" / "PPO-Lag" / "test_results.npz"
    z = dict(np.load(path))
    z.pop("diverged")  # as written by an older runner, without the flag
    z["V"][1, 3, 2, 0] = np.nan
    np.savez_compressed(path, **z)
    assert report.main([str(out)]) == 0
    md = (out / "cartpole" / "summary.md").read_text()
    assert "nan" not in md and "PPO-Lag (1/2 seeds; 1 diverged)" in md


@pytest.mark.slow
def test_report_on_a_results_file_of_another_environment_is_one_line(full_run, tmp_path, capsys):
    """A test_results.npz copied in from a run on another environment (4 kernels, not
    CartPole's 16): one line naming it, nothing rewritten (not an IndexError)."""
    import report

    out = _copy(full_run, tmp_path)
    path = out / "cartpole" / "PPO-Lag" / "test_results.npz"
    z = dict(np.load(path))
    z["V"], z["C"] = z["V"][:, :, :4], z["C"][:, :, :4]
    np.savez_compressed(path, **z)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert report.main([str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "PPO-Lag/test_results.npz holds results of shape (11, 4, 3)" in err, err
    assert "MDPO-Lag's (11, 16, 3): it is not this run's" in err, err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_resume_names_the_option_that_differs(full_run, tmp_path, capsys):
    out = _copy(full_run, tmp_path)
    assert cli.main(TINY + ["--out", str(out), "--resume", "--seeds", "3"]) == 2
    assert "the options differ from the run in" in capsys.readouterr().err
    assert cli.main(TINY + ["--out", str(out), "--resume", "--set", "eta_lam=0.5"]) == 2
    err = capsys.readouterr().err
    assert "(configs: cartpole/MDPO-Lag: eta_lam; cartpole/MDPO-Robust: eta_lam; cartpole/PPO-Lag: eta_lam)" in err


@pytest.mark.slow
def test_plots_off_writes_the_tables_and_leaves_no_earlier_figures(full_run, tmp_path, capsys):
    """``--plots off`` on a folder whose report drew figures: the same tables, the earlier
    figures removed (they would show other results than the tables) and named; ``rcmdp
    report`` draws them again."""
    import report

    out = _copy(full_run, tmp_path)
    env_dir = out / "cartpole"
    drawn = sorted(p.name for p in env_dir.glob("*.png"))
    assert "test_return.png" in drawn and "train_curves.png" in drawn, drawn
    summary = (env_dir / "summary.md").read_text()
    mine = ["test_cost_0.png", "test_cost_2.png", "test_cost_notes.png"]  # one constraint: not figures of ours
    for name in mine:
        (env_dir / name).write_bytes(b"a user's own file")
    assert cli.main(["--eval-only", str(out), *QUICK]) == 0
    assert f"removed the earlier report's figures ({', '.join(drawn)})" in capsys.readouterr().out
    assert sorted(p.name for p in env_dir.glob("*.png")) == mine
    assert (env_dir / "summary.md").read_text() == summary
    assert report.main([str(out)]) == 0
    assert sorted(p.name for p in env_dir.glob("*.png")) == sorted(drawn + mine)


@pytest.mark.slow  # as every check on the shared command-line study: its training is the second step's
def test_resume_of_a_run_written_before_a_config_field_existed(full_run, tmp_path, capsys):
    """An older version's run.json lacks fields added since (e.g. ``dual_dropout``): they
    count as their defaults, what that version ran, so the run resumes; one written when the
    robust methods' options were flat fields (``"ltma_estimator": "score"``) reads into
    ``Config.options``, and one with ``robust`` beside the ``adversary`` it named either way
    (LTMA when not robust) into ``adversary``; a field or option whose value this command
    changes is named."""
    out = _copy(full_run, tmp_path)
    plan = json.loads((out / "run.json").read_text())
    for cfg in plan["configs"]["cartpole"].values():
        assert cfg.pop("dual_dropout") is False
        cfg.update({k: v for k, v in cfg.pop("options") if k != "dual_reading"})  # the flat form
        cfg["options"] = []
        robust = cfg["adversary"] != "none"
        cfg.update(robust=robust, adversary=cfg["adversary"] if robust else "ltma")
    assert [c["robust"] for c in plan["configs"]["cartpole"].values()] == [False, True, False]  # ALGOS' order
    assert all(c["ltma_estimator"] == "score" for c in plan["configs"]["cartpole"].values() if c["robust"])
    (out / "run.json").write_text(json.dumps(plan))
    before = _load(out, "PPO-Lag", "test_results.npz")["V"]
    assert cli.main(TINY + QUICK + ["--out", str(out), "--resume"]) == 0
    np.testing.assert_array_equal(_load(out, "PPO-Lag", "test_results.npz")["V"], before)
    capsys.readouterr()
    assert cli.main(TINY + ["--out", str(out), "--resume", "--set", "ltma_estimator=pathwise"]) == 2
    assert "cartpole/MDPO-Robust: ltma_estimator" in capsys.readouterr().err  # named where it is read


@pytest.mark.slow
def test_resume_with_a_damaged_checkpoint_retrains_only_that_family(full_run, tmp_path, capsys):
    out = _copy(full_run, tmp_path)
    env_dir = out / "cartpole"
    # a checkpoint whose metadata file is missing (killed while saving) and whose results are gone
    (env_dir / "PPO-Lag" / "checkpoint" / "_CHECKPOINT_METADATA").unlink()
    (env_dir / "PPO-Lag" / "test_results.npz").unlink()
    kept = (env_dir / "MDPO-Lag" / "train_metrics.npz").stat().st_mtime_ns
    assert cli.main(TINY + QUICK + ["--out", str(out), "--resume"]) == 0
    assert "incomplete checkpoint of PPO-Lag moved to" in capsys.readouterr().out
    assert (env_dir / "PPO-Lag" / "checkpoint.damaged").is_dir()
    assert (env_dir / "MDPO-Lag" / "train_metrics.npz").stat().st_mtime_ns == kept
    _assert_same_run(full_run, out, ["PPO-Lag"])
    # a truncated checkpoint (metadata there, data gone) with results missing: set aside, named
    for f in (env_dir / "PPO-Lag" / "checkpoint").iterdir():
        if f.name != "_CHECKPOINT_METADATA":
            shutil.rmtree(f) if f.is_dir() else f.unlink()
    (env_dir / "PPO-Lag" / "test_results.npz").unlink()
    assert cli.main(TINY + QUICK + ["--out", str(out), "--resume"]) == 5
    assert "damaged checkpoint" in capsys.readouterr().out
    assert cli.main(TINY + QUICK + ["--out", str(out), "--resume"]) == 0  # and the next resume retrains it
    _assert_same_run(full_run, out, ["PPO-Lag"])


@pytest.mark.slow
def test_run_folder_rules_eval_only_resume_lock_and_damaged_files(full_run, tmp_path, capsys):
    """--eval-only refuses the options it would ignore; --resume refuses a different
    --worst-case and an edited run.json; a second process is refused by the folder's
    lock (a dead process's lock is taken over, and --eval-only then re-runs the sweep from
    the checkpoints to the saved numbers); a truncated result file is one line in
    report.py, and --resume re-creates it (re-sweep, metrics from the checkpoint)."""
    import os
    import subprocess

    import report

    out = _copy(full_run, tmp_path)
    env_dir = out / "cartpole"
    summary = (env_dir / "summary.md").read_text()
    for extra, name in ((["--set", "lr=nan"], "--set"), (["--seeds", "0"], "--seeds"), (["--env", "nope"], "--env"),
                        (["--out", str(tmp_path / "x")], "--out"), (["--resume"], "--resume")):  # fmt: skip
        assert cli.main(["--eval-only", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert f"does not use {name}" in err and err.count("\n") == 1, err
    assert (env_dir / "summary.md").read_text() == summary and not (tmp_path / "x").exists()
    assert cli.main(TINY + ["--out", str(out), "--resume", "--worst-case"]) == 2
    assert "options differ" in capsys.readouterr().err
    plan = json.loads((out / "run.json").read_text())
    for edit, message in (({"seeds": 3}, "run.json says 3 seed(s) but cartpole/MDPO-Lag was trained with 2"),
                          ({"algos": "MDPO-Lag"}, "envs and algos must be lists of distinct names")):  # fmt: skip
        (out / "run.json").write_text(json.dumps({**plan, **edit}))
        assert cli.main(["--eval-only", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    (out / "run.json").write_text(json.dumps(plan))
    # the lock: a running process holds it (flock); a dead one's is taken over
    hold = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode()); print(1, flush=True); "
            "time.sleep(60)")  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()  # held
        assert cli.main(["--eval-only", str(out)]) == 2
        assert f"in use by another run or report (PID {holder.pid})" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    # the lock's process is gone: taken over; --eval-only re-runs the sweep from the checkpoints
    for algo in ALGOS.split(","):
        (env_dir / algo / "test_results.npz").unlink()
    assert cli.main(["--eval-only", str(out)]) == 0
    assert not (out / ".lock").exists()  # and released
    for algo in ALGOS.split(","):
        want = _load(full_run, algo, "test_results.npz")["V"]
        np.testing.assert_array_equal(_load(out, algo, "test_results.npz")["V"], want)
    # truncated files: report.py says so in one line; --resume re-creates them
    metrics = env_dir / "PPO-Lag" / "train_metrics.npz"
    tests = env_dir / "MDPO-Lag" / "test_results.npz"
    want_metrics, want_tests = _load(out, "PPO-Lag", "train_metrics.npz"), _load(out, "MDPO-Lag", "test_results.npz")
    for path in (metrics, tests):
        path.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])
    capsys.readouterr()
    assert report.main([str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot be read" in err and "--resume re-creates it" in err and err.count("\n") == 1, err
    assert cli.main(TINY + QUICK + ["--out", str(out), "--resume"]) == 0
    assert "train_metrics.npz could not be read: re-created from the checkpoint" in capsys.readouterr().out
    for got, want in ((_load(out, "PPO-Lag", "train_metrics.npz"), want_metrics),
                      (_load(out, "MDPO-Lag", "test_results.npz"), want_tests)):  # fmt: skip
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.slow
def test_a_run_stopped_mid_family_resumes_from_its_snapshot(tmp_path, capsys, monkeypatch):
    """Ctrl-C in the middle of a family's training (a snapshot after every chunk here; every
    ``snapshots.EVERY_S`` seconds by default): ``--resume`` continues from the last snapshot, and
    the run folder holds what an uninterrupted run writes."""
    from tiny_configs import HOSTILE_TINY

    from rcmdp_jax import snapshots
    from rcmdp_jax.study.training_log import TrainingLog

    argv = list(HOSTILE_TINY)
    argv[argv.index("--steps") + 1] = "768"  # 12 iterations: three chunks of the program `trained` runs
    assert cli.main(argv + ["--out", str(tmp_path / "whole")]) == 0
    monkeypatch.setattr(snapshots, "EVERY_S", 0.0)
    logged = TrainingLog.chunk

    def stopped(self, member, metrics, first_iteration, seeds=None):
        if first_iteration >= 5:
            raise KeyboardInterrupt  # the process dies in the second chunk: the snapshot holds iterations 0-4
        return logged(self, member, metrics, first_iteration, seeds)

    monkeypatch.setattr(TrainingLog, "chunk", stopped)
    out = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):  # (a real signal ends the process: commands.signals_exit)
        cli.main(argv + ["--out", str(out)])
    assert (out / "cartpole" / "MDPO-Lag" / snapshots.FILE).exists()
    monkeypatch.setattr(TrainingLog, "chunk", logged)
    capsys.readouterr()
    assert cli.main(argv + ["--out", str(out), "--resume"]) == 0
    assert "continuing from iteration 5 of 12" in capsys.readouterr().out
    assert not (out / "cartpole" / "MDPO-Lag" / snapshots.FILE).exists()
    _assert_same_run(tmp_path / "whole", out, ["MDPO-Lag"])
    csv = [(d / "cartpole" / "MDPO-Lag" / "train_metrics.csv").read_text() for d in (tmp_path / "whole", out)]
    assert csv[0] == csv[1]

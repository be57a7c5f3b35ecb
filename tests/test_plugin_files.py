"""``--plugins FILE.py|MODULE``: a user's plug-ins imported before anything reads the registries,
recorded in run.json (path, SHA-256, what it registers) and imported again by ``rcmdp report``,
``--resume`` and ``--eval-only``; bad input refused in one line, exit 2, nothing written; a file
whose source changed since the run refused. The slow test trains ``tests/my_rule.py`` (the example
of docs/design.md) from the command line, its gain swept as lanes, resumes and reports it."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import RUN_PY

from rcmdp_jax import constraints
from rcmdp_jax.study import user_code
from rcmdp_jax.study.cli import main
from rcmdp_jax.study.console import report as report_main

MY_RULE = Path(__file__).resolve().parent / "my_rule.py"
RULE = '''
from rcmdp_jax import constraints


class Doubled(constraints.Rule):
    suffix = "{suffix}"

    def step(self, lam, c_hat, hp):
        return lam + 2 * hp.eta_lam * c_hat


constraints.register("{name}", Doubled)
'''


@pytest.fixture(autouse=True)
def _forget_loaded():
    """What a test loads leaves with it: a later plan in this process records no plug-in of ours."""
    loaded, rules = dict(user_code.PLUGINS), set(constraints.names())
    yield
    user_code.PLUGINS.clear()
    user_code.PLUGINS.update(loaded)
    for name in set(constraints.names()) - rules:
        constraints.unregister(name)


def _one_line(capsys, *words):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


@pytest.mark.parametrize("content, words", [
    (None, ["no such file"]),
    ("import nothing_of_that_name\n", ["cannot import it", "ModuleNotFoundError"]),
    ("raise SystemExit(3)\n", ["cannot import it", "SystemExit"]),
    ("x = 1\n", ["registers nothing"]),
])  # fmt: skip
def test_bad_plugin_files_are_refused_in_one_line(tmp_path, capsys, content, words):
    path = tmp_path / "mine.py"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "run"
    assert main(["--plugins", str(path), "--algos", "PPO-Lag", "--out", str(out)]) == 2
    _one_line(capsys, "--plugins", *words)
    assert not out.exists()


@pytest.mark.parametrize("given, words", [("a,,b.py", ["empty name"]), ("not-a-module", ["not allowed"]),
                                          ("notes.txt", ["--plugins", "notes.txt is a file, not one of Python code"])])
def test_bad_plugin_names_are_refused(tmp_path, capsys, monkeypatch, given, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("register = 1\n")  # a file whose name reads as a module's
    assert main(["--plugins", given, "--algos", "PPO-Lag", "--out", str(tmp_path / "run")]) == 2
    _one_line(capsys, *words)
    assert not (tmp_path / "run").exists()


def test_a_plugin_file_is_recorded_and_a_changed_one_refused(tmp_path, capsys):
    """The record holds the file's SHA-256 (computed here with hashlib) and what it registered;
    a run folder whose recorded source is not the file's now is refused by the report and
    --resume alike, in one line."""
    path = tmp_path / "doubled.py"
    path.write_text(RULE.format(suffix="Doubled", name="doubled"))
    (record,) = user_code.load_plugin_specs([f"{path},{path}"])  # the same file twice: loaded once
    assert record == {"file": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                      "registers": ["constraint rule doubled"]}  # fmt: skip
    assert list(user_code.PLUGINS.values())[-1] == record
    run = tmp_path / "run"
    run.mkdir()
    plan = {"envs": ["cartpole"], "algos": ["PPO-Doubled-Lag"], "seeds": 1, "seed": 0, "vmap": True, "configs": {},
            "n_test": None, "plugins": [{**record, "sha256": hashlib.sha256(b"the file as it was").hexdigest()}]}  # fmt: skip
    (run / "run.json").write_text(json.dumps(plan))
    before = (run / "run.json").read_bytes()
    assert report_main([str(run)]) == 2
    _one_line(capsys, str(path), "not the one this run was trained with")
    assert main(["--resume", "--out", str(run), "--algos", "PPO-Doubled-Lag"]) == 2
    _one_line(capsys, "--resume", "not the one this run was trained with")
    plan["plugins"] = [{"file": str(path)}]  # an edited record
    (run / "run.json").write_text(json.dumps(plan))
    assert report_main([str(run)]) == 2
    _one_line(capsys, "plugins must list")
    assert sorted(p.name for p in run.iterdir()) == ["run.json"]
    assert before != (run / "run.json").read_bytes()  # (the test's own edit)


def test_eval_only_takes_its_plugins_from_the_run_folder(tmp_path, capsys):
    assert main(["--eval-only", str(tmp_path), "--plugins", str(MY_RULE)]) == 2
    _one_line(capsys, "does not use --plugins")


def _run(*args, cwd):
    out = subprocess.run([sys.executable, str(RUN_PY), *args], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


@pytest.mark.slow
def test_my_rule_from_the_command_line_swept_resumed_and_reported(tmp_path):
    """``rcmdp --plugins tests/my_rule.py``: the rule's gain swept as two lanes, run.json's record,
    then ``--resume`` (one algorithm's test results removed: re-tested from its checkpoint),
    ``--eval-only`` and ``rcmdp report`` in fresh processes that are given no --plugins."""
    algos = "PPO-MyRule-Lag@myrule.gain=1,PPO-MyRule-Lag@myrule.gain=5"
    out = tmp_path / "run"
    tiny = ["--seeds", "2", "--steps", "128", "--n-test", "3", "--set", "n_steps=16", "--set", "minibatch_size=16",
            "--set", "eval_episodes=2", "--plots", "off"]  # fmt: skip
    _run("--plugins", str(MY_RULE), "--algos", algos, *tiny, "--out", str(out), cwd=tmp_path)
    saved = json.loads((out / "run.json").read_text())
    assert saved["plugins"] == [{"file": str(MY_RULE), "sha256": hashlib.sha256(MY_RULE.read_bytes()).hexdigest(),
                                 "registers": ["constraint rule myrule"]}]  # fmt: skip
    assert saved["configs"]["cartpole"]["PPO-MyRule-Lag@myrule.gain=5"]["hparams"]["myrule.gain"] == 5.0
    lanes = [out / "cartpole" / f"PPO-MyRule-Lag_myrule.gain_{g}" for g in (1, 5)]
    lam = [np.load(d / "train_metrics.npz")["lam"] for d in lanes]
    assert lam[0].shape == lam[1].shape and not np.allclose(lam[0], lam[1])  # the gain moved the multiplier
    kept = shutil.copy(lanes[1] / "test_results.npz", tmp_path / "kept.npz")
    (lanes[1] / "test_results.npz").unlink()
    _run("--resume", "--algos", algos, *tiny, "--out", str(out), cwd=tmp_path)
    again, was = np.load(lanes[1] / "test_results.npz"), np.load(kept)
    np.testing.assert_array_equal(again["V"], was["V"])
    np.testing.assert_array_equal(again["C"], was["C"])
    _run("--eval-only", str(out), "--plots", "off", cwd=tmp_path)
    report = subprocess.run([sys.executable, str(RUN_PY.parent / "report.py"), str(out)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    assert "PPO-MyRule-Lag@myrule.gain=5" in report.stdout


def test_feasibility_refuses_a_bad_plugin_file(tmp_path, capsys):
    from rcmdp_jax.study.console import main

    (tmp_path / "nothing.py").write_text("x = 1\n")
    out = tmp_path / "feas"
    assert main(["feasibility", "--plugins", str(tmp_path / "nothing.py"), "--out", str(out)]) == 2
    _one_line(capsys, "registers nothing")
    assert not out.exists()


def test_resume_refuses_a_plugin_the_run_was_not_trained_with(tmp_path, capsys):
    """``--resume --plugins other.py`` on a run trained without it: one line, before the plan, the
    run folder unchanged (the file was neither trained with nor would it be recorded)."""
    other = tmp_path / "other.py"
    other.write_text(RULE.format(suffix="Other", name="other"))
    run = tmp_path / "run"
    run.mkdir()
    plan = {"envs": ["cartpole"], "algos": ["PPO-Lag"], "seeds": 1, "seed": 0, "vmap": True, "configs": {},
            "n_test": None}  # fmt: skip
    (run / "run.json").write_text(json.dumps(plan))
    before = (run / "run.json").read_bytes()
    assert main(["--resume", "--out", str(run), "--plugins", str(other)]) == 2
    _one_line(capsys, f"--resume: --plugins {other} is not a plug-in of the run in {run}; drop it")
    assert sorted(p.name for p in run.iterdir()) == ["run.json"] and (run / "run.json").read_bytes() == before

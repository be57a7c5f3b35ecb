"""Bad input and divergence: each bad option or value is one line and exit 2 with
nothing written (in process, and once through the command); bad hyperparameters and
kernels through the API; run folders that are not (or cannot be) run folders; a diverged
run, or seed, is never shown as a result (a diverged seed found among others:
``test_dual_estimators.py``, a lane of its program); messages name the command that was called; an
--out that is a file is named a file."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import RUN_PY, _load, _one_line
from tiny_configs import ALGOS, TINY, tiny

from rcmdp_jax.study import cli


@pytest.mark.parametrize(
    "args,message",
    [
        (["--env", "pendulum"], "--env pendulum: unknown environment 'pendulum'"),  # the closest: what tests registered
        (["--env", "xyzzy"], "--env xyzzy: unknown environment 'xyzzy'; valid names: cartpole, inventory, inventory3d"),
        (["--env", "inventory@cost_threshold=low"], "--env inventory@cost_threshold=low: environment "
                                                    "'inventory@cost_threshold=low': write inventory@cost_threshold=NUMBER"),
        (["--algos", "MDPO,SAC"], "unknown algorithm 'SAC'"),
        (["--seeds", "0"], "--seeds must be a positive integer"),
        (["--set", "lr"], "--set expects KEY=VALUE, got 'lr'"),
        (["--set", "lrate=1"], "unknown config field(s) ['lrate']"),
        (["--set", "lr=-1"], "lr must be a finite number > 0"),
        (["--set", "learner=ppo"], "learner is chosen by --algos"),
        (["--set", "adversary=dr"], "adversary is chosen by --algos"),
        (["--set", "robust=True"], "unknown config field(s) ['robust']"),  # an older field: adversary's now
        (["--set", "env=inventory"], "env is chosen by --env, not --set"),
        (["--set", "policy_hidden=(1.5,)"], "policy_hidden must be a tuple of positive integer layer widths"),
        (["--set", "critic_hidden='abc'"], "critic_hidden must be a tuple of positive integer layer widths"),
        (["--set", "gamma=True"], "gamma must be a number, got True"),
        (["--set", "lr=[1,2]"], "lr must be a number, got [1, 2]"),
        (["--set", "normalize_advantages=0"], "normalize_advantages must be True or False"),
        (["--devices", "99"], "--devices 99: this host has"),
        (["--algos", "MDPO,MDPO"], "--algos names MDPO more than once"),
        (["--algos", "MDPO-Lag@epochs=3"], "unknown hyperparameter(s) ['epochs'] in 'MDPO-Lag' (ALGO@FIELD=NUMBER)"),
        (["--algos", "MDPO-Lag@lr=1e-3@lr=2e-3"], "lr given twice in MDPO-Lag@lr=1e-3@lr=2e-3"),
        (["--env", "gymnax:Pendulum-v1", "--costs", "theta_dot:nan"], "the limit must be a finite number in float32"),
        (["--env", "gymnax:Pendulum-v1", "--costs", "theta_dot:1e40"], "the limit must be a finite number in float32"),
        (["--set", "dual_estimator=mean"], "dual_estimator='mean' is not allowed"),
        (["--set", "n_steps=1000000000"], "n_envs*n_steps=4000000000 (the batch) is beyond int32"),
        (["--steps", "10000000000"], "total_timesteps=10000000000 is beyond the int32 counters"),
        (["--set", "eval_episodes=100000000"], "GiB of this machine's"),
        (["--set", "policy_hidden=(100000000,)"], "mostly for policy_hidden;"),
        (["--seed", "99999999999999999999"], "--seed must be an integer in [0, 2**32)"),
        (["--set", "lr=1j"], "lr must be a real number, got 1j"),
        (["--set", "lr=1e-300"], "lr must be a finite number > 0 in float32"),
        (["--steps", "1600", "--set", "total_timesteps=3200"], "--steps and --set total_timesteps=... both set"),
    ],
)
def test_bad_input_exits_2_with_one_message_and_writes_nothing(tmp_path, capsys, args, message):
    """In process (``cli.main``, what ``run.py`` calls): each case costs milliseconds;
    the next test checks the command itself the same way on one case."""
    out = tmp_path / "never"
    assert cli.main([*args, "--out", str(out)]) == 2
    printed = capsys.readouterr()
    assert message in printed.err
    assert printed.err.strip().count("\n") == 0  # one line
    assert "compiled" not in printed.out
    assert not out.exists()


def test_an_empty_out_or_a_compile_cache_that_is_a_file_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where runs/<timestamp> would go
    assert cli.main(["--out", "", "--seeds", "1"]) == 2
    assert "--out is empty" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    a_file = tmp_path / "cache.txt"
    a_file.write_text("not a folder")
    out = tmp_path / "never"
    assert cli.main(["--compile-cache", str(a_file), "--out", str(out), "--seeds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--compile-cache" in err and "cannot use it as a folder" in err and err.count("\n") == 0
    assert a_file.read_text() == "not a folder" and not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [(["--set", "lr=-1"], "lr must be a finite number > 0")])
def test_bad_input_to_the_command_exits_2_with_one_line(tmp_path, args, message):
    out = tmp_path / "never"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, str(RUN_PY), *args, "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and proc.stderr.startswith("run.py: error:")
    assert proc.stderr.strip().count("\n") == 0  # one line
    assert "compiled" not in proc.stdout
    assert not out.exists()


def test_a_diverged_run_is_never_shown_as_a_result(tmp_path, capsys):
    out = tmp_path / "diverged"
    # the first family of the shared tiny study (conftest.full_run): its compiled program, new numbers
    tiny = [a if a != ALGOS else "MDPO-Lag,MDPO-Robust" for a in TINY]
    # an absurd learning rate (finite, so accepted) makes both algorithms' weights overflow to NaN
    assert cli.main(tiny + ["--out", str(out), "--set", "lr=1e30"]) == 4
    printed = capsys.readouterr().out
    assert "DIVERGED" in printed
    env_dir = out / "cartpole"
    for algo in ("MDPO-Lag", "MDPO-Robust"):
        res = _load(out, algo, "test_results.npz")
        assert res["diverged"].shape == (2,) and res["diverged"].all()
        assert json.loads((env_dir / algo / "diverged.json").read_text())["seeds"] == [0, 1]
    md = (env_dir / "summary.md").read_text()
    assert "MDPO-Lag (0/2 seeds; 2 diverged) | diverged: no seed left" in md and "**" not in md
    summary = json.loads((env_dir / "summary.json").read_text())
    assert summary["MDPO-Lag"]["seeds_used"] == 0 and "Return" not in summary["MDPO-Lag"]


def test_a_partly_diverged_algorithm_is_summarised_over_its_other_seeds_and_never_marked():
    from rcmdp_jax.study import report

    rng = np.random.default_rng(0)
    good = (rng.normal(10.0, 1.0, (3, 2, 2, 4)), rng.normal(-1.0, 0.1, (3, 2, 2, 4, 1)))
    better = (good[0][:2] + 100.0, good[1][:2])  # 2 of 3 seeds left, far ahead
    rows = report.summary_rows({"A": good, "B": better, "C": None}, 50.0, {"A": (3, 3), "B": (2, 3), "C": (0, 3)})
    cells = {algo: c for algo, _, c in rows}
    labels = {algo: label for algo, label, _ in rows}
    assert labels["B"] == "B (2/3 seeds; 1 diverged)" and cells["C"] is None
    assert cells["A"]["Return"]["marked"] and not cells["B"]["Return"]["marked"]  # B never; A the best complete one
    assert cells["B"]["Return"]["mean"] == pytest.approx(better[0].mean())
    assert "| C (0/3 seeds; 3 diverged) | diverged: no seed left | | |" in report.markdown_table(rows)


@pytest.mark.parametrize(
    "hparams,message",
    [(dict(lr=float("inf")), "lr must be a finite number"), (dict(gamma=2.0), "gamma must be a number in"),
     (dict(lr=float("nan")), "lr must be a finite number"), (dict(vf_coef=float("nan")), "vf_coef must be a finite number"),
     (dict(eta_lam=1e300), "eta_lam must be a finite number")],
)  # fmt: skip
def test_bad_hparams_through_the_api_are_refused_before_training(hparams, message):
    import jax

    from rcmdp_jax import make_train

    cfg = tiny(algo="MDPO-Lag", iterations=1)
    with pytest.raises(ValueError, match=message):
        make_train(cfg)(jax.random.PRNGKey(0), cfg.hparams.replace(**hparams))


@pytest.mark.parametrize("xi", [[1.0, 1.0, 1.0, 2.0], [1.0, float("nan"), 1.0, 1.0]])
def test_a_kernel_outside_the_box_is_refused(xi):
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import envs, make_train

    _, params = envs.make("cartpole")
    cfg = tiny(algo="MDPO", iterations=1)
    with pytest.raises(ValueError, match="xi"):
        make_train(cfg)(jax.random.PRNGKey(0), None, params.replace(xi=jnp.array(xi)))


def test_an_output_folder_that_cannot_be_made_is_one_line(capsys):
    assert cli.main(TINY + ["--out", "/proc/rcmdp-x"]) == 2
    err = capsys.readouterr().err
    assert "--out /proc/rcmdp-x: cannot create the run folder" in err and err.count("\n") == 1


def test_bad_run_folders_are_one_line_errors(tmp_path, capsys):
    import report

    assert cli.main(["--eval-only", str(tmp_path / "nowhere")]) == 2
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "run.json").write_text('{"hello": 1}')
    assert cli.main(["--eval-only", str(tmp_path / "foreign")]) == 2
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{not json")
    assert cli.main(["--resume", "--out", str(tmp_path / "broken")] + TINY[:2]) == 2
    assert report.main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "is not a run folder" in err and "not a run.json of this runner (missing" in err
    assert "cannot read" in err and f"report: error: RUN_DIR: {tmp_path / 'nowhere'} is not a run folder" in err
    assert "Traceback" not in err


def test_existing_output_folder_is_never_overwritten(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    assert cli.main(TINY + ["--out", str(out)]) == 2
    assert (out / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"]


# ------------------------------------------------------------------ the command's own name in its messages
@pytest.mark.parametrize("argv0,prog", [("/usr/local/bin/rcmdp", "rcmdp"), ("/x/experiments/run.py", "run.py"),
                                        ("/x/site-packages/rcmdp_jax/__main__.py", "python -m rcmdp_jax")])  # fmt: skip
def test_messages_name_the_command_that_was_called(tmp_path, capsys, monkeypatch, argv0, prog):
    monkeypatch.setattr(sys, "argv", [argv0])
    assert cli.main(["--seeds", "0", "--out", str(tmp_path / "never")]) == 2
    _one_line(capsys, f"{prog}: error: --seeds must be a positive integer")
    with pytest.raises(SystemExit):
        cli.parse_args(["--help"])
    assert capsys.readouterr().out.startswith(f"usage: {prog} ")


def test_an_out_that_is_a_file_is_named_a_file(tmp_path, capsys):
    a_file = tmp_path / "results.txt"
    a_file.write_text("mine")
    # --steps 1000 is a budget the plan rounds to whole batches: a refusal is still one line, no note before it
    assert cli.main(["--algos", "PPO", "--seeds", "1", "--steps", "1000", "--out", str(a_file)]) == 2
    _one_line(capsys, f"--out {a_file} is a file, not a folder")
    assert a_file.read_text() == "mine"


def test_an_out_that_exists_is_refused_and_left_as_it_was(tmp_path, capsys):
    out = tmp_path / "earlier"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    assert cli.main(["--algos", "PPO", "--seeds", "1", "--steps", "1000", "--out", str(out)]) == 2
    _one_line(capsys, f"output folder {out} already exists; use --resume to continue it")
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and (out / "mine.txt").read_text() == "mine"

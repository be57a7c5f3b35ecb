"""The command's refusals beyond the runner's core options: ``rcmdp feasibility``, ``--costs``, ``NAME@FIELD=X``,
brax methods, edited ``run.json``, algorithm names, alpha schedules and gymnax boxes refuse bad
input in one line (exit 2) before anything trains or is written; feasibility's Ctrl-C and
SIGTERM are the runner's (130 / 143, a line, ``--resume`` to the numbers of one call). The
Python API's refusals: ``test_api_types.py``."""

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import _one_line

from rcmdp_jax import preset
from rcmdp_jax.study import cli
from rcmdp_jax.study.console import main as console

TOY = Path(__file__).resolve().parent / "feasibility_toy.py"
TINY = ["--seeds", "2", "--steps", "2000", "--n-test", "2", "--plots", "off"]
FEAS = ["feasibility", "--seeds", "2", "--steps", "2000", "--n-test", "2"]


def _refused(capsys, argv, out: Path, *words, runner=None) -> str:
    """``argv`` exits 2 with one line holding ``words``, and ``out`` is not written."""
    code = runner(argv) if runner else cli.main(argv + ["--out", str(out)])
    assert code == 2
    err = _one_line(capsys, *words)
    assert not out.exists(), sorted(out.rglob("*"))
    return err


# ------------------------------------------------------------------ limits and costs
@pytest.mark.parametrize("env,words", [
    ("cartpole@velocity_limit=1e39", ["finite number in float32"]),
    ("cartpole@velocity_limit=-1", ["velocity_limit must be >= 0"]),
    ("nosuch", ["brax:inverted_pendulum", "brax:NAME"]),
])  # fmt: skip
def test_a_limit_beyond_float32_or_below_zero_and_an_unknown_env_are_one_line(capsys, tmp_path, env, words):
    _refused(capsys, ["--env", env, *TINY], tmp_path / "r", *words)


@pytest.mark.parametrize("costs,words", [
    ("theta_dot>1:", ["the budget after ':' is empty", "quote it"]),
    ("theta_dot>", ["the limit is empty", "quote it"]),
    ("theta_dot", ["not a cost of gymnax:Pendulum-v1", "quote it"]),  # 'theta_dot>1:5' unquoted: the shell ate '>1:5'
    ("theta_dot<1:5", ["only '>' is supported", "theta_dot:1"]),
    ("theta_dot:1,theta_dot:1.0", ["'theta_dot:1' and 'theta_dot:1.0' are the same constraint"]),
    ("theta_dot:1,", ["an empty item", "trailing or doubled comma"]),
    ("SPEED", ["case-sensitive: write speed"]),
    ("theta_dot>1:200", ["episode length H = 200", "can never bind"]),
    ("theta_dot>1:1e39", ["budget", "finite number"]),
])  # fmt: skip
def test_costs_are_refused_in_words_that_say_how_to_write_them(capsys, tmp_path, costs, words):
    err = _refused(capsys, ["--env", "gymnax:Pendulum-v1", "--costs", costs, *TINY], tmp_path / "r", "costs", *words)
    assert "choose distinct" not in err


def test_a_budget_below_the_episode_length_is_taken():
    from rcmdp_jax import envs

    name = envs.gymnax_name("Pendulum-v1", costs="theta_dot>1:199")  # H = 200
    assert envs.spec(name).cost_names == ("|theta_dot|>1 at most 199/episode",)


@pytest.mark.parametrize("costs,words", [
    ("speed:-1", ["must be >= 0"]), ("velocity:1:-2", ["must be >= 0"]),
    ("speed:1,speed:1.0", ["'speed:1' and 'speed:1.0' are the same constraint"]),
    ("SPEED", ["case-sensitive: write speed"]), ("speed:1,", ["an empty item"]),
    ("velocity:1:100", ["episode length H = 100"]),
])  # fmt: skip
def test_brax_costs_are_refused_as_gymnax_ones(capsys, tmp_path, costs, words):
    pytest.importorskip("brax")
    _refused(capsys, ["--env", "brax:inverted_pendulum", "--costs", costs, *TINY], tmp_path / "r", *words)


@pytest.mark.parametrize("env,algos,sets,words", [
    ("brax:inverted_pendulum", "PPO-Lag+ltma", [], ["--algos PPO-Lag+ltma", "ltma_estimator='pathwise'"]),
    ("brax:inverted_pendulum", "PPO-Lag+ltma", ["--set", "ltma_estimator=score"], ["no density"]),
    ("brax:inverted_pendulum@backend=mjx", "PPO-Lag+ltma-norm", [], ["mjx", "no reverse-mode gradient"]),
])  # fmt: skip
def test_a_brax_method_that_cannot_run_is_refused_before_anything_compiles(capsys, tmp_path, env, algos, sets, words):
    pytest.importorskip("brax")
    _refused(capsys, ["--env", env, "--algos", algos, *sets, *TINY], tmp_path / "r", *words)


@pytest.mark.slow
def test_brax_is_imported_without_third_party_noise():
    pytest.importorskip("brax")
    code = "from rcmdp_jax.envs.brax_presets import check; check('brax:inverted_pendulum@costs=speed:0.2')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "warp" not in proc.stdout + proc.stderr and "not actively being maintained" not in proc.stderr


# ------------------------------------------------------------------ --set and run.json
def _plan(argv):
    from rcmdp_jax.study.plan import build_plan

    return build_plan(cli.parse_args(argv))


def test_an_option_no_algorithm_uses_is_said():
    from rcmdp_jax.study.notes import unused_options

    def notes(algos):
        plan = _plan(["--algos", algos, "--set", "adversary_candidates=8", "--set", "lr=1e-3", *TINY])
        return unused_options({"adversary_candidates": 8, "lr": 1e-3}, list(plan.configs["cartpole"].values()))

    (note,) = notes("MDPO-Lag")
    assert "note: --set adversary_candidates: no algorithm of this run uses it" in note and "worst-of-n" in note
    assert notes("MDPO-Lag,MDPO-Robust+worst-of-n") == []


def test_a_number_of_a_plug_in_the_algorithm_does_not_train_with_is_said():
    from rcmdp_jax.study.notes import unused_options

    def notes(algos, sets=()):
        argv = ["--algos", algos, *[a for kv in sets for a in ("--set", kv)], *TINY]
        plan = _plan(argv)
        overrides = dict(kv.split("=") for kv in sets)
        return unused_options(overrides, list(plan.configs["cartpole"].values()))

    (note,) = notes("MDPO-Lag@pid.kp=5")  # the plain rule reads no PID gain
    assert "MDPO-Lag@pid.kp=5: pid.kp" in note and "does not train with pid" in note
    assert notes("MDPO-PID-Lag@pid.kp=5") == []
    (note,) = notes("MDPO-Lag,MDPO-Lag+dr", ["pid.ki=2"])  # said once, not once an algorithm
    assert note.startswith("note: --set pid.ki: no algorithm of this run trains with pid")
    assert notes("MDPO-Lag,MDPO-PID-Lag", ["pid.ki=2"]) == []


def test_an_edited_run_json_is_refused_where_resume_would_be_silent():
    from rcmdp_jax.study.run_plan import plan_problem

    plan = json.loads(json.dumps(_plan(["--algos", "MDPO-Robust+worst-of-n", *TINY]).to_dict()))
    assert plan_problem(plan) == ""
    edited = json.loads(json.dumps(plan))
    edited["will_run"]["cartpole"]["MDPO-Robust+worst-of-n"]["iterations"] = 1
    assert "will_run.cartpole.MDPO-Robust+worst-of-n is" in plan_problem(edited)
    both = json.loads(json.dumps(plan))
    both["configs"]["cartpole"]["MDPO-Robust+worst-of-n"]["adversary_candidates"] = 4
    assert "adversary_candidates given both as a key and in options" in plan_problem(both)


def test_a_bad_count_is_said_in_one_wording_by_the_command_line_and_a_saved_run_json(capsys, tmp_path):
    """``--seeds``, ``--n-test`` and ``--seed`` and their run.json fields are checked by one
    function (``sizes.check_run_fields``): one wording, the option's or the field's name."""
    from rcmdp_jax.study.run_plan import plan_problem

    saved = json.loads(_plan(["--algos", "MDPO-Lag", *TINY]).to_json())
    capsys.readouterr()  # the plan's notes
    for field, option, value in (("seeds", "--seeds", 0), ("n_test", "--n-test", 0), ("seed", "--seed", -1)):
        said = "must be a positive integer" if value == 0 else "must be an integer in [0, 2**32)"
        assert plan_problem({**saved, field: value}) == f"{field} {said}, got {value}"
        argv = ["--algos", "MDPO-Lag", *TINY, option, str(value)]
        assert cli.main([*argv, "--out", str(tmp_path / field)]) == 2
        _one_line(capsys, f"{option} {said}, got {value}")


def test_eval_only_refuses_an_option_it_ignores_even_at_its_default(tmp_path):
    """``--eval-only DIR --seeds 10`` names ``--seeds`` (the run's own seeds are tested), as it
    does for any other value: an option given is never ignored in silence."""
    for extra, name in ((["--seeds", "10"], "--seeds"), (["--budget", "short"], "--budget"), (["--set", "lr=1"], "--set")):
        args = cli.parse_args(["--eval-only", str(tmp_path / "run"), *extra])
        with pytest.raises(cli.PlanError, match=f"it does not use {name}: drop it"):
            cli.plan_and_folder(args, None)


def test_feasibility_declares_the_environment_options_as_the_runner_does(capsys):
    """``--env``, ``--uncertain``, ``--costs``, ``--noise``, ``--plugins`` and ``--seed``: one
    declaration (``cli.environment_options``), the same help in both commands."""
    from rcmdp_jax.study.feasibility_command import feasibility_args

    helps = []
    for parse in (cli.parse_args, feasibility_args):
        with pytest.raises(SystemExit):
            parse(["--help"])
        helps.append(" ".join(capsys.readouterr().out.split()))
    for option in ("--env ENV", "--uncertain FIELD=WIDTH,...", "--costs NAME,...", "--noise STD,...", "--seed SEED"):
        runner, feasibility = (h.split(option + " ", 1)[1].split(" --", 1)[0] for h in helps)
        assert runner == feasibility, option


def test_report_errors_name_the_command(capsys, tmp_path):
    from rcmdp_jax.study.console import report

    assert report([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith("rcmdp report: error: RUN_DIR:")


# ------------------------------------------------------------------ rcmdp feasibility
@pytest.fixture
def no_training(monkeypatch):
    """Any training is a failure: the refusals come before it."""
    from rcmdp_jax import feasibility

    def trained(*_):
        raise AssertionError("trained before refusing")

    monkeypatch.setattr(feasibility, "learned", trained)


@pytest.mark.parametrize("extra,words", [
    (["--out", ""], ["--out is empty"]),
    (["--seed", str(2**70)], ["seed must be an integer in [0, 2**32)"]),
    (["--seed", "-1"], ["seed must be an integer in [0, 2**32)"]),
    (["--seeds", "100000000000"], ["GiB of this machine's", "fewer seeds"]),
    (["--n-test", "20000000000"], ["GiB of this machine's", "--n-test"]),
    (["--env", "cartpole@velocity_limit=1e39"], ["finite number in float32"]),
    (["--out", "/proc/x"], ["--out /proc/x: cannot create the folder"]),
    (["--resume"], ["--resume: ", "holds no feasibility check"]),
    (["--steps", str(2**40)], ["steps=1099511627776 is beyond the int32 counters"]),
])  # fmt: skip
def test_feasibility_refuses_before_training_and_writes_nothing(capsys, tmp_path, no_training, extra, words):
    out = tmp_path / "f"
    argv = [*FEAS, *extra, *([] if "--out" in extra else ["--out", str(out)])]
    _refused(capsys, argv, out, "rcmdp feasibility: error:", *words, runner=console)


def test_feasibility_leaves_a_folder_in_use_alone(capsys, tmp_path, no_training):
    from rcmdp_jax.study.run_folder import take

    out = tmp_path / "run"
    out.mkdir()
    release = take(out)  # a training run holding its run folder
    try:
        assert console([*FEAS, "--out", str(out)]) == 2
        _one_line(capsys, "in use by another run", str(os.getpid()))
    finally:
        release()
    assert sorted(p.name for p in out.iterdir()) == []


def test_feasibility_refuses_an_unfinished_folder_without_resume(capsys, tmp_path, no_training):
    out = tmp_path / "f"
    out.mkdir()
    (out / "feasibility.partial.json").write_text(json.dumps({"inputs": {}, "rows": []}))
    assert console([*FEAS, "--out", str(out)]) == 2
    _one_line(capsys, "interrupted feasibility check", "--resume")
    assert console([*FEAS, "--out", str(out), "--resume"]) == 2
    _one_line(capsys, "--resume: the options differ", "--env", "--seeds", "--no-search")


@pytest.mark.slow
def test_feasibility_ctrl_c_and_sigterm_then_resume_give_the_numbers_of_one_call(tmp_path):
    """A subprocess on a two-constraint toy: SIGINT once the first constraint is done (exit
    130, one line, no feasibility.json, its row kept), ``--resume`` finishes to the numbers of
    an uninterrupted call; SIGTERM while training exits 143 with its line."""
    argv = ["feasibility", "--env", f"{TOY}:make2", "--seeds", "2", "--steps", "4000", "--no-search"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    command = [sys.executable, "-m", "rcmdp_jax"]

    def interrupted(out, sig, after):
        proc = subprocess.Popen([*command, *argv, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)  # fmt: skip
        for line in proc.stdout:
            if after in line:
                break
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        return proc.returncode, err

    code, err = interrupted(tmp_path / "term", signal.SIGTERM, "training")
    assert code == 143 and "interrupted" in err and "Traceback" not in err, err
    assert not (tmp_path / "term" / "feasibility.json").exists()

    out = tmp_path / "int"
    code, err = interrupted(out, signal.SIGINT, "constraint 1 done")
    assert code == 130 and "interrupted" in err and "--resume --out" in err and "Traceback" not in err, err
    assert not (out / "feasibility.json").exists()
    assert len(json.loads((out / "feasibility.partial.json").read_text())["rows"]) == 1
    again = subprocess.run([*command, *argv, "--out", str(out), "--resume"], capture_output=True, text=True, env=env,
                           timeout=600)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "1 found before" in again.stdout and "C0: training" not in again.stdout
    assert not (out / "feasibility.partial.json").exists()
    once = subprocess.run([*command, *argv, "--out", str(tmp_path / "once")], capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip
    assert once.returncode == 0, once.stderr
    a, b = (json.loads((d / "feasibility.json").read_text()) for d in (out, tmp_path / "once"))
    assert a["constraints"] == b["constraints"] and a["settings"] == b["settings"]
    # settings: what ran, in whole iterations of n_envs x n_steps policy steps (not the 4000 asked for)
    from feasibility_toy import make2

    from rcmdp_jax import envs, preset
    from rcmdp_jax.feasibility import cost_env

    spec = make2()
    envs.register("toy2-steps", spec["env"], learner=spec["learner"], n_test=2)
    cfg = preset(cost_env("toy2-steps", 0), "PPO+corners")
    batch = cfg.n_envs * cfg.n_steps
    assert a["settings"]["steps"] == math.ceil(4000 / batch) * batch != 4000
    assert a["wall_s"] > 0 and b["wall_s"] > 0


# ------------------------------------------------------------------ the Python API's types


# ------------------------------------------------------------------ algorithm names, schedules and boxes
@pytest.mark.parametrize(
    "args,message",
    [
        (["--algos", "PPO-Lag:restart-batch"], "alpha schedules (ALGO:SCHEDULE-TICK) apply to MDPO's algorithms only"),
        (["--algos", "PPO-Lag,PPO-Lag:restart-batch"], "PPO has no alpha: drop :restart-batch"),
        (["--algos", "MCPMD:linear-epoch"], "MCPMD has no alpha"),
        (["--algos", "MDPO-Lag@lr=-1"], "--algos MDPO-Lag@lr=-1: lr must be a finite number > 0"),
        (["--algos", "PPO,,MDPO"], "--algos 'PPO,,MDPO' has an empty name between commas"),
        (["--algos", "PPO,"], "has an empty name between commas"),
        (
            ["--env", "gymnax:Pendulum-v1", "--costs", "theta_dot:-1", "--algos", "PPO"],
            "the limit must be >= 0 (|theta_dot| <= -1 can never hold)",
        ),
        (
            ["--env", "gymnax:Pendulum-v1", "--uncertain", "g=1.5", "--algos", "PPO"],
            "reaches zero and flips the sign of g (nominal 10); give a half-width below 10",
        ),
        (["--env", "gymnax:Pendulum-v1", "--uncertain", "g=abs:12", "--algos", "PPO"], "flips the sign of g"),
    ],
)
def test_bad_names_schedules_and_boxes_are_refused(tmp_path, capsys, monkeypatch, args, message):
    from rcmdp_jax.study import orchestrate

    def accepted(*_):
        raise AssertionError(f"{args} was accepted")

    monkeypatch.setattr(orchestrate, "Study", accepted)  # never trains, fixed or not
    out = tmp_path / "never"
    assert cli.main([*args, "--out", str(out)]) == 2
    _one_line(capsys, "run.py: error: ", message)
    assert not out.exists()


def test_an_alpha_schedule_still_names_an_mdpo_variant():
    cfg = preset("cartpole", "MDPO-Lag:restart-batch")
    assert (cfg.alpha_schedule, cfg.alpha_tick) == ("restart", "batch")


@pytest.mark.parametrize("argv,words", [
    (["--eval-only", ""], ["--eval-only is empty"]),
    (["--resume"], ["--resume continues the run folder --out names; give --out DIR"]),
    (["--distributed", "--coordinator", "x:1", "--num-processes", "2", "--process-id", "0", "--set", "lr"],
     ["rcmdp: error: --set expects KEY=VALUE, got 'lr'"]),
])  # fmt: skip
def test_an_empty_eval_only_a_resume_without_out_and_a_set_before_the_handshake(capsys, tmp_path, monkeypatch,
                                                                                 argv, words):  # fmt: skip
    """Refused in one line, the option said once; no folder of runs/<timestamp> made or named."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["rcmdp"])
    assert cli.main(argv) == 2
    err = _one_line(capsys, *words)
    assert "runs/" not in err and "--set: --set" not in err
    assert not (tmp_path / "runs").exists()


def test_report_says_what_is_wrong_with_its_arguments(capsys):
    from rcmdp_jax.study.console import report

    for argv, said in (([], "RUN_DIR is missing"), (["RUN", "--bogus"], "got RUN --bogus"), (["--bogus"], "got --bogus")):
        assert report(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: rcmdp report") and "\nrcmdp report: error: " in err, err
        assert said in err, err
    assert report(["--help"]) == 0

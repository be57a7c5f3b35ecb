"""Issue 42, the probe's holes: what a hostile user's 152 cases found accepted or said
wrongly. Each case is refused in one line naming the field and what it may be, before
anything is compiled or written, or now does what it says."""

import json
import signal
import textwrap

import jax.numpy as jnp
import pytest
from cli_helpers import _copy, _one_line, _snapshot

from rcmdp_jax import envs, make_family, preset
from rcmdp_jax.study import cli

MOVER = textwrap.dedent("""
    import os
    from rcmdp_jax import envs

    os.chdir({elsewhere!r})  # a module that changes the working directory as it loads
    make = lambda: envs.spec("gymnax:CartPole-v1")
""")


# ------------------------------------------------------------------ wrong, 1: os.chdir at import
def test_a_module_that_changes_directory_cannot_move_the_run_folder(tmp_path, monkeypatch, capsys):
    from rcmdp_jax.study import orchestrate

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), elsewhere.mkdir()
    (home / "mover.py").write_text(MOVER.format(elsewhere=str(elsewhere)))
    ran = []

    class NoStudy:  # the folder is what is checked: nothing trains
        def __init__(self, plan, folder, *args):
            ran.append(folder.root)

        def run(self):
            return 0

    monkeypatch.setattr(orchestrate, "Study", NoStudy)
    monkeypatch.chdir(home)
    assert cli.main(["--env", "mover.py:make", "--algos", "PPO", "--seeds", "1", "--out", "r_u16"]) == 0
    assert ran == [home / "r_u16"] and (home / "r_u16" / "run.json").is_file()
    assert not (elsewhere / "r_u16").exists() and f"-> {home / 'r_u16'}" in capsys.readouterr().out
    monkeypatch.chdir(home)
    assert cli.main(["--env", "mover.py:make", "--algos", "PPO", "--seeds", "1"]) == 0  # runs/<timestamp>
    assert ran[1].parent == home / "runs" and not (elsewhere / "runs").exists()


# ------------------------------------------------------------------ wrong, 2 and the small ones
@pytest.mark.parametrize(
    "args,message",
    [
        (["--algos", "PPO-Lag:restart-batch"], "alpha schedules (ALGO:SCHEDULE-TICK) apply to MDPO's algorithms only"),
        (["--algos", "PPO-Lag,PPO-Lag:restart-batch"], "PPO has no alpha: drop :restart-batch"),
        (["--algos", "MCPMD:linear-epoch"], "MCPMD has no alpha"),
        (["--algos", "MDPO-Lag@lr=-1"], "--algos MDPO-Lag@lr=-1: lr must be finite and > 0"),
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
def test_names_and_boxes_the_probe_got_through_are_refused(tmp_path, capsys, monkeypatch, args, message):
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


def test_an_out_that_is_a_file_is_named_a_file(tmp_path, capsys):
    a_file = tmp_path / "results.txt"
    a_file.write_text("mine")
    assert cli.main(["--algos", "PPO", "--seeds", "1", "--out", str(a_file)]) == 2
    _one_line(capsys, f"--out {a_file} is a file, not a folder")
    assert a_file.read_text() == "mine"


# ------------------------------------------------------------------ wrong, 3-4: an edited run.json
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


# ------------------------------------------------------------------ wrong, 5-6: the API
def test_make_eval_takes_a_whole_number_of_episodes_within_int32():
    from rcmdp_jax.evaluate import make_eval

    cfg = preset("cartpole", "PPO")
    for bad in (2.5, 0, True, "3"):
        with pytest.raises(ValueError, match=f"n_test must be a positive integer, got {bad!r}"):
            make_eval(cfg, n_test=bad)
    # 11 levels x 16 directions = 176 kernels; 2**31 - 1 episodes // 176 = 12,201,611 at most
    with pytest.raises(ValueError, match="176,000,000,000,000 test episodes per seed .* at most 12,201,611"):
        make_eval(cfg, n_test=10**12)
    assert make_eval(cfg, n_test=12_201_611).n_test == 12_201_611


def test_make_family_names_what_it_needs():
    with pytest.raises(TypeError, match=r"make_family needs a list of rcmdp_jax.Config .* got \['int', 'int'\]"):
        make_family([1, 2])
    with pytest.raises(TypeError, match="got Config"):
        make_family(preset("cartpole", "PPO"))


# ------------------------------------------------------------------ the small ones of the API
def test_sigterm_while_a_module_loads_is_one_line_and_exit_143(tmp_path, capsys, monkeypatch):
    from rcmdp_jax.study import console

    (tmp_path / "stopped.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    monkeypatch.setattr(console, "split_cpu", lambda: None)

    def unhandled(*_):
        raise RuntimeError("SIGTERM not handled by the command")

    previous = signal.signal(signal.SIGTERM, unhandled)  # what the test process would do instead of dying
    try:
        assert console.train(["--env", f"{tmp_path / 'stopped.py'}:make", "--out", str(tmp_path / "r")]) == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert capsys.readouterr().err.strip() == "interrupted while starting: nothing was trained"
    assert signal.getsignal(signal.SIGTERM) is previous and not (tmp_path / "r").exists()


def test_a_changed_width_names_its_field():
    import gymnax

    from rcmdp_jax.study.user_env import check_described, description

    speed = lambda s, a, n, p: jnp.abs(n.theta_dot)[None] - 1.5  # noqa: E731
    envs.register(
        "probe-pendulum", envs.robustify(gymnax.make("Pendulum-v1")[0], {"m": 0.2, "l": 0.3}, {"speed": speed})
    )
    was = description("probe-pendulum")
    was["params.kappa"] = [was["params.kappa"][0], 0.6]  # l's half-width 0.3 (x 1.0) was 0.6
    with pytest.raises(ValueError, match=r"params.kappa \(l: 0.6 -> 0.3\) differs"):
        check_described("probe-pendulum", {"probe-pendulum": was})


def test_a_robust_method_without_step_is_refused_at_registration():
    from rcmdp_jax import adversary
    from rcmdp_jax.adversary.base import Adversary

    class Idle(Adversary):
        per_env = True

    with pytest.raises(ValueError, match=r"robust method 'idle': Idle does not define step\(self, ctx, key"):
        adversary.register("idle", Idle)
    assert "idle" not in adversary.names()


@pytest.mark.parametrize(
    "costs,error,match",
    [
        (
            {"c": 3},
            TypeError,
            r"costs\['c'\] must be a function c\(state, action, next_state, params\) -> a \(k,\) "
            "array, got int 3",
        ),
        (
            {"speed": lambda s, a, n, p: jnp.abs(n.theta_dot) - 1.5},
            ValueError,
            r"costs\['speed'\] returns shape \(\); a cost returns a vector of shape \(k,\)",
        ),
        ({"grid": lambda s, a, n, p: jnp.zeros((2, 2))}, ValueError, r"costs\['grid'\] returns shape \(2, 2\)"),
    ],
)
def test_robustify_names_a_cost_that_is_not_a_vector_function(costs, error, match):
    import gymnax

    with pytest.raises(error, match=match):
        envs.robustify(gymnax.make("Pendulum-v1")[0], {"m": 0.2}, costs)

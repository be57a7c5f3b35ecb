"""``--resume --out DIR`` alone: the options a command leaves out are the run's (run.json),
any option given must agree; and the line an interruption prints is a command that works.
On a run folder with only its run.json (nothing trains here)."""

import shlex
import sys

import pytest
from tiny_configs import TINY

from rcmdp_jax.study import cli, runtime
from rcmdp_jax.study.run_folder import RunFolder


@pytest.fixture
def saved(tmp_path):
    """A run folder holding the run.json of the tiny study with a margin and a worst-case search."""
    out = tmp_path / "run"
    args = cli.parse_args(TINY + ["--set", "cost_margin=1", "--worst-case", "costs", "--out", str(out)])
    plan = cli.build_plan(args)
    RunFolder(out).create(plan)
    return out, plan


def _resumed(argv):
    args = cli.parse_args(argv)
    plan = cli.resumed_plan(args) or cli.build_plan(args)
    return args, plan


def test_the_options_given_are_told_from_the_defaults():
    assert cli.parse_args(["--resume", "--out", "x"]).given == {"resume", "out"}
    assert cli.parse_args(["--seeds", "10", "--no-vmap"]).given == {"seeds", "vmap"}  # a default said is given


def test_resume_with_no_other_option_is_the_saved_run(saved):
    out, plan = saved
    args, got = _resumed(["--resume", "--out", str(out)])
    assert got == plan and not plan.differences(got)
    assert (args.seeds, args.n_test, args.worst_case) == (2, 3, "costs")  # what the run's study uses
    _, folder = cli.plan_and_folder(args, got)
    assert folder.root == out


def test_an_option_given_must_agree(saved):
    out, plan = saved
    for argv, what in ((["--seeds", "3"], ["seeds"]), (["--n-test", "4"], ["n_test"]),
                       (["--worst-case"], ["--worst-case"]), (["--algos", "PPO-Lag"], ["algos"])):  # fmt: skip
        _, got = _resumed(["--resume", "--out", str(out), *argv])
        assert plan.differences(got) == what, argv
    for argv in (["--seeds", "2"], ["--algos", "MDPO-Lag,MDPO-Robust,PPO-Lag"], ["--env", "cartpole"]):
        _, got = _resumed(["--resume", "--out", str(out), *argv])
        assert not plan.differences(got), argv  # given and equal to the run's: it resumes
    _, got = _resumed(["--resume", "--out", str(out), "--set", "cost_margin=2"])  # one config option: compared whole
    assert plan.differences(got)[0].startswith("configs: cartpole/MDPO-Lag: cost_margin")
    args = cli.parse_args(["--resume", "--out", str(out), "--seeds", "3"])
    with pytest.raises(cli.PlanError, match=r"the options differ .* \(seeds\)"):
        cli.plan_and_folder(args, None)


def test_the_interruption_line_is_a_command_that_resumes(monkeypatch, tmp_path):
    out = tmp_path / "a b"
    monkeypatch.setattr(sys, "argv", ["/usr/bin/rcmdp"])
    assert runtime.resume_command(out) == f"rcmdp --resume --out '{out}'"
    monkeypatch.setattr(sys, "argv", ["experiments/run.py"])
    assert runtime.resume_command(out) == f"python experiments/run.py --resume --out '{out}'"
    words = shlex.split(runtime.resume_command(out))[2:]  # what the shell hands the command
    args = cli.parse_args(words)
    assert args.given == {"resume", "out"} and args.out == str(out)

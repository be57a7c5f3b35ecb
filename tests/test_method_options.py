"""The built-in robust methods own their options, as a user's plug-in does. Each
method's module declares them (those several methods share, once on ``Adversary``); a bad
value is refused naming the option and what it allows before anything compiles; and the
flat fields of older versions still read: ``Config.replace``, ``--set``, a saved
``run.json`` (``tests/golden/run_json_flat_options.json``, written by the code before the
move) that resumes as the same plan. Nothing compiles."""

import dataclasses
import json
import pathlib

import pytest

from rcmdp_jax import Config, adversary, options, preset
from rcmdp_jax.adversary.base import Adversary
from rcmdp_jax.config import config_from_dict, config_to_dict
from rcmdp_jax.plugin import declarer
from rcmdp_jax.study import cli
from rcmdp_jax.study.plan import build_plan
from rcmdp_jax.study.run_folder import RunFolder
from rcmdp_jax.study.run_plan import Plan, plan_problem

OWN = {  # method -> the options its own module declares
    "ltma": {"ltma_estimator": "score", "ltma_iterations": 160, "ltma_episodes": 1, "ltma_dual_reading": "found"},
    "ltma-norm": {"adversary_steps": 4},
    "worst-of-n": {"adversary_candidates": 16, "adversary_fraction": 0.25},
}
SHARED = {"ltma_horizon": 10, "adversary_episodes": 8}  # ltma + ltma-norm; ltma-norm + worst-of-n + corners
OLD = pathlib.Path(__file__).parent / "golden" / "run_json_flat_options.json"
OLD_ARGS = ["--algos", "MDPO-Lag,PPO-Robust-Lag,PPO-Lag+worst-of-n,MDPO-Lag+ltma-norm", "--env", "inventory",
            "--seeds", "2", "--steps", "3200", "--set", "adversary_candidates=8", "--set", "dual_reading=worst_cost"]  # fmt: skip


def test_each_method_declares_its_options_in_its_own_module():
    fields = {f.name for f in dataclasses.fields(Config)}
    for name, own in OWN.items():
        cls = adversary.method_class(name)
        assert vars(cls)["options"] == own, name
        assert {declarer(cls, o).__module__ for o in own} == {cls.__module__}, name
    assert Adversary.options == SHARED
    assert all(declarer(adversary.method_class(m), o) is Adversary for m in ("ltma", "ltma-norm") for o in SHARED)
    assert not (fields & (set(SHARED) | {o for own in OWN.values() for o in own}))  # no longer Config fields
    assert "ltma_estimator" not in Config.groups()["method"] and Config.groups()["method"] == ("options",)
    moved = {**SHARED, **{o: d for own in OWN.values() for o, d in own.items()}}
    assert {o: options.declared()[o] for o in moved} == moved


def test_the_options_are_set_as_fields_and_listed_where_fields_are():
    cfg = preset("cartpole", "PPO-Lag+worst-of-n", adversary_candidates=8, ltma_estimator="pathwise")
    assert (cfg.option("adversary_candidates"), cfg.option("ltma_estimator"), cfg.option("adversary_fraction")) == (
        8, "pathwise", 0.25)  # fmt: skip
    assert cfg.replace(adversary_candidates=16) == cfg.replace(adversary_candidates=16, ltma_estimator="score").replace(
        ltma_estimator="pathwise")  # a default is left out: equal configs are equal  # fmt: skip
    assert cfg.replace(adversary_candidates=16).options == (("ltma_estimator", "pathwise"),)  # cartpole's horizon: 10
    with pytest.raises(ValueError, match=r"\(did you mean 'adversary_candidates'\?\); allowed config fields: .*ltma_"):
        cfg.replace(adversary_candidate=8)
    plan = build_plan(cli.parse_args(["--algos", "PPO-Lag+worst-of-n", "--set", "adversary_candidates=4"]))
    assert plan.configs["cartpole"]["PPO-Lag+worst-of-n"].option("adversary_candidates") == 4


@pytest.mark.parametrize("setting, message", [
    ("ltma_estimator=finite", "ltma_estimator='finite' is not allowed; choose one of: score, pathwise"),
    ("ltma_iterations=0", "ltma_iterations must be a positive integer, got 0"),
    ("ltma_horizon=2.5", "ltma_horizon must be a positive integer, got 2.5"),
    ("adversary_steps=3000000000", "adversary_steps=3000000000 is beyond the int32 counters"),
    ("adversary_fraction=1.5", r"adversary_fraction must be a number in (0, 1], got 1.5"),
    ("dual_reading=worst", "dual_reading='worst' is not allowed (did you mean 'worst_cost'?); choose one of: picked, worst_cost"),
])  # fmt: skip
def test_a_bad_value_is_refused_naming_the_option_before_anything_runs(tmp_path, capsys, setting, message):
    out = tmp_path / "never"
    for algo in ("PPO-Lag+worst-of-n", "PPO"):  # refused by its method, and where no method reads it
        assert cli.main(["--algos", algo, "--set", setting, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        assert not out.exists()


def test_a_config_dict_with_flat_options_reads_into_options():
    flat = {"env": "cartpole", "adversary_candidates": 8, "ltma_estimator": "pathwise", "ltma_horizon": 10,
            "options": [["dual_reading", "worst_cost"]]}  # fmt: skip
    want = Config().replace(adversary_candidates=8, ltma_estimator="pathwise", dual_reading="worst_cost")
    assert config_from_dict(flat) == want and dict(want.options).keys() == {"adversary_candidates", "dual_reading",
                                                                            "ltma_estimator"}  # fmt: skip
    assert config_from_dict({"adversary_candidates": 16, "ltma_iterations": 160}) == Config()  # the old defaults
    # written out, the options of the plug-ins a config trains with are spelled out, defaults too
    written = dict(config_to_dict(Config().replace(adversary="worst-of-n"))["options"])
    assert written == {**SHARED, **OWN["worst-of-n"], "dual_reading": "picked", "worst_cases": "separate"}
    # a saved worst-of-n config that does not name worst_cases predates it: it trained on the Lagrangian worst
    old = {k: v for k, v in config_to_dict(Config().replace(adversary="worst-of-n")).items()}
    old["options"] = [p for p in old["options"] if p[0] != "worst_cases"]
    assert config_from_dict(old).option("worst_cases") == "lagrangian"
    # and a saved search config without search_restarts searched without them
    old = config_to_dict(Config().replace(adversary="search"))
    assert dict(old["options"])["search_restarts"] == 4  # written out
    old["options"] = [p for p in old["options"] if p[0] != "search_restarts"]
    assert config_from_dict(old).option("search_restarts") == 0


def test_a_run_json_written_before_the_move_resumes_as_the_same_plan(tmp_path):
    old = json.loads(OLD.read_text())
    assert old["configs"]["inventory"]["PPO-Lag+worst-of-n"]["adversary_candidates"] == 8  # the flat form
    assert plan_problem(old) == ""
    saved = Plan.from_dict(old)
    # it trained worst-of-n on the Lagrangian worst, which a command now asks for by name
    assert saved.differences(build_plan(cli.parse_args(OLD_ARGS))) == ["configs: inventory/PPO-Lag+worst-of-n: worst_cases"]
    now = build_plan(cli.parse_args(OLD_ARGS + ["--set", "worst_cases=lagrangian"]))
    assert saved.differences(now) == []  # the option is recorded, unread, on the others: no difference
    worst_of_n = lambda plan: plan.configs["inventory"]["PPO-Lag+worst-of-n"]
    assert worst_of_n(saved) == worst_of_n(now)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.json").write_text(OLD.read_text())
    assert RunFolder(folder).read_plan("--resume").differences(now) == []
    other = build_plan(cli.parse_args(OLD_ARGS + ["--set", "worst_cases=lagrangian", "--set", "ltma_iterations=3"]))
    assert saved.differences(other)[0].startswith("configs: inventory/PPO-Robust-Lag: ltma_iterations")  # who reads it
    assert "adversary_candidates" in saved.differences(build_plan(cli.parse_args(OLD_ARGS[:-4])))[0]
    # an edited one is still refused: a flat option's value is checked as --set would
    bad = {**old, "algos": ["MDPO-Lag"], "configs": {"inventory": {"MDPO-Lag": {
        **old["configs"]["inventory"]["MDPO-Lag"], "adversary_fraction": 0.0}}}}  # fmt: skip
    assert "adversary_fraction must be a number in (0, 1]" in plan_problem(bad)


def test_the_set_help_names_the_options(capsys):
    with pytest.raises(SystemExit):
        cli.parse_args(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "plug-in option" in help_text and "adversary_candidates=8" in help_text

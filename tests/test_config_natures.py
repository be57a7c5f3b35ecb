"""``Config``'s fields by nature (``config.structure``/``choice``/``budget``/``label``, the
``hparams`` numbers), declared once on each field: every list of fields that the command line,
the saved run's check and the families read is derived from them (``ALGORITHM_FIELDS``,
``MEMBER_FIELDS``, ``chosen_by``), none kept by hand; and an algorithm's alpha schedule goes
through run.json and back as the command line planned it."""

import ast
import dataclasses
import json
import math
from pathlib import Path

import pytest

from rcmdp_jax import Config, config, family
from rcmdp_jax.study import cli, plan, run_plan
from rcmdp_jax.study.run_plan import PlanError

ROOT = Path(__file__).resolve().parents[1]

# written out here, not read from the code: what each field is (docs/design.md, "Config")
NOT_STRUCTURE = {"constraint": "choice", "adversary": "choice", "alpha_schedule": "choice", "alpha_tick": "choice",
                 "name": "label", "total_timesteps": "budget", "hparams": "number"}  # fmt: skip
BY_THE_NAME = ("learner", "constraint", "adversary", "alpha_schedule", "alpha_tick")


def test_every_field_declares_one_nature():
    natures = {f.name: f.metadata.get("nature") for f in dataclasses.fields(Config)}
    assert {n: k for n, k in natures.items() if k != "structure"} == NOT_STRUCTURE
    assert set(natures.values()) == set(config.NATURES)
    assert config.ALGORITHM_FIELDS == BY_THE_NAME
    assert config.chosen_by() == {**dict.fromkeys(BY_THE_NAME, "algorithm"), "env": "env", "name": "algos"}


def test_every_check_of_the_fields_an_algorithm_names_reads_one_list():
    """The command line refuses ``--set`` for each field that something else chooses, the saved
    run's check compares each field the name decides, and a family's members differ in the
    choices, numbers and name only: each reads the list derived from the natures."""
    assert run_plan.ALGORITHM_FIELDS is config.ALGORITHM_FIELDS
    assert set(plan.CHOSEN_ELSEWHERE) == set(config.chosen_by())
    for field in config.chosen_by():
        with pytest.raises(PlanError, match=f"--set {field}=...: {field} is chosen by --"):
            plan.parse_sets([f"{field}=x"])
    # a family shares every field but its members' (set to anything: the key forgets it or not)
    base = family.family_key(Config())
    for f in dataclasses.fields(Config):
        forgotten = family.family_key(dataclasses.replace(Config(), **{f.name: object()})) == base
        assert forgotten == (f.name in set(NOT_STRUCTURE) - {"total_timesteps"}), f.name
    assert family.structure([Config(total_timesteps=64)]) == family.structure([Config(total_timesteps=6400)])
    # the saved run's check names each field the algorithm's name decides, when a run.json changes it
    saved = json.loads(plan_of(["--algos", "MDPO-Robust-Lag"]).to_json())
    other = {"learner": "ppo", "constraint": "augmented", "adversary": "dr", "alpha_schedule": "linear",
             "alpha_tick": "batch"}  # fmt: skip
    assert set(other) == set(config.ALGORITHM_FIELDS)
    for field, value in other.items():
        d = {**saved["configs"]["cartpole"]["MDPO-Robust-Lag"], field: value}
        problem = run_plan.config_problem("cartpole", "MDPO-Robust-Lag", d)
        assert problem.startswith(field) and "do not match the algorithm MDPO-Robust-Lag" in problem, problem


def test_a_field_declared_with_a_nature_joins_its_lists():
    @dataclasses.dataclass(frozen=True)
    class Wider(Config):
        rule_variant: str = config.choice("a", by="algorithm")
        width: int = config.structure(3)

    assert config.fields_of("choice", cls=Wider)[-1] == "rule_variant"
    assert "width" in config.fields_of("structure", cls=Wider)
    assert config.chosen_by(Wider)["rule_variant"] == "algorithm"
    with pytest.raises(ValueError, match="unknown nature"):
        config.fields_of("static")


def _hand_kept(path: Path, watched: set[str]) -> list[str]:
    """Literal collections (tuples, lists, sets, dict keys, keyword arguments with constant
    values) of two or more of ``watched`` in one file: a list of fields kept by hand."""
    out, const = [], lambda v: isinstance(v, ast.Constant)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            hit = [e.value for e in node.elts if const(e) and e.value in watched]
        elif isinstance(node, ast.Dict):
            hit = [k.value for k, v in zip(node.keys, node.values) if const(k) and k.value in watched and const(v)]
        elif isinstance(node, ast.Call):
            hit = [k.arg for k in node.keywords if k.arg in watched and const(k.value)]
        else:
            continue
        if len(hit) >= 2 and set(hit) & set(config.fields_of("choice", "label", "budget")):
            out.append(f"{path.name}:{node.lineno}: {hit}")
    return out


def test_no_module_keeps_a_list_of_the_fields_by_hand(tmp_path):
    watched = set(config.fields_of("choice", "label", "budget")) | set(config.chosen_by())
    files = [p for d in ("src", "envs", "experiments") for p in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 50
    assert [hit for p in files for hit in _hand_kept(p, watched)] == []
    # the check finds one: the key a family shares, as it was written before the natures
    old = tmp_path / "family.py"
    old.write_text('replace(cfg, name="", constraint="none", adversary="ltma", alpha_schedule="fixed")\n')
    assert len(_hand_kept(old, watched)) == 1


def plan_of(argv):
    from tiny_configs import CLI_BATCH

    return plan.build_plan(cli.parse_args([*argv, *CLI_BATCH]))


@pytest.mark.parametrize("algo,schedule,tick", [("MDPO-Lag:linear-batch", "linear", "batch"),
                                                ("MDPO-Robust:geometric-epoch", "geometric", "epoch")])  # fmt: skip
def test_an_alpha_schedule_goes_through_run_json_and_back(algo, schedule, tick, capsys):
    """The plan's config of ``ALGO:SCHEDULE-TICK`` is the one its run.json records, which the
    saved run's check (``--resume`` and ``report`` read the folder through it) accepts and
    reads back to the same config and plan; ``--set alpha_schedule=...`` is refused."""
    made = plan_of(["--algos", algo])
    cfg = made.configs["cartpole"][algo]
    assert (cfg.alpha_schedule, cfg.alpha_tick) == (schedule, tick)
    saved = json.loads(made.to_json())
    assert (saved["configs"]["cartpole"][algo]["alpha_schedule"], saved["configs"]["cartpole"][algo]["alpha_tick"]) \
        == (schedule, tick)  # fmt: skip
    assert run_plan.plan_problem(saved) == ""
    again = run_plan.Plan.from_dict(saved)
    assert again.configs == made.configs and again.differences(made) == []
    with pytest.raises(PlanError, match="alpha_schedule is chosen by --algos"):
        plan_of(["--algos", "MDPO-Lag", "--set", f"alpha_schedule={schedule}"])


# what each name trains with, written out: the robust method, "none" for a non-robust algorithm
METHOD = {"PPO": "none", "MDPO-Lag": "none", "MCPMD-Lag": "none", "PPO-Lag+none": "none", "RMCPMD": "ltma",
          "PPO-Robust-Lag": "ltma", "MDPO-Robust-Augmented-Lag": "ltma", "PPO-Lag+dr": "dr",
          "MDPO-Robust+corners": "corners", "MDPO-Robust-Lag:linear-batch+worst-of-n": "worst-of-n"}  # fmt: skip


@pytest.mark.parametrize("algo", list(METHOD))
def test_robust_and_adversary_are_one_field_and_an_older_run_json_reads_into_it(algo):
    """``adversary`` says both whether the algorithm is robust ("none": not) and how; a run.json
    written when ``robust`` stood beside it (``adversary`` then set whether robust or not: LTMA,
    the preset's, or ``--set adversary=...``'s) reads into the one field, and its check accepts it."""
    from rcmdp_jax import preset
    from rcmdp_jax.config import config_from_dict, config_to_dict

    cfg = preset("cartpole", algo)
    written = json.loads(json.dumps(config_to_dict(cfg)))  # as run.json holds it
    assert (cfg.adversary, cfg.robust) == (METHOD[algo], METHOD[algo] != "none")
    assert "robust" not in written and config_from_dict(written) == cfg
    for unused in ("ltma", "dr"):  # what a non-robust algorithm's adversary said, unread
        old = {**written, "robust": cfg.robust, "adversary": METHOD[algo] if cfg.robust else unused}
        assert config_from_dict(old) == cfg
        assert run_plan.config_problem("cartpole", algo, old) == ""
    old = {k: v for k, v in written.items() if k != "adversary"}  # before there were methods: LTMA
    assert config_from_dict({**old, "robust": cfg.robust}).adversary == ("ltma" if cfg.robust else "none")
    # the name decides robust or not, in an older run.json too; which method a robust one used was --set's
    flipped = {**written, "robust": not cfg.robust, "adversary": "ltma"}
    assert "adversary do not match the algorithm" in run_plan.config_problem("cartpole", algo, flipped)
    if cfg.robust:
        other = {**written, "robust": True, "adversary": "search"}
        assert run_plan.config_problem("cartpole", algo, other) == ""
    # a run.json written now names the method: another is refused
    assert "adversary do not match" in run_plan.config_problem("cartpole", algo, {**written, "adversary": "search"})
    said = run_plan.config_problem("cartpole", algo, {**written, "robust": None})
    assert said.startswith("unknown config field(s) ['robust']; allowed config fields: ")
    with pytest.raises(ValueError, match="unknown config field"):
        cfg.replace(robust=True)


@pytest.mark.slow  # trains: a tiny MDPO-Lag run (HOSTILE_TINY's program: the schedule is traced)
def test_an_alpha_schedule_run_resumes_and_reports(tmp_path, capsys):
    """``--algos MDPO-Lag:linear-batch`` trains, and its run folder is read back by ``--resume``
    and ``report`` without a refusal (the run.json check reads the name's schedule)."""
    import report
    from tiny_configs import CLI_BATCH, QUICK

    out, args = tmp_path / "run", ["--algos", "MDPO-Lag:linear-batch", *CLI_BATCH, *QUICK]
    assert cli.main([*args, "--out", str(out)]) == 0
    saved = json.loads((out / "run.json").read_text())["configs"]["cartpole"]["MDPO-Lag:linear-batch"]
    assert (saved["alpha_schedule"], saved["alpha_tick"]) == ("linear", "batch")
    capsys.readouterr()
    assert cli.main([*args, "--out", str(out), "--resume"]) == 0
    assert report.main([str(out)]) == 0, capsys.readouterr().err
    assert "MDPO-Lag:linear-batch" in (out / "cartpole" / "summary.md").read_text()


def test_set_and_an_algorithm_name_read_a_value_alike():
    """``--set lr=V`` and ``ALGO@lr=V`` parse V one way (``presets.parse_setting``): a number of
    one is the same number (a float) of the other; what ``--set`` reads as no number the name refuses."""
    from rcmdp_jax.presets import split_variant

    for raw in ("1e-3", "2", "-1", "inf", "-inf", "0x10", "1_000", "nan", "abc", "True", "(1,)", "1j"):
        (value,) = plan.parse_sets([f"lr={raw}"]).values()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            named = split_variant(f"MDPO-Lag@lr={raw}")[1]["lr"]
            assert type(named) is float and (named == float(value) or math.isnan(value) and math.isnan(named)), raw
        else:
            with pytest.raises(ValueError, match="ALGO@FIELD=NUMBER"):
                split_variant(f"MDPO-Lag@lr={raw}")

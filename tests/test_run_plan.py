"""The run plan (``rcmdp_jax.study.run_plan.Plan``): ``run.json`` written and read back
is the same plan, and ``--resume``'s comparison names what differs. Nothing compiles."""

import dataclasses
import json

from rcmdp_jax.config import config_to_dict
from rcmdp_jax.presets import preset
from rcmdp_jax.study import cli
from rcmdp_jax.study.plan import build_plan
from rcmdp_jax.study.run_plan import Plan

ARGS = ["--algos", "MDPO-Lag,PPO", "--seeds", "2", "--steps", "3200"]


def test_run_json_round_trips_to_the_same_plan():
    plan = build_plan(cli.parse_args(ARGS))
    text = plan.to_json()
    back = Plan.from_dict(json.loads(text))
    assert back == plan and back.to_json() == text and back.differences(plan) == []
    d = json.loads(text)
    assert list(d) == ["envs", "algos", "seeds", "seed", "vmap", "n_test", "worst_case", "devices", "configs",
                       "will_run"]  # fmt: skip
    assert d["algos"] == ["MDPO-Lag", "PPO"] and d["seeds"] == 2 and d["n_test"] is None
    # the configs on disk are config_to_dict of the preset the names say
    assert d["configs"]["cartpole"]["PPO"] == json.loads(
        json.dumps(config_to_dict(preset("cartpole", "PPO", total_timesteps=3200)))
    )
    assert d["will_run"]["cartpole"]["PPO"] == {"iterations": 2, "policy_steps": 3200}


def test_a_run_json_without_the_optional_keys_reads_as_their_defaults():
    d = json.loads(build_plan(cli.parse_args(ARGS)).to_json())
    for key in ("worst_case", "devices", "will_run"):
        d.pop(key)
    plan = Plan.from_dict({**d, "unknown": 1})
    assert (plan.worst_case, plan.devices, plan.will_run, plan.env_sources) == (None, "auto", {}, {})
    # a run.json from before --worst-case took a value: true/false
    assert [Plan.from_dict({**d, "worst_case": b}).worst_case for b in (True, False)] == ["all", None]


def test_resume_names_the_options_and_config_fields_that_differ():
    saved = build_plan(cli.parse_args(ARGS))
    other = build_plan(cli.parse_args(ARGS + ["--set", "eta_lam=0.5"]))
    assert saved.differences(other) == ["configs: cartpole/MDPO-Lag: eta_lam; cartpole/PPO: eta_lam"]
    assert saved.differences(dataclasses.replace(other, seeds=3, worst_case="all")) == ["seeds", "--worst-case"]
    assert saved.differences(dataclasses.replace(saved, worst_case="costs")) == ["--worst-case"]
    # a config field the saved run.json lacks counts as its default
    d = json.loads(saved.to_json())
    d["configs"]["cartpole"]["PPO"].pop("dual_dropout")
    assert Plan.from_dict(d).differences(saved) == []


def test_worst_case_takes_all_or_costs():
    import pytest

    assert [build_plan(cli.parse_args(ARGS + extra)).worst_case
            for extra in ([], ["--worst-case"], ["--worst-case", "costs"])] == [None, "all", "costs"]  # fmt: skip
    with pytest.raises(
        cli.PlanError, match="--worst-case: invalid choice: 'return' \\(choose from '?all'?, '?costs'?\\)"
    ):
        cli.parse_args(ARGS + ["--worst-case", "return"])

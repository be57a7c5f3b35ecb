"""``Config.groups``: every field in one concern, in the class body's order; the flat forms
(keywords, ``replace``, the JSON of saved run folders) unchanged by the grouping."""

import dataclasses

from rcmdp_jax import Config
from rcmdp_jax.config import config_from_dict, config_to_dict


def test_every_field_is_in_one_group_in_order():
    groups = Config.groups()
    assert list(groups) == ["algorithm", "rollout", "networks", "optimiser", "dual", "evaluation", "method",
                            "hyperparameters"]  # fmt: skip
    assert [f for g in groups.values() for f in g] == [f.name for f in dataclasses.fields(Config)]
    assert "n_envs" in groups["rollout"] and "dual_estimator" in groups["dual"] and "options" in groups["method"]


def test_flat_keywords_and_saved_json_still_read():
    cfg = Config(n_envs=8, dual_batch=800).replace(eval_episodes=3)
    assert config_from_dict(config_to_dict(cfg)) == cfg
    old = config_to_dict(Config())  # a saved config.json's keys, in any order
    assert config_from_dict(dict(reversed(list(old.items())))) == Config()

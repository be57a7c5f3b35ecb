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


def test_a_saved_config_of_the_wrong_json_type_is_refused_not_converted():
    """``config_from_dict`` converts nothing: a string for a number, a bool for a number, a float
    layer width, a name that is not a string are refused in ``validate``'s one wording."""
    import json

    import pytest

    saved = json.loads(json.dumps(config_to_dict(Config())))
    assert config_from_dict({**saved, "hparams": {**saved["hparams"], "lr": 1}}).hparams.lr == 1.0  # JSON's 1
    for edit, said in ((("hparams", "lr", "0.1"), "lr must be a number, got '0.1'"),
                       (("hparams", "gamma", True), "gamma must be a number, got True"),
                       (("policy_hidden", [64.0]), "policy_hidden must be a tuple of positive integer layer widths"),
                       (("name", 5), "name must be a string, got 5"),
                       (("options", "x"), "options must be a tuple of (name, value) pairs"),
                       (("options", [[1, 2]]), "options must be a tuple of (name, value) pairs"),
                       (("hparams", 5), "hparams must be an object, got 5"),
                       (("colour", "blue"), "unknown config field(s) ['colour']")):  # fmt: skip
        d = json.loads(json.dumps(saved))
        *path, value = edit
        (d[path[0]] if len(path) == 2 else d)[path[-1]] = value
        with pytest.raises(ValueError) as caught:
            config_from_dict(d)
        assert said in str(caught.value), (edit, caught.value)
    with pytest.raises(ValueError, match="adversary_candidates given both as a key and in options; keep one"):
        config_from_dict({**saved, "adversary": "worst-of-n", "adversary_candidates": 4,
                          "options": [["adversary_candidates", 8]]})  # fmt: skip

"""Settings a path does not take, and numbers no float holds: one wording on every path
(``--set``, ``ALGO@FIELD=``, ``Config.replace``, a saved config), listing only what that path
takes, with the closest name where one is close; nan and inf named as what they are; a long
integer refused by the field's name. Each is one line, exit 2, before anything is compiled."""

import dataclasses
import math

import pytest
from tiny_configs import CLI_BATCH

from rcmdp_jax import Config, HParams, options, preset
from rcmdp_jax.config import config_from_dict, config_to_dict
from rcmdp_jax.hparams import validate_hparams
from rcmdp_jax.study import cli

# what the command line never takes from --set (an algorithm's name, --algos or --env choose them)
CHOSEN = {"env", "learner", "constraint", "adversary", "name", "alpha_schedule", "alpha_tick"}


def _refused(tmp_path, capsys, *args) -> str:
    out = tmp_path / "never"
    algos = [] if "--algos" in args else ["--algos", "MDPO-Lag,PPO-Lag"]
    assert cli.main([*algos, *CLI_BATCH, *args, "--out", str(out)]) == 2
    printed = capsys.readouterr()
    assert printed.err.count("\n") == 1 and "Traceback" not in printed.err, printed.err
    assert printed.out == "" and not out.exists()  # refused before anything was compiled, trained or written
    return printed.err.strip()


def _listed(err: str) -> set[str]:
    """The names a refusal lists as allowed (after its last ": ")."""
    return set(err.rpartition(": ")[2].split(", "))


def test_set_lists_only_what_set_takes_and_the_closest_name(tmp_path, capsys):
    err = _refused(tmp_path, capsys, "--set", "adversry_steps=3")
    assert "unknown config field(s) ['adversry_steps'] (did you mean 'adversary_steps'?)" in err
    listed = _listed(err)
    assert not listed & CHOSEN  # --set refuses those ("chosen by --algos")
    every = {f.name for f in dataclasses.fields(Config)} | {f.name for f in dataclasses.fields(HParams)}
    expected = every - CHOSEN - {"hparams", "options", "plugin_names", "plugin_values", "dropout_form"}
    expected |= set(options.declared()) | set(options.declared_numbers())
    assert listed == expected
    err = _refused(tmp_path, capsys, "--set", "zzzzzz=1")
    assert "unknown config field(s) ['zzzzzz']; allowed" in err and "did you mean" not in err


def test_a_name_and_a_saved_config_and_replace_say_the_same(tmp_path, capsys):
    err = _refused(tmp_path, capsys, "--algos", "MDPO-Lag@lrr=1e-3")
    assert "unknown hyperparameter(s) ['lrr']" in err and "(did you mean 'lr'?)" in err
    assert "epochs" not in _listed(err) and "lr" in _listed(err)  # a name takes traced numbers only
    with pytest.raises(ValueError, match=r"unknown config field\(s\) \['lrr'\] \(did you mean 'lr'\?\)"):
        Config().replace(lrr=1.0)
    saved = config_to_dict(preset("cartpole", "MDPO-Lag"))
    with pytest.raises(ValueError, match=r"\['n_env'\] \(did you mean 'n_envs'\?\); allowed") as got:
        config_from_dict({**saved, "n_env": 8})
    assert "n_envs" in _listed(str(got.value))
    with pytest.raises(ValueError, match=r"\['hparams.gama'\] \(did you mean 'hparams.gamma'\?\)"):
        config_from_dict({**saved, "hparams": {**saved["hparams"], "gama": 0.9}})


@pytest.mark.parametrize("setting,said", [
    ("eta_lam=nan", "eta_lam must be a finite number >= 0, got nan"),
    ("eta_lam=inf", "eta_lam must be a finite number >= 0, got inf"),
    ("lr=-inf", "lr must be a finite number > 0 in float32, got -inf"),
    ("target_kl=nan", "target_kl must be a number > 0 in float32 (inf disables early stopping), got nan"),
    ("gamma=nan", "gamma must be a number in [0, 1], got nan"),
])  # fmt: skip
def test_nan_and_inf_are_named_as_numbers_that_are_not_finite(tmp_path, capsys, setting, said):
    assert _refused(tmp_path, capsys, "--set", setting).endswith(said)
    assert _refused(tmp_path, capsys, "--algos", f"MDPO-Lag@{setting}").endswith(said)


def test_inf_where_it_means_something_is_taken():
    assert preset("cartpole", "PPO-Lag", target_kl=math.inf, lam_clip=math.inf).hparams.target_kl == math.inf


def test_an_integer_beyond_every_float_is_refused_by_its_field(tmp_path, capsys):
    for digits in (400, 5000):  # 5000: beyond what Python writes as a string by default
        with pytest.raises(ValueError, match=r"^lr must be a finite number > 0 in float32, got ~10\*\*"):
            validate_hparams(HParams(lr=10**digits))
    for given in (["--set", "lr=1" + "0" * 400], ["--algos", "MDPO-Lag@lr=1" + "0" * 400]):
        assert _refused(tmp_path, capsys, *given).endswith("lr must be a finite number > 0 in float32, got ~10**400")
    saved = config_to_dict(preset("cartpole", "MDPO-Lag"))  # a saved run.json's config, edited
    with pytest.raises(ValueError, match=r"^lr must be a finite number > 0 in float32, got ~10\*\*400$"):
        config_from_dict({**saved, "hparams": {**saved["hparams"], "lr": 10**400}})
    err = _refused(tmp_path, capsys, "--set", "n_envs=1" + "0" * 400)
    assert err.endswith("n_envs=~10**400 is beyond the int32 counters of the train step (at most 2147483647)")
    err = _refused(tmp_path, capsys, "--set", "n_envs=1" + "0" * 5000)  # no Python literal: read as text
    assert "n_envs must be a positive integer, got '1000" in err and len(err) < 300


def test_feasibility_counts_are_said_as_every_count_is():
    from rcmdp_jax.feasibility import FeasibilityConfig

    for field, value in (("seeds", 0), ("steps", 1.5), ("n_test", True)):
        with pytest.raises(ValueError, match=rf"^feasibility: {field} must be a positive integer, got {value}$"):
            FeasibilityConfig(**{field: value}).validate()


@pytest.mark.parametrize("args,said", [
    (["--env", "cartpol"], "unknown environment 'cartpol' (did you mean 'cartpole'?); valid names: "),
    (["--env", "gymnax:CartPole-v2"], "unknown gymnax id 'CartPole-v2' (did you mean 'CartPole-v1'?); presets: "),
    (["--env", "gymnax:Pendulum-v1", "--costs", "thetadot:1"], "no float field 'thetadot' (did you mean 'theta_dot'?)"),
    (["--env", "gymnax:Pendulum-v1", "--uncertain", "gg=0.1"], "has no field 'gg' (did you mean 'g'?); "),
    (["--algos", "PPO-lag"], "unknown algorithm 'PPO-lag' (did you mean 'PPO-Lag'?); valid names: "),
    (["--algos", "PPO-PID-lag"], "unknown algorithm 'PPO-PID-lag' (did you mean 'PPO-PID-Lag'?)"),
    (["--algos", "PPO-Lag+worst-of-m"], "unknown robust method 'worst-of-m' (did you mean 'worst-of-n'?) in"),
    (["--set", "LR=0.1"], "unknown config field(s) ['LR'] (did you mean 'lr'?); "),
    (["--set", "search_eta=0.1"], "(search_eta is the traced number search.eta now) (did you mean 'search.eta'?); "),
])  # fmt: skip
def test_a_misspelt_name_is_answered_with_the_closest(tmp_path, capsys, args, said):
    assert said in _refused(tmp_path, capsys, *args)


def test_a_misspelt_kernel_field_and_option_are_answered_with_the_closest():
    from rcmdp_jax.kernel_text import parse

    names = ("cart position", "cart velocity")
    with pytest.raises(ValueError, match=r"no field 'cart positon' in this kernel \(did you mean 'cart position'\?\)"):
        parse("cart positon=1", [1.0, 1.0], names)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['ltma_horizn'\] .*\(did you mean 'ltma_horizon'\?\)"):
        Config(options=(("ltma_horizn", 3),)).validate()
    with pytest.raises(ValueError, match=r"unknown config field\(s\) \['gama', 'lrr'\] \(did you mean 'gamma' for "):
        Config().replace(lrr=1.0, gama=0.9)


def test_the_searchs_and_feasibilitys_settings_are_said_as_every_setting_is():
    from rcmdp_jax.feasibility import FeasibilityConfig
    from rcmdp_jax.worst_case import SearchConfig

    for kw, said in [
        (dict(steps=True), "steps must be a positive integer, got True"),
        (dict(episodes=2**40), "episodes=1099511627776 is beyond the int32 counters"),
        (dict(eta0="x"), "eta0 must be a finite number > 0 in float32, got 'x'"),
        (dict(eta0=10**400), "eta0 must be a finite number > 0 in float32, got ~10**400"),
        (dict(truncate=True), "truncate must be an integer in [0, 2**31 - 1] (0: the whole episode), got True"),
        (dict(estimator="pathwis"), "estimator='pathwis' is not allowed (did you mean 'pathwise'?); choose one of: "),
    ]:
        with pytest.raises(ValueError) as got:
            SearchConfig(**kw).validate()
        assert str(got.value).startswith(said), kw
    assert SearchConfig(eta0=50.0, truncate=0).validate().eta0 == 50.0  # a step beyond the half-width: allowed
    for kw, said in [
        (dict(margin=10**400), "feasibility: margin must be a finite number >= 0, got ~10**400"),
        (
            dict(learner="pp"),
            "feasibility: learner='pp' is not allowed (did you mean 'ppo'?); choose one of: ppo, mdpo",
        ),
        (
            dict(method="corner"),
            "feasibility: method='corner' is not allowed (did you mean 'corners'?); choose one of:",
        ),
    ]:
        with pytest.raises(ValueError) as got:
            FeasibilityConfig(**kw).validate()
        assert str(got.value).startswith(said), kw


def test_a_choice_names_the_closest(tmp_path, capsys):
    said = "dual_estimator='gea' is not allowed (did you mean 'gae'?); choose one of: start_value, step_cost, "
    assert said in _refused(tmp_path, capsys, "--set", "dual_estimator=gea")
    with pytest.raises(ValueError, match=r"alpha_tick='epoc' is not allowed \(did you mean 'epoch'\?\)"):
        Config(alpha_tick="epoc").validate()


def test_a_layer_width_beyond_int32_is_refused_by_its_place():
    with pytest.raises(ValueError, match=r"^critic_hidden\[1\]=2147483648 is beyond the int32 counters"):
        Config(critic_hidden=(64, 2**31)).validate()
    with pytest.raises(ValueError, match=r"^policy_hidden\[0\]=~10\*\*5000 is beyond the int32 counters"):
        Config(policy_hidden=(10**5000,)).validate()
    with pytest.raises(ValueError, match=r"got a tuple holding an integer too long to write$"):
        Config(policy_hidden=(10**5000, 1.5)).validate()


def test_a_plugins_number_option_says_nan_as_the_numbers_do(tmp_path, capsys):
    err = _refused(tmp_path, capsys, "--algos", "PPO-Robust-Lag+worst-of-n", "--set", "adversary_fraction=nan")
    assert err.endswith("adversary_fraction must be a number in (0, 1], got nan")

"""The optimiser's eps and gradient clip, the networks' dropout, the search's first step and the
discount are traced numbers (issue 64): lanes of one program may differ in them, a changed value
builds no new program (the training's, nor the test's and search's for the discount), a saved
run.json that held them as config fields or options still reads, and a program carries only the
plug-ins its lanes run, so one built with a ``--plugins`` file loaded is the one a run without it
takes."""

import json
import math

import jax
import numpy as np
import pytest
from tiny_configs import CLI_BATCH, QUICK, sets, tiny

from rcmdp_jax import chunked as compiled
from rcmdp_jax import constraints, make_family, make_train, preset
from rcmdp_jax.config import config_from_dict, config_to_dict
from rcmdp_jax.evaluate import make_eval
from rcmdp_jax.family import group, plugins, structure
from rcmdp_jax.plugin import Number
from rcmdp_jax.study import cli
from rcmdp_jax.study.policy import load_policy
from rcmdp_jax.study.run_plan import config_problem


def _params(result, lane):
    return [np.asarray(x[lane]) for x in jax.tree.leaves(result.state.params)]


def _lanes(configs):
    """Train ``configs`` as one family (they must be one: ``group``), every member one lane."""
    names = {str(i): c for i, c in enumerate(configs)}
    assert len(group(names)) == 1, "the configs are not one program"
    fam = make_family(configs)
    return jax.jit(jax.vmap(fam, in_axes=(None, 0)))(jax.random.PRNGKey(0), np.arange(len(configs)))


@pytest.mark.parametrize("field, value", [("adam_eps", 1e-2), ("max_grad_norm", 1e-3)])
def test_the_optimisers_numbers_are_lanes_of_one_program(field, value):
    base = tiny("cartpole", "MDPO-Lag", iterations=2)
    changed = base.replace(**{field: value})
    assert getattr(changed.hparams, field) == value and structure([base]) == structure([changed])
    out = _lanes([base, changed, base])
    same, other = _params(out, 2), _params(out, 1)
    assert all(np.array_equal(a, b) for a, b in zip(_params(out, 0), same))  # lane 2 is lane 0 again
    assert any(not np.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(_params(out, 0), other)), field


@pytest.mark.parametrize("bits", ["hash", "threefry"])
def test_dropout_is_a_lane_of_one_program(bits):
    base = tiny("cartpole", "MDPO-Lag", iterations=2, dropout_rng=bits)
    changed = base.replace(dropout=0.2)
    assert structure([base]) == structure([changed])
    assert (base.hparams.dropout, changed.hparams.dropout) == (0.6, 0.2)
    out = _lanes([base, changed, base])
    assert all(np.array_equal(a, b) for a, b in zip(_params(out, 0), _params(out, 2)))
    assert any(not np.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(_params(out, 0), _params(out, 1)))


def test_no_dropout_is_its_own_program_and_a_lane_at_zero_drops_nothing():
    """A config at dropout 0 builds networks without the layer (the program as before, bit for bit:
    experiments/bit_identity.py's gymnax runs); a lane at 0 of a dropout program trains the same."""
    on = tiny("cartpole", "MDPO-Lag", iterations=2)
    off = on.replace(dropout=0.0)
    assert structure([on]) != structure([off]) and len(group({"on": on, "off": off})) == 2
    a = jax.jit(make_train(off))(jax.random.PRNGKey(0))
    b = jax.jit(make_train(on))(jax.random.PRNGKey(0), off.hparams)  # on's program, at 0
    c = jax.jit(make_train(on))(jax.random.PRNGKey(0))
    leaves = lambda r: [np.asarray(v) for v in jax.tree.leaves(r.state.params)]
    for x, y in zip(leaves(a), leaves(b)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
    assert any(not np.allclose(x, z, rtol=1e-4, atol=1e-6) for x, z in zip(leaves(a), leaves(c)))


def test_an_infinite_clip_is_its_own_program_and_clips_nothing():
    """MCPMD's optimiser has no clip (inf): built so, not as a lane of the clipped program; a
    lane of the clipped program at inf trains what the unclipped one does."""
    clipped = tiny("cartpole", "MDPO-Lag", iterations=2)
    free = clipped.replace(max_grad_norm=math.inf)
    assert structure([clipped]) != structure([free])
    huge = clipped.replace(max_grad_norm=3.0e38)  # a clip no gradient reaches: the clipped program
    a, b = _lanes([free]), _lanes([huge])
    for x, y in zip(_params(a, 0), _params(b, 0)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)


def test_the_searchs_first_step_is_a_lane_of_one_program():
    sizes = dict(adversary="search", search_steps=2, search_restarts=0, adversary_episodes=2)
    base = tiny("inventory", "MDPO-Robust-Lag", iterations=2, **sizes)
    wide = base.replace(**{"search.eta": 1.0})
    assert wide.hparams.number("search.eta") == 1.0 and base.hparams.number("search.eta") == 0.25
    out = _lanes([base, wide])
    xi = np.asarray(out.metrics["xi"])
    assert not np.allclose(xi[0], xi[1]), "the first step did not enter the search"


def test_a_saved_config_with_the_numbers_as_fields_and_options_reads():
    """An older run.json: ``adam_eps``, ``max_grad_norm`` and ``dropout`` config fields, ``search_eta`` an option."""
    cfg = preset("inventory", "MDPO-Robust-Lag+search")
    d = json.loads(json.dumps(config_to_dict(cfg)))
    for f in ("adam_eps", "max_grad_norm", "dropout"):
        del d["hparams"][f]
    d |= {"adam_eps": 1e-6, "max_grad_norm": 2.0, "dropout": 0.3}
    d["options"].append(["search_eta", 0.5])
    assert config_problem("inventory", "MDPO-Robust-Lag+search", d) == ""
    old = config_from_dict(d)
    assert (old.hparams.adam_eps, old.hparams.max_grad_norm, old.hparams.number("search.eta")) == (1e-6, 2.0, 0.5)
    assert old.hparams.dropout == 0.3
    assert old == cfg.replace(adam_eps=1e-6, max_grad_norm=2.0, dropout=0.3, **{"search.eta": 0.5})
    assert config_from_dict(json.loads(json.dumps(config_to_dict(old)))) == old  # and today's form reads back


@pytest.mark.parametrize("change, words", [
    ({"adam_eps": 0.0}, "adam_eps must be a finite number > 0"),
    ({"adam_eps": math.inf}, "adam_eps must be a finite number > 0"),
    ({"max_grad_norm": -1.0}, "max_grad_norm must be a number > 0 in float32 (inf: no clip)"),
    ({"search.eta": 1.5}, "search.eta must be a number in (0, 1]"),
    ({"dropout": 1.0}, "dropout must be a number in [0, 1), got 1.0"),
    ({"search_eta": 0.5}, "['search_eta'] (search_eta is the traced number search.eta now)"),  # named
])  # fmt: skip
def test_bad_values_are_refused_naming_the_setting(change, words):
    with pytest.raises(ValueError) as err:
        preset("inventory", "MDPO-Robust-Lag+search", **change)
    assert words in str(err.value), str(err.value)


class _Unused(constraints.Rule):
    """A rule no run here trains (a ``--plugins`` file's), with a traced number of its own."""

    numbers = {"gain": Number(1.0, 0.0)}

    def step(self, lam, c_hat, hp):
        return lam + hp.number(f"{self.name}.gain") * c_hat


def test_a_registered_rule_no_lane_trains_is_no_part_of_the_program():
    """The program of a family switches over its lanes' rules and carries their numbers only: the
    same program text with another rule (and its number) registered."""
    cfgs = [tiny("cartpole", a, iterations=1) for a in ("MDPO", "MDPO-Lag")]
    text = lambda: jax.jit(jax.vmap(make_family(cfgs))).lower(jax.random.split(jax.random.PRNGKey(0), 2),
                                                              np.arange(2)).as_text()  # fmt: skip
    before = text()
    constraints.register("unused-rule", _Unused)
    try:
        assert text() == before, "registering a rule no lane trains changed the program"
        lag = cfgs[1].replace(constraint="unused-rule")
        assert make_family([cfgs[0], lag]).variants.constraint.names == ("none", "unused-rule")
    finally:
        constraints.unregister("unused-rule")


def test_a_program_built_with_a_plugin_loaded_is_reused_without_it():
    cfgs = [tiny("cartpole", a, iterations=2) for a in ("MDPO", "MDPO-Lag")]
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(1), 2))
    constraints.register("unused-rule", _Unused)
    try:
        with_plugin = plugins(cfgs)
        assert all("unused-rule" != n for kind in with_plugin for n, _ in kind)
        compiled.Prepared(cfgs, keys, True)  # built (or taken from the process's programs)
        built = compiled.counts["built"]
    finally:
        constraints.unregister("unused-rule")
    assert plugins(cfgs) == with_plugin
    compiled.Prepared(cfgs, keys, True)
    assert compiled.counts["built"] == built, "the run without the plug-in built its program again"


def test_a_changed_adam_eps_on_the_command_line_builds_no_new_program(tmp_path):
    """issue 64's check: ``rcmdp --env cartpole --algos MDPO-Lag --set adam_eps=1e-6`` after a run
    without it builds no program (the training family, its test and search all taken as built)."""
    args = ["--env", "cartpole", "--algos", "MDPO-Lag", *CLI_BATCH, *QUICK]
    assert cli.main([*args, "--out", str(tmp_path / "a")]) == 0
    built = compiled.counts["built"]
    assert cli.main([*args, *sets({"adam_eps": 1e-6}), "--out", str(tmp_path / "b")]) == 0
    assert compiled.counts["built"] == built, "a new adam_eps built a new program"
    saved = json.loads((tmp_path / "b" / "run.json").read_text())
    assert saved["configs"]["cartpole"]["MDPO-Lag"]["hparams"]["adam_eps"] == 1e-6
    a = np.load(tmp_path / "a" / "cartpole" / "MDPO-Lag" / "train_metrics.npz")
    b = np.load(tmp_path / "b" / "cartpole" / "MDPO-Lag" / "train_metrics.npz")
    assert not np.array_equal(a["policy_loss"], b["policy_loss"], equal_nan=True), "adam_eps did not enter"


def test_a_changed_dropout_on_the_command_line_builds_no_new_program(tmp_path):
    """``--set dropout=0.3`` after a run at the preset's 0.6 builds no training program."""
    args = ["--env", "cartpole", "--algos", "MDPO-Lag", *CLI_BATCH, *QUICK]
    assert cli.main([*args, "--out", str(tmp_path / "a")]) == 0
    built = compiled.counts["built"]
    assert cli.main([*args, *sets({"dropout": 0.3}), "--out", str(tmp_path / "b")]) == 0
    assert compiled.counts["built"] == built, "a new dropout built a new program"
    saved = json.loads((tmp_path / "b" / "run.json").read_text())
    assert saved["configs"]["cartpole"]["MDPO-Lag"]["hparams"]["dropout"] == 0.3
    a = np.load(tmp_path / "a" / "cartpole" / "MDPO-Lag" / "train_metrics.npz")
    b = np.load(tmp_path / "b" / "cartpole" / "MDPO-Lag" / "train_metrics.npz")
    assert not np.array_equal(a["policy_loss"], b["policy_loss"], equal_nan=True), "dropout did not enter"


def test_the_discount_is_an_argument_of_the_test_and_search_programs(tmp_path):
    """Two configs that differ only in gamma share one robustness test and one worst-case search
    (``compiled.policy_key``), each run at its own gamma: a run at another gamma builds nothing."""
    args = ["--env", "inventory", "--algos", "MDPO-Lag", *CLI_BATCH, *QUICK, "--worst-case", "costs"]
    assert cli.main([*args, "--out", str(tmp_path / "a")]) == 0
    built = compiled.counts["built"]
    assert cli.main([*args, *sets({"gamma": 0.9}), "--out", str(tmp_path / "b")]) == 0
    assert compiled.counts["built"] == built, "a new gamma built a new program"
    a, b = (np.load(tmp_path / x / "inventory" / "MDPO-Lag" / "test_results.npz") for x in "ab")
    assert not np.allclose(a["V"], b["V"]), "gamma did not enter the test"
    # load_policy's episodes: one program for both runs, each at its gamma (the test's at level 0)
    for x, test in (("a", a), ("b", b)):
        episodes = load_policy(tmp_path / x, "MDPO-Lag", 1).evaluate().episodes
        np.testing.assert_array_equal(episodes["V"], test["V"][1, 0, 0])
        if x == "a":
            built = compiled.counts["built"]
    assert compiled.counts["built"] == built, "load_policy at a new gamma built a new program"


def test_a_sweep_at_another_discount_is_the_sweep_made_for_it():
    """The sweep built for one config, given another gamma, gives what the other config's gives."""
    cfg = tiny("inventory", "MDPO-Lag", iterations=1)
    other = cfg.replace(gamma=0.9)
    params = jax.jit(jax.vmap(make_train(cfg)))(jax.random.split(jax.random.PRNGKey(0), 2)).state.params["actor"]
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    shared = jax.jit(make_eval(cfg, n_test=3).from_keys)(params, keys, np.float32(0.9))
    own = jax.jit(make_eval(other, n_test=3).from_keys)(params, keys)
    first = jax.jit(make_eval(cfg, n_test=3).from_keys)(params, keys)
    for k in ("V", "C", "EpCost"):
        np.testing.assert_array_equal(np.asarray(shared[k]), np.asarray(own[k]), err_msg=k)
    assert not np.allclose(np.asarray(shared["V"]), np.asarray(first["V"]))

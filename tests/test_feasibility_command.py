"""``rcmdp feasibility``'s command: its refusals before its folder exists (nothing trained, nothing
written), its partial file checked on ``--resume`` (an edited file refused, the option that
differs named), and its one-policy value measured on ``n_test`` episodes."""

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
from cli_helpers import FEAS, TOY, _one_line, _snapshot

from rcmdp_jax.study import console


@pytest.fixture
def no_training(monkeypatch):
    from rcmdp_jax import feasibility

    def trained(*_):
        raise AssertionError("trained before refusing")

    monkeypatch.setattr(feasibility, "learned", trained)


LONG = "x" * 300


@pytest.mark.parametrize("extra, words", [
    (["--controller", f"{TOY}:notfn"], ["the module has no 'notfn'"]),
    (["--controller", f"{TOY}:raise"], ["the module has no 'raise' (did you mean 'raises'?)"]),
    (["--controller", f"{TOY}:GAMMA"], ["controller must be a function of the observation"]),
    (["--controller", f"{TOY}:raises"], ["controller(obs) failed on an observation", "boom"]),
    (["--controller", f"{TOY}:wrong_shape"], ["must return an action of shape (), got (3,)"]),
    (["--controller", ""], ["--controller is empty"]),
    (["--out", LONG], ["File name too long"]),
    (["--out", LONG, "--resume"], ["File name too long"]),
])  # fmt: skip
def test_feasibility_refuses_before_its_folder_exists(capsys, tmp_path, no_training, monkeypatch, extra, words):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "f"
    argv = [*FEAS, "--env", f"{TOY}:make", *extra, *([] if "--out" in extra else ["--out", str(out)])]
    assert console.main(argv) == 2
    _one_line(capsys, "rcmdp feasibility: error:", *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no --out, no runs/feasibility-<time>


@pytest.mark.slow
def test_feasibility_refuses_ltma_on_brax_before_training(capsys, tmp_path, no_training):
    out = tmp_path / "f"
    for env, method in (("brax:inverted_pendulum", "ltma"), ("brax:inverted_pendulum@backend=mjx", "ltma-norm")):
        assert console.main([*FEAS, "--env", env, "--method", method, "--out", str(out)]) == 2
        _one_line(capsys, "rcmdp feasibility: error:", f"method='{method}' on {env}", "brax")
        assert not out.exists()


def _partial(out: Path, edit=None) -> None:
    """A partial file as an interrupted check on the toy writes it (one constraint's row), then ``edit``-ed."""
    from rcmdp_jax.study.feasibility_command import PARTIAL, _digest, _prepare, feasibility_args

    inputs = _prepare(feasibility_args([*FEAS[1:], "--env", f"{TOY}:make2", "--out", str(out)]))[4]
    row = {"constraint": "C0", "keepable": False, "least_worst_C": 0.5, "learned_worst_C_per_seed": [0.5, 0.7]}
    saved = {"inputs": inputs, "rows": [row], "digest": _digest(inputs, [row])}
    out.mkdir()
    (out / PARTIAL).write_text(json.dumps(edit(saved) if edit else saved))


def _keepable(saved):
    saved["rows"][0] |= {"keepable": True, "least_worst_C": -99}
    return saved


@pytest.mark.parametrize("edit", [
    _keepable,
    lambda saved: saved | {"rows": saved["rows"] * 5},
    lambda saved: saved | {"rows": [saved["rows"][0] | {"least_worst_C": "abc"}]},
    lambda saved: {k: v for k, v in saved.items() if k != "digest"},
])  # fmt: skip
def test_feasibility_resume_refuses_an_edited_partial_file(capsys, tmp_path, no_training, edit):
    out = tmp_path / "f"
    _partial(out, edit)
    before = _snapshot(out)
    assert console.main([*FEAS, "--env", f"{TOY}:make2", "--out", str(out), "--resume"]) == 2
    _one_line(capsys, "rcmdp feasibility: error: --resume:", "was edited or damaged")
    assert _snapshot(out) == before


def test_feasibility_resume_names_the_option_that_differs(capsys, tmp_path, no_training):
    out = tmp_path / "f"
    _partial(out)
    assert console.main([*FEAS, "--env", f"{TOY}:make2", "--out", str(out), "--resume", "--seeds", "3"]) == 2
    _one_line(capsys, "the options differ", "(--seeds)")


@pytest.mark.parametrize("code", [0, 1])
def test_feasibility_whose_folder_was_removed_meanwhile_exits_with_its_code(tmp_path, no_training, monkeypatch, code):
    from rcmdp_jax.study import feasibility_command

    def run_and_remove(name, cfg, controller, out, *_):  # a user removes --out while the check runs
        shutil.rmtree(out)
        return code

    monkeypatch.setattr(feasibility_command, "_run", run_and_remove)
    out = tmp_path / "f"
    assert console.main([*FEAS, "--env", f"{TOY}:make", "--out", str(out)]) == code  # not a FileNotFoundError
    assert not out.exists()


def test_the_searched_worst_kernel_is_measured_on_n_test_episodes():
    """The one-policy value's standard error, where the gradient search gives it, shrinks as
    1/sqrt(n_test): following "try --n-test 10n" narrows it."""
    from feasibility_toy import make

    from rcmdp_jax import envs, make_train
    from rcmdp_jax.evaluate import DISTORTION_LEVELS
    from rcmdp_jax.feasibility import FeasibilityConfig, search_worst, train_config
    from rcmdp_jax.worst_case import SearchConfig

    spec = make()
    envs.register("drift-search", spec["env"], learner=spec["learner"], n_test=2)
    config = train_config("drift-search", 0, FeasibilityConfig(seeds=1))
    env, params = envs.make(config.env)
    actors = jax.vmap(make_train(config).init)(jax.random.split(jax.random.PRNGKey(0), 1)).params["actor"]
    C = np.zeros((1, len(DISTORTION_LEVELS), 2))
    search = SearchConfig(steps=2, episodes=2, eval_episodes=4)
    found = {n: search_worst(config, env, params, actors, C, 0, search, jax.random.PRNGKey(1), n) for n in (4, 400)}
    assert found[400]["episodes"] == 400 and found[4]["episodes"] == 4
    assert 0 < found[400]["se"] < 0.35 * found[4]["se"], found
    np.testing.assert_array_equal(found[4]["xi"], found[400]["xi"])  # the same kernel, measured on more episodes
    from rcmdp_jax.feasibility_report import lines

    row = {"constraint": "c", "margin": 0.0, "keepable": True, "least_worst_C": -0.01, "least_worst_C_se": 0.1,
           "least_worst_C_by": "learned policy (seed 0, worst found by search)", "too_close_to_call": True,
           "least_worst_C_episodes": 100, "keepable_up_to_level": 1.0, "box_fraction": 1.0,
           "worst_kernel": {"described": "nominal", "level": 0.0, "least_C": -0.01}, "not_keepable_kernels": []}
    said = "\n".join(lines({"constraints": [row], "settings": {"n_test": 20, "gamma": 0.9, "horizon": 10}}))
    assert "a mean over 100 episodes on the searched kernel" in said and "try --n-test 1000" in said, said

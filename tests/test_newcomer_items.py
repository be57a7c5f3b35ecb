"""Issue 42, what got in a new user's way (items 5-8): a FILE.py that imports a module
beside it, the kernel noise of any gymnax id, float rounding taken for a worse kernel,
the command's own name in its messages, what the docs say of gymnax's step and of a
vector field, and the R_pen± note."""

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_helpers import _one_line

from rcmdp_jax import envs
from rcmdp_jax.study import cli

DOCS = Path(__file__).resolve().parent.parent / "docs"
MOUNTAIN = "gymnax:MountainCar-v0@uncertain=force:0.2"


# ------------------------------------------------------------------ 5. a module beside FILE.py
def test_a_file_environment_imports_a_module_beside_it(tmp_path, monkeypatch):
    from rcmdp_jax.study import user_env

    monkeypatch.setattr(sys, "path", list(sys.path))  # whatever the load adds goes with the test
    (tmp_path / "thermo_parts.py").write_text('from rcmdp_jax import envs\nSPEC = envs.spec("gymnax:CartPole-v1")\n')
    (tmp_path / "thermo.py").write_text("from thermo_parts import SPEC\n\ndef make():\n    return SPEC\n")
    name, record = user_env.load_spec(f"{tmp_path / 'thermo.py'}:make")  # from another working directory
    assert name == "thermo.py:make" and record["file"] == str(tmp_path / "thermo.py")
    assert envs.spec(name).cost_names == envs.spec("gymnax:CartPole-v1").cost_names


# ------------------------------------------------------------------ 6. the kernel noise of any gymnax id
def test_the_noise_of_a_gymnax_id_is_the_documented_default_and_settable():
    from rcmdp_jax.study.plan import build_plan

    np.testing.assert_allclose(np.asarray(envs.make(MOUNTAIN)[1].noise), [1e-3, 1e-3])  # position, velocity
    np.testing.assert_allclose(np.asarray(envs.make(MOUNTAIN + "@noise=1e-5")[1].noise), [1e-5, 1e-5])
    np.testing.assert_allclose(np.asarray(envs.make(MOUNTAIN + "@noise=1e-5,0")[1].noise), [1e-5, 0.0])
    args = ["--env", "gymnax:MountainCar-v0", "--uncertain", "force=0.2", "--noise", "1e-5", "--algos", "PPO"]
    assert build_plan(cli.parse_args([*args, "--seeds", "1"])).envs == (MOUNTAIN + "@noise=1e-5",)
    assert "1e-3 on\n  every state entry for an id without a preset" in (DOCS / "cli.md").read_text()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--noise", "1e-3,1e-3,0"], "noise must be one number or 2 (one per state entry: position, velocity), got 3"),
        (["--noise", "-1"], "noise must be finite and >= 0"),
        (["--noise", "small"], "noise: small — write one std (noise=0.01) or one per state entry"),
        (["--noise", ""], "--noise is empty"),
    ],
)
def test_a_bad_noise_is_one_line_naming_noise(tmp_path, capsys, args, message):
    out = tmp_path / "never"
    base = ["--env", "gymnax:MountainCar-v0", "--uncertain", "force=0.2", "--algos", "PPO", "--out", str(out)]
    assert cli.main([*base, *args]) == 2
    _one_line(capsys, message)
    assert cli.main(["--env", "cartpole", "--noise", "1e-3", "--out", str(out)]) == 2
    _one_line(capsys, "--uncertain, --costs and --noise apply to a gymnax environment")
    assert not out.exists()


# ------------------------------------------------------------------ 7. float rounding is not "beyond the grid"
def test_the_search_is_beyond_the_grid_only_past_float_rounding():
    from rcmdp_jax.study.report import worst_case_section

    xi = np.zeros((3, 2))
    found = {"PPO-Lag": {
        # the probe's pair first: -3.1698394 found against the grid's -3.1698391 is the same value
        "Return": {"grid": np.array([-3.1698391, -3.0, 10.0]), "search": np.array([-3.1698394, -3.2, 9.9]),
                   "lower_is_worse": True, "grid_xi": xi, "search_xi": xi},
        "C0": {"grid": np.array([0.5, 0.5, 0.0]), "search": np.array([0.5000001, 0.6, 1e-9]),
               "lower_is_worse": False, "grid_xi": xi, "search_xi": xi},
    }}  # fmt: skip
    text, js = worst_case_section(found, "cartpole")
    per = js["per_algorithm"]["PPO-Lag"]
    assert per["Return"]["search_beyond_grid"] == [False, True, True]
    assert per["C0"]["search_beyond_grid"] == [False, True, False]
    assert js["domain"]["Return"]["search_beyond_grid"] == 2 and "beyond the grid's worst in 2 of 3" in text


# ------------------------------------------------------------------ 8. the small ones
@pytest.mark.parametrize("argv0,prog", [("/usr/local/bin/rcmdp", "rcmdp"), ("/x/experiments/run.py", "run.py"),
                                        ("/x/site-packages/rcmdp_jax/__main__.py", "python -m rcmdp_jax")])  # fmt: skip
def test_messages_name_the_command_that_was_called(tmp_path, capsys, monkeypatch, argv0, prog):
    monkeypatch.setattr(sys, "argv", [argv0])
    assert cli.main(["--seeds", "0", "--out", str(tmp_path / "never")]) == 2
    _one_line(capsys, f"{prog}: error: --seeds must be a positive integer")
    with pytest.raises(SystemExit):
        cli.parse_args(["--help"])
    assert capsys.readouterr().out.startswith(f"usage: {prog} ")


def test_custom_envs_md_unpacks_gymnax_steps_six_values():
    import gymnax

    env, params = gymnax.make("CartPole-v1")
    obs, state = env.reset(jax.random.key(0), params)
    returned = env.step(jax.random.key(1), state, 0, params)
    text = (DOCS / "custom_envs.md").read_text()
    assert len(returned) == 6 and "obs, state, reward, done, info, _ = env.step(...)" in text
    assert re.search(r"returns six values", text)


def test_a_vector_field_limit_is_one_constraint_on_its_largest_entry():
    from rcmdp_jax.envs.gymnax_any import limit_cost

    cost = limit_cost("angle_vels:1", ("angles", "angle_vels"), "Reacher-misc")
    nxt = SimpleNamespace(angle_vels=jnp.array([0.5, -2.0]))
    np.testing.assert_allclose(np.asarray(cost(None, None, nxt, None)), [1.0])  # max(0.5, 2.0) - 1
    nxt = SimpleNamespace(angle_vels=jnp.array([0.5, -0.25]))
    np.testing.assert_allclose(np.asarray(cost(None, None, nxt, None)), [-0.5])  # kept: both within 1
    assert "max_i |FIELD_i| <= LIMIT" in (DOCS / "custom_envs.md").read_text()


def test_the_legend_says_what_r_pen_pm_bolds():
    from rcmdp_jax.study.report_text import legend

    assert "its bold can go to an algorithm with a far lower Return that stays well under its limit" in " ".join(
        legend(50.0).split()
    )

"""Hostile input to the public API and the command line, each refused in one error that names
the argument and what is allowed, before anything compiles: a raw key of the wrong length, an
algorithm that is not a name, hyperparameters given as arrays to one run, robustify's box and
costs of the wrong kind, a non-finite observation to ``act``, an environment name's repeated,
empty or unknown ``@`` option, an ``--out`` inside another run's folder (which that run's
``--resume`` may remove), and a report file a person edited, which no command writes over. A
typeset minus sign in a kernel is a minus."""

import re

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_helpers import FEAS, _copy, _one_line, _snapshot
from tiny_configs import HOSTILE_TINY as TINY
from tiny_configs import tiny

from rcmdp_jax import envs, load_policy, make_train, preset, sweep
from rcmdp_jax.kernel_text import parse
from rcmdp_jax.study import cli, console

PENDULUM_COST = {"speed": lambda s, a, n, p: jnp.abs(n.theta_dot)[None] - 1.5}


@pytest.mark.parametrize("key", [jnp.zeros(3, jnp.uint32), jnp.zeros(1, jnp.uint32), np.zeros(4, np.uint32)])
def test_a_raw_key_of_the_wrong_length_is_named_before_tracing(key):
    train = make_train(tiny(algo="PPO", iterations=1))
    with pytest.raises(TypeError, match=r"^rng must be a JAX random key .*got an array of uint32 \(\d,\)$"):
        train(key)
    with pytest.raises(TypeError, match=r"^rng must be a JAX random key"):
        train.init(key)


@pytest.mark.parametrize("algorithm", [5, None, ("PPO-Lag",)])
def test_preset_names_an_algorithm_that_is_not_a_name(algorithm):
    with pytest.raises(
        ValueError, match=rf"^algorithm={re.escape(repr(algorithm))}: algorithm must be a name \(str\), got "
    ):
        preset("cartpole", algorithm)


def test_one_run_refuses_hyperparameters_given_as_arrays():
    with pytest.raises(
        ValueError, match=r"^gamma has shape \(2,\); one run takes a single number .*in_axes=\(None, 0\)"
    ):
        preset("cartpole", "PPO-Lag", gamma=np.array([0.9, 0.9]))
    cfg = tiny(algo="PPO", iterations=1)
    with pytest.raises(ValueError, match=r"^lam_init has shape \(3,\); one run takes a single number"):
        make_train(cfg.replace(lam_init=jnp.array([1.0, 2.0, 3.0])))
    train = make_train(cfg)
    lanes = sweep(cfg, lam_init=[0.0, 1.0, 5.0])
    with pytest.raises(ValueError, match=r"has shape \(3,\); one run takes a single number"):
        train(jax.random.PRNGKey(0), lanes)  # a sweep's lanes without the vmap
    out = jax.vmap(train.init, in_axes=(None, 0))(jax.random.PRNGKey(0), lanes)  # with it: one number a lane
    assert out.dual.lam.shape[0] == 3


@pytest.mark.parametrize(
    "box,error,words",
    [
        ({"g": (0.1,)}, ValueError, "uncertain['g']: give a relative fraction"),
        ({"g": ("rel", 0.1, 2)}, ValueError, "uncertain['g']: give a relative fraction"),
        ({3: 0.1}, ValueError, "EnvParams has no field 3;"),
        (
            {"g": 0.0},
            ValueError,
            "uncertain['g']: the box must be non-empty and finite in float32 (half-width > 0); 0.0 "
            "around nominal 10.0 gives 0.0",
        ),
        ({"g": envs.absolute(0.0)}, ValueError, "0.0 (absolute) around nominal 10.0 gives 0.0"),
    ],
)
def test_robustify_names_a_box_entry_of_the_wrong_kind(box, error, words):
    with pytest.raises(error) as err:
        envs.robustify(gymnax.make("Pendulum-v1")[0], box, PENDULUM_COST)
    assert words in str(err.value) and "\n" not in str(err.value), err.value


@pytest.mark.parametrize("costs", [None, 3, "speed"])
def test_robustify_names_costs_that_are_not_functions(costs):
    with pytest.raises(
        TypeError, match=r"^costs must be a dict \{name: c\(state, action, next_state, params\)\} or a "
    ):
        envs.robustify(gymnax.make("Pendulum-v1")[0], {"g": 0.1}, costs)


def test_a_list_of_cost_functions_is_still_taken_by_their_names():
    def speed(s, a, n, p):
        return jnp.abs(n.theta_dot)[None] - 1.5

    env = envs.robustify(gymnax.make("Pendulum-v1")[0], {"g": 0.1}, [speed])
    assert env.cost_names == ("speed",)


def test_two_cost_functions_of_one_name_are_refused_not_one_dropped():
    pendulum = gymnax.make("Pendulum-v1")[0]
    two = [lambda s, a, n, p: jnp.abs(n.theta_dot)[None] - 1.5, lambda s, a, n, p: jnp.abs(a) - 1.0]
    with pytest.raises(ValueError, match=r"^costs: 2 functions are named '<lambda>'; give a dict \{name: function\}"):
        envs.robustify(pendulum, {"g": 0.1}, two)
    env = envs.robustify(pendulum, {"g": 0.1}, {"speed": two[0], "torque": two[1]})
    assert env.cost_names == ("speed", "torque") and env.num_constraints == 2


@pytest.mark.parametrize(
    "name,words",
    [
        ("gymnax:Pendulum-v1@uncertain=g:0.3@uncertain=l:0.1", "@uncertain is given twice"),
        ("gymnax:Pendulum-v1@costs=", "@costs has no value"),
        ("gymnax:Pendulum-v1@noise= ", "@noise has no value"),
        ("gymnax:Pendulum-v1@", "an empty option"),
        ("gymnax:Pendulum-v1@@costs=speed", "an empty option"),
        ("gymnax:Pendulum-v1@cost=speed", "unknown option '@cost' (did you mean 'costs'?)"),
        ("gymnax:Pendulum-v1@uncertain", "@uncertain has no value"),
    ],
)
def test_an_environment_names_the_option_that_is_wrong(name, words):
    with pytest.raises(ValueError) as err:
        envs.spec(name)
    message = str(err.value)
    assert words in message and "options are @uncertain=FIELD:WIDTH" in message and "\n" not in message, message


def test_a_typeset_minus_sign_in_a_kernel_is_a_minus():
    nominal = np.array([10.0, 2.0], np.float32)
    got = parse("g=\u22125%,m=\u22121.5", nominal, ("g", "m"))
    np.testing.assert_array_equal(got, np.array([9.5, -1.5], np.float32))


def test_act_refuses_an_observation_that_is_not_finite(trained):
    policy = load_policy(trained, "MDPO-Lag", 0)
    for obs, shown in [(jnp.array([0.0, jnp.nan, 0.0, 0.0]), "obs[1] = nan"),
                       (np.array([np.inf, 0.0, 0.0, -np.inf]), "obs[0] = inf, obs[3] = -inf")]:  # fmt: skip
        with pytest.raises(ValueError) as err:
            policy.act(obs)
        assert str(err.value) == f"obs must be finite numbers, got {shown} (an observation of cartpole)", err.value
    with pytest.raises(TypeError, match="^key must be a JAX random key"):
        policy.act(jnp.zeros(4), jnp.zeros(3, jnp.uint32))
    jax.jit(policy.act)(jnp.full(4, jnp.nan))  # traced: not checked (the values are not known)


def test_an_out_inside_a_run_folder_is_refused_and_nothing_is_made(trained, tmp_path, capsys):
    before = _snapshot(trained)
    for inside in (trained / "cartpole" / "new", trained / "cartpole" / "MDPO-Lag" / "tensorboard" / "mine"):
        assert cli.main([*TINY, "--out", str(inside)]) == 2
        _one_line(capsys, f"--out {inside} is inside the run folder {trained}; choose one outside it")
        assert console.main([*FEAS, "--env", "gymnax:Pendulum-v1", "--out", str(inside)]) == 2
        _one_line(capsys, f"--out {inside} is inside the run folder {trained}")
    assert _snapshot(trained) == before and not (trained / "cartpole" / "new").exists()


def test_a_report_file_a_person_edited_is_not_written_over(trained, tmp_path, capsys):
    out = _copy(trained, tmp_path)
    summary = out / "cartpole" / "summary.md"
    summary.write_text(summary.read_text() + "\nMy notes on this run.\n")
    before = _snapshot(out)
    for command in (lambda: cli.main(["--eval-only", str(out)]), lambda: cli.main([*TINY, "--out", str(out), "--resume"]),
                    lambda: console.report([str(out)])):  # fmt: skip
        assert command() == 2
        _one_line(capsys, f"{summary} was edited since the report wrote it", "move it away to keep the edit")
        assert _snapshot(out) == before
    assert load_policy(out, "MDPO-Lag", 0).act(jnp.zeros(4)).shape == ()  # reading it is not writing it
    summary.rename(tmp_path / "mine.md")
    assert console.report([str(out)]) == 0 and summary.exists()
    assert "My notes" in (tmp_path / "mine.md").read_text() and "My notes" not in summary.read_text()


def test_an_out_through_a_link_to_nothing_is_named_before_the_plan(tmp_path, capsys):
    link = tmp_path / "runs"
    link.symlink_to(tmp_path / "gone")
    for out in (link, link / "tiny"):
        assert cli.main([*TINY, "--out", str(out)]) == 2
        _one_line(capsys, f"--out {out}: {link} links to {tmp_path / 'gone'}, which does not exist")
        assert console.main([*FEAS, "--env", "gymnax:Pendulum-v1", "--out", str(out)]) == 2
        _one_line(capsys, f"{link} links to {tmp_path / 'gone'}, which does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]

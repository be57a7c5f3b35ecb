"""An environment's numbers are arguments of its training program (``envs.numbers``): a run that
changes only a study domain's limit, or a ``gymnax:`` name's box widths, noise, or its costs'
limits and budgets, runs the program built before, and trains what a program built for its own
numbers trains (the slow check in another process: ``test_program_store.py``)."""

import jax
import numpy as np
import pytest
from rcmdp_jax.envs.numbers import program_key, program_numbers
from test_one_program import Compiles, assert_same, reference

from rcmdp_jax import chunked, envs, preset
from rcmdp_jax.chunked import Prepared, train_prepared
from rcmdp_jax.family import structure

CARTPOLE = "gymnax:CartPole-v1"


@pytest.mark.parametrize(
    "name, key",
    [
        ("inventory@cost_threshold=0.13", "inventory@cost_threshold=#"),
        ("cartpole@velocity_limit=2", "cartpole@velocity_limit=#"),
        ("cartpole", "cartpole"),
        (f"{CARTPOLE}@uncertain=gravity:0.3,length:abs:0.1", f"{CARTPOLE}@noise=#,#,#,#@uncertain=gravity:#,length:#"),
        (f"{CARTPOLE}@noise=0.01,0,2e-3,0.0", f"{CARTPOLE}@noise=#,0,#,0"),
        (f"{CARTPOLE}@noise=1e-50,1e-3,-0,1e-46", f"{CARTPOLE}@noise=0,#,0,0"),  # zero in float32: not drawn
        (
            f"{CARTPOLE}@costs=x>0.3:5,theta:0.2,x_dot>1,x>2:0:gamma,position",
            f"{CARTPOLE}@costs=x>#:#,theta:#,x_dot>#:0,x>#:0:gamma,position@noise=#,#,#,#",
        ),
        ("brax:hopper", "brax:hopper"),
        (f"{CARTPOLE}@noise=0.1@uncertain=gravity:0.2", f"{CARTPOLE}@noise=#,#,#,#@uncertain=gravity:#"),
        (f"{CARTPOLE}@uncertain=gravity:0.2@noise=0.1", f"{CARTPOLE}@noise=#,#,#,#@uncertain=gravity:#"),  # any order
        (f"{CARTPOLE}@costs=x>0.3:5:1, x_dot>1:0:0.990", f"{CARTPOLE}@costs=x>#:#,x_dot>#:0:0.99@noise=#,#,#,#"),
        # the noise per entry, whether one number, one per entry or the preset's own (no @noise)
        (CARTPOLE, f"{CARTPOLE}@noise=#,#,#,#"),
        (f"{CARTPOLE}@noise=0.02", f"{CARTPOLE}@noise=#,#,#,#"),
        (f"{CARTPOLE}@noise=0", f"{CARTPOLE}@noise=0,0,0,0"),
        ("gymnax:Pendulum-v1", "gymnax:Pendulum-v1@noise=#,#,0"),  # its preset: no noise on the applied torque
        ("gymnax:Pendulum-v1@noise=0.1", "gymnax:Pendulum-v1@noise=#,#,#"),
        ("gymnax:Pendulum-v1@noise=0.01,1e-45,-0", "gymnax:Pendulum-v1@noise=#,0,0"),  # subnormal: zero on the CPU
    ],
)
def test_the_program_key_blanks_the_numbers_the_program_takes(name, key):
    assert program_key(name) == key


def shape(env, algo="PPO-Lag"):
    return structure([preset(env, algo)])


def test_a_family_at_another_limit_or_width_has_the_same_structure_and_one_with_another_box_another():
    assert shape("inventory@cost_threshold=0.13") == shape("inventory@cost_threshold=0.5")
    assert shape(f"{CARTPOLE}@uncertain=gravity:0.1") == shape(f"{CARTPOLE}@uncertain=gravity:abs:2")
    assert shape(f"{CARTPOLE}@noise=0.1") == shape(f"{CARTPOLE}@noise=0.01")
    assert shape(f"{CARTPOLE}@costs=x>0.3:5,theta:0.1") == shape(f"{CARTPOLE}@costs=x>0.1:25,theta:0.3")
    assert shape(f"{CARTPOLE}@uncertain=gravity:0.1") != shape(f"{CARTPOLE}@uncertain=length:0.1")
    assert shape(f"{CARTPOLE}@noise=0.1") != shape(f"{CARTPOLE}@noise=0.1,0.1,0.1,0")  # one entry not drawn
    assert shape(CARTPOLE) == shape(f"{CARTPOLE}@noise=0.02") == shape(f"{CARTPOLE}@noise=0.1,0.2,0.3,0.4")
    assert shape(f"{CARTPOLE}@noise=1e-50") == shape(f"{CARTPOLE}@noise=0") != shape(f"{CARTPOLE}@noise=1e-3")
    assert envs.make(f"{CARTPOLE}@noise=1e-50")[0].noisy == ()  # robustify's float32: none drawn, as at 0
    # a std below float32's smallest normal number is zero in XLA's CPU code (its log-density was NaN): not drawn
    env, params = envs.make("gymnax:Pendulum-v1@noise=0.01,1e-45,0")
    assert env.noisy == (0,) and np.asarray(params.noise).tolist() == [np.float32(0.01), 0.0, 0.0]
    tiny, none = f"{CARTPOLE}@costs=x>0.3:1e-322:gamma", f"{CARTPOLE}@costs=x>0.3:0:gamma"  # B/H is 0 in float64
    assert shape(tiny) == shape(none) != shape(f"{CARTPOLE}@costs=x>0.3:5:gamma")
    assert envs.make(tiny)[0].cost_offsets is None  # as at a budget of 0: EpCost adds no share back
    assert shape("inventory") != shape("inventory@cost_threshold=0")  # the study's settings are its own


def test_the_program_numbers_are_the_parameters_arrays_and_the_named_limit():
    numbers = program_numbers("cartpole@velocity_limit=0.4", envs.make("cartpole@velocity_limit=0.4")[1])
    assert numbers["velocity_limit"] == np.float32(0.4) and numbers["velocity_limit"].dtype == np.float32
    assert {"xi", "xi_c", "kappa"} <= set(numbers) and "tau" not in numbers  # a constant of every limit
    _, params = envs.make(f"{CARTPOLE}@uncertain=gravity:abs:2@noise=0.05")
    numbers = program_numbers(f"{CARTPOLE}@uncertain=gravity:abs:2@noise=0.05", params)
    np.testing.assert_array_equal(numbers["kappa"], [2.0])
    np.testing.assert_array_equal(numbers["noise"], np.full(4, 0.05, np.float32))


def limited(limit: float):
    """A tiny cartpole MDPO-Lag run of 3 iterations at velocity limit ``limit``."""
    return [preset(f"cartpole@velocity_limit={limit}", "MDPO-Lag", total_timesteps=64 * 3, n_steps=16,
                   minibatch_size=16, epochs=2, eval_episodes=2, n_dual_episodes=2, dual_batch=32)]  # fmt: skip


def test_another_limit_compiles_nothing_and_trains_what_a_program_built_for_it_trains():
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(5), 2))
    chunked.clear()
    first = train_prepared(Prepared(limited(0.3), keys, True))[0]
    built = chunked.counts["built"]
    with Compiles() as compiles:
        prep = Prepared(limited(0.05), keys, True)
    assert chunked.counts["built"] == built, "another limit built another program"
    assert compiles.count == 0, f"{compiles.count} XLA compilation(s) for another limit"
    trained = train_prepared(prep)[0]
    np.testing.assert_array_equal(trained[0].state.env_params.velocity_limit, np.float32(0.05))
    with pytest.raises(AssertionError):  # the limit did enter: other costs, another multiplier
        assert_same(trained, first)
    assert_same(trained, reference(limited(0.05), keys))


def test_the_noise_given_per_entry_runs_the_program_of_the_presets_own_and_trains_what_its_own_would():
    """A ``gymnax:`` name without ``@noise`` (the preset's 1e-3 on every entry) and the same name with
    a noise per entry build one program: the second compiles nothing and trains what a program built
    for it alone trains (its noise an argument: it enters, the results differ from the first's)."""
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(5), 2))
    sizes = dict(total_timesteps=64 * 3, n_steps=16, minibatch_size=16, epochs=2, eval_episodes=2,
                 n_dual_episodes=2, dual_batch=32)  # fmt: skip
    noisy = lambda name: [preset(name, "MDPO-Lag", **sizes)]  # noqa: E731
    chunked.clear()
    first = train_prepared(Prepared(noisy(CARTPOLE), keys, True))[0]
    built = chunked.counts["built"]
    with Compiles() as compiles:
        prep = Prepared(noisy(f"{CARTPOLE}@noise=0.05,0.02,0.05,0.02"), keys, True)
    assert chunked.counts["built"] == built and compiles.count == 0, "another noise built another program"
    trained = train_prepared(prep)[0]
    np.testing.assert_array_equal(trained[0].state.env_params.noise[-1], np.float32([0.05, 0.02, 0.05, 0.02]))
    with pytest.raises(AssertionError):
        assert_same(trained, first)
    assert_same(trained, reference(noisy(f"{CARTPOLE}@noise=0.05,0.02,0.05,0.02"), keys))


def test_a_cost_limit_and_budget_are_read_from_the_parameters_the_step_is_given():
    """The environment of one cost's numbers, stepped with another's ``cost_limits`` and
    ``cost_shares``, gives the other's costs and episode costs: the numbers are not its constants."""
    from rcmdp_jax.rollout import episode_cost

    a, params_a = envs.make(f"{CARTPOLE}@costs=x>0.3:5,x_dot:1.5")
    b, params_b = envs.make(f"{CARTPOLE}@costs=x>0.02:20,x_dot:0.01")
    np.testing.assert_array_equal(params_b.cost_limits, np.float32([0.02, 0.01]))
    np.testing.assert_array_equal(params_b.cost_shares, np.float32([20 / b.episode_length, 0.0]))  # B/H; x_dot: none
    moved = params_a.replace(cost_limits=params_b.cost_limits, cost_shares=params_b.cost_shares)
    key = jax.random.PRNGKey(0)
    obs, state = b.reset(key, params_b)
    for t in range(5):
        step = jax.random.fold_in(key, t)
        out_a, out_b = a.step(step, state, t % 2, moved), b.step(step, state, t % 2, params_b)
        np.testing.assert_array_equal(out_a[-1]["costs"], out_b[-1]["costs"])
        np.testing.assert_array_equal(
            episode_cost(a, out_a[-1]["costs"], moved), episode_cost(b, out_b[-1]["costs"], params_b)
        )
        state = out_b[1]
    costs = np.asarray(out_b[-1]["costs"])  # |x| > 0.02 after a few pushes: 1 - B/H; |x_dot| - 0.01
    assert costs[0] in (np.float32(1 - 20 / b.episode_length), np.float32(-20 / b.episode_length)) and costs[1] != 0
    unmoved = a.step(step, out_b[1], 0, params_a)[-1]["costs"]
    assert not np.array_equal(unmoved, b.step(step, out_b[1], 0, params_b)[-1]["costs"])


def test_the_loop_layout_shares_its_programs_across_limits_and_starts_at_the_new_one():
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(5), 1))
    Prepared(limited(0.3), keys, False)
    built = chunked.counts["built"]
    prep = Prepared(limited(0.05), keys, False)
    assert chunked.counts["built"] == built, "another limit built another program"
    state, _ = prep.start(keys[0], 0)
    np.testing.assert_array_equal(state.env_params.velocity_limit, np.float32(0.05))


def test_a_checkpoint_written_before_the_cost_numbers_were_parameters_restores_them_from_the_environment(tmp_path):
    """A run trained before ``cost_limits`` and ``cost_shares`` were ``EnvParams`` fields (its
    numbers constants of its program) has no such leaves: they restore as the name's own."""
    from rcmdp_jax import checkpoint

    _, params = envs.make(f"{CARTPOLE}@costs=x>0.3:5,x_dot:1.5")
    xi = np.arange(8, dtype=np.float32).reshape(2, 4)
    lam = np.ones((2, 3), np.float32)
    checkpoint.save(tmp_path / "old", {"metrics": {"lam": lam}, "state": {"env_params": {"xi": xi}}})
    abstract = {"metrics": {"lam": lam},
                "state": {"env_params": {name: jax.ShapeDtypeStruct((2, 2), np.float32)
                                         for name in ("cost_limits", "cost_shares")} | {"xi": xi}}}  # fmt: skip
    restored = checkpoint.restore(tmp_path / "old", abstract, params)
    np.testing.assert_array_equal(restored["state"]["env_params"]["xi"], xi)
    np.testing.assert_array_equal(restored["state"]["env_params"]["cost_limits"], np.float32([[0.3, 1.5]] * 2))
    np.testing.assert_array_equal(restored["state"]["env_params"]["cost_shares"], [[np.float32(5 / 200), 0.0]] * 2)


@pytest.mark.slow
def test_the_program_key_starts_no_backend_so_a_script_may_split_the_cpu_after():
    """The key of a ``gymnax:`` name reads its noise from the environment built abstractly: a script
    that asks for it, then splits the CPU into two devices, gets them (a built environment would
    have started JAX's backend with one)."""
    import subprocess
    import sys

    code = ("from rcmdp_jax.envs.numbers import program_key; from rcmdp_jax import sharding; import jax; "
            f"k = program_key('{CARTPOLE}@noise=0.02'); ok = sharding.split_cpu(2); print(k, ok, jax.local_device_count())")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == [f"{CARTPOLE}@noise=#,#,#,#", "True", "2"], out.stdout + out.stderr[-2000:]

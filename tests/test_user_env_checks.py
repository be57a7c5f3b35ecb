"""Environments a user names or registers, checked without training a study: any gymnax
id on the command line; a missing module or Ctrl-C while the command starts; the checks on
registered learner settings; a registered name run.json cannot reopen, or another
environment under it; robustify on gymnax's CartPole; a budget rounded up; the sweep
helper; the CPU split; a FILE.py that imports a module beside it, changes the working
directory or is stopped (SIGTERM) as it loads; a changed width named by its field."""

import dataclasses
import json
import re
import signal
import subprocess
import sys
import textwrap
import warnings

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax import envs, preset, sweep
from rcmdp_jax.config import BudgetRounded
from rcmdp_jax.study import cli
from rcmdp_jax.study.plan import build_plan


def test_any_gymnax_id_on_the_command_line(capsys):
    args = cli.parse_args(["--env", "gymnax:MountainCar-v0", "--uncertain", "force=0.2,gravity=0.2",
                           "--costs", "velocity:0.04", "--algos", "PPO-Robust-Lag", "--seeds", "1"])  # fmt: skip
    plan = build_plan(args)
    (name,) = plan.envs
    env, params = envs.make(name)
    assert env.cost_names == ("|velocity|<=0.04",) and env.fields == ("force", "gravity")
    np.testing.assert_allclose(params.kappa, [0.2 * 0.001, 0.2 * 0.0025], rtol=1e-6)
    obs, state = env.reset(jax.random.key(0), params)
    info = env.step(jax.random.key(1), state, 1, params)[-1]
    assert info["costs"].shape == (1,)
    # without costs: --algos all runs the unconstrained six; a named constrained one is refused in one line
    bare = cli.parse_args(["--env", "gymnax:MountainCar-v0", "--uncertain", "force=0.2"])
    assert list(build_plan(bare).algos) == ["MCPMD", "PPO", "MDPO", "RMCPMD", "PPO-Robust", "MDPO-Robust"]
    assert "the 6 unconstrained algorithms run" in capsys.readouterr().err
    assert cli.main(["--env", "gymnax:MountainCar-v0", "--uncertain", "force=0.2", "--algos", "PPO,PPO-Lag"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no constraint costs, so PPO-Lag cannot run" in err[0], err
    assert cli.main(["--env", "gymnax:MountainCar-v0", "--seeds", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no preset box" in err[0] and "force, gravity" in err[0], err


def test_a_missing_user_module_is_one_line(tmp_path, capsys):
    assert cli.main(["--env", "nosuchmodule_xyz:make", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot load nosuchmodule_xyz:make: ModuleNotFoundError" in err[0], err
    assert not (tmp_path / "r").exists()
    # a module that calls sys.exit on import: one line too, not a silent exit 0
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(0)\n")
    assert cli.main(["--env", f"{tmp_path / 'exits.py'}:make", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exits.py:make: SystemExit" in err[0], err
    assert not (tmp_path / "r").exists()


def test_ctrl_c_while_the_command_starts_is_one_line(tmp_path, capsys, monkeypatch):
    """Ctrl-C during the imports, the checks or a user's module (before the study's own
    handler): one line and exit 130, no traceback (the study's: test_cli_study.py)."""
    from rcmdp_jax.study import console

    (tmp_path / "interrupts.py").write_text("raise KeyboardInterrupt\n")  # as if Ctrl-C hit its import
    monkeypatch.setattr(console, "split_cpu", lambda: None)  # this process's JAX is up already
    assert console.train(["--env", f"{tmp_path / 'interrupts.py'}:make", "--out", str(tmp_path / "r")]) == 130
    captured = capsys.readouterr()
    assert captured.err.strip() == "interrupted while starting: nothing was trained", captured.err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("learner,message", [
    ({"lr": 1e-3}, "learner['lr'] is a hyperparameter"),
    ({"hp": {"lr": 1e-3, "eta_x": 1.0}}, "unknown hyperparameter learner['hp']['eta_x']; allowed: adam_eps, alpha"),
    ({"ppo_epoch": 3}, "unknown learner key 'ppo_epoch'; allowed: adversary, budgets, critic_hidden"),
    ({"hp": {"ppo_epochs": 3}}, "learner['hp']['ppo_epochs'] is not a hyperparameter: write learner={'plugins': "
                                "{'ppo': {'epochs': ...}}}"),
    ({"hp": {"dropout": 0.1}}, "learner['hp']['dropout'] is not a hyperparameter: write learner={'dropout': ...}"),
    ({"plugins": {"ppo": 3}}, "learner['plugins'] must be a dict {plug-in name: {setting: value}}"),
    ({"budgets": {"short": 100}}, "learner['budgets'] must be"),
    ({"hp": {"lr": -1e-3}}, "learner['hp']: lr must be a finite number > 0"),
    ({"hp": {"lr": "1e-3"}}, "learner['hp']['lr'] must be a finite number in float32, got '1e-3'"),
    ({"hp": {"lr": 10**400}}, "learner['hp']['lr'] must be a finite number in float32"),
    ({"hp": {"lr": np.array([1e-3, 2e-3])}}, "learner['hp']['lr'] must be a finite number"),
    ({"hp": {"lr": True}}, "learner['hp']['lr'] must be a finite number"),
    ({"hp": {"gamma": 0.5}}, "learner['hp']['gamma'] is the environment's own"),
    ({"hp": {"target_kl": 0.1}}, "write learner={'plugins': {'ppo': {'target_kl': ...}}}"),
])  # fmt: skip
def test_registered_learner_settings_are_checked(learner, message):
    env = envs.make("gymnax:Pendulum-v1")[0]
    with pytest.raises(ValueError, match=re.escape(message)):
        envs.register("checked-pendulum", env, learner=learner)


def test_a_spec_may_set_the_initial_multiplier_and_alpha():
    env = envs.make("gymnax:Pendulum-v1")[0]
    envs.register("pendulum-lam-init", env, learner={"hp": {"lam_init": 1.0, "alpha": 0.5}})
    hp = preset("pendulum-lam-init", "PPO-Lag").hparams
    assert (hp.lam_init, hp.alpha) == (1.0, 0.5) and np.isclose(hp.gamma, env.gamma)  # gamma stays the env's


def test_robustify_recomputes_gymnax_cartpole_stored_fields():
    env = envs.robustify(gymnax.make("CartPole-v1")[0], {"masspole": 0.5, "length": 0.2},
                         {"x": lambda s, a, n, p: n.x[None]})  # fmt: skip
    p = env.default_params
    inner = env.apply_xi(p.replace(xi=p.xi * 1.4))
    assert np.isclose(inner.total_mass, inner.masscart + 0.1 * 1.4)
    assert np.isclose(inner.polemass_length, 0.1 * 1.4 * 0.5 * 1.4)
    with pytest.raises(ValueError, match="total_mass is computed by gymnax"):
        envs.robustify(gymnax.make("CartPole-v1")[0], {"total_mass": 0.1}, {"x": lambda s, a, n, p: n.x[None]})


def test_a_budget_that_batches_round_up_is_said():
    with pytest.warns(BudgetRounded, match="runs 1 iteration.* = 1600 steps"):
        preset("cartpole", "PPO-Lag", total_timesteps=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BudgetRounded)
        preset("cartpole", "PPO-Lag", total_timesteps=3200)  # whole batches: nothing to say


def test_sweep_gives_one_lane_per_value():
    """``sweep``'s lanes (that they train as runs alone: ``test_train_families.py``'s
    hyperparameter lanes): one array of the lanes per field, the others repeated."""
    cfg = preset("cartpole", "MDPO-Lag")
    lanes = sweep(cfg, lam_init=[0.0, 20.0])
    assert all(np.shape(x) == (2,) for x in jax.tree.leaves(lanes))
    np.testing.assert_array_equal(lanes.lam_init, [0.0, 20.0])
    np.testing.assert_array_equal(lanes.lr, np.float32([cfg.hparams.lr] * 2))
    with pytest.raises(ValueError, match="one length"):
        sweep(cfg, lam_init=[0, 1], lr=[1e-3])
    grid = sweep(cfg, grid=True, lam_init=[0, 1], lr=[1e-3, 1e-4, 1e-2])
    assert np.shape(grid.lr) == (6,)
    assert sorted(zip(grid.lam_init.tolist(), grid.lr.tolist())) == sorted(
        (a, b) for a in (0.0, 1.0) for b in np.float32([1e-3, 1e-4, 1e-2]).tolist()
    )


@pytest.mark.parametrize("values", [["a"], [1e-3, "2"], [1e-3, None], [True], [], [[1e-3]], [1e-3 + 1j],
                                    np.array([1], "m8[s]"), [10**400], [[1e-3], [1e-3, 2e-3]]])  # fmt: skip
def test_sweep_names_the_field_whose_values_are_not_numbers(values):
    cfg = preset("cartpole", "MDPO-Lag")
    with pytest.raises(ValueError, match=r"sweep: lr must be a non-empty list of real numbers, got "):
        sweep(cfg, lr=values)
    with pytest.raises(ValueError, match=r"sweep: grid must be True or False, got 'yes'"):
        sweep(cfg, grid="yes", lr=[1e-3])


@pytest.mark.slow  # starts another Python process (pyproject.toml's markers)
def test_the_cpu_split_from_a_script_or_one_line_why_not():
    """On a CPU host: a script that has not started JAX gets one device per core; one that
    has is told in one line why not and how (the environment variable)."""
    code = (
        "import jax, jax.numpy as jnp; {before}from rcmdp_jax.study.runtime import split_in_process; "
        "print(repr(split_in_process('auto', 4))); print(len(jax.devices('cpu'))); print(jax.default_backend())"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "XLA_FLAGS"}
    from rcmdp_jax.sharding import available_cores

    cores = available_cores()
    fresh = subprocess.run([sys.executable, "-c", code.format(before="")], capture_output=True, text=True, env=env)
    late = subprocess.run(
        [sys.executable, "-c", code.format(before="jnp.zeros(1); ")], capture_output=True, text=True, env=env
    )
    assert fresh.stdout.split("\n")[:2] == ["''", str(cores)], fresh.stderr[-2000:]
    said, count, backend = late.stdout.split("\n")[:3]
    assert count == "1", late.stderr[-2000:]
    if cores > 1 and backend == "cpu":
        assert "JAX started in this process before rcmdp_jax could split the CPU" in said
        assert f"xla_force_host_platform_device_count={cores}" in said
    else:  # one core, or an accelerator: nothing to split, nothing to say
        assert said == "''"
    # split_cpu() itself, called after importing gymnax (which starts the backends): the same line, once
    late_call = "import gymnax; from rcmdp_jax.study import console; console.split_cpu(); console.split_cpu()"
    late_call = subprocess.run([sys.executable, "-c", late_call], capture_output=True, text=True, env=env)
    expected = ["rcmdp_jax: note: JAX started"] if cores > 1 and backend == "cpu" else []
    said = [line[:28] for line in late_call.stdout.splitlines()]
    assert said == expected, (late_call.stdout, late_call.stderr[-2000:])


def test_a_run_of_a_name_only_its_script_registered_says_that_a_shell_cannot_reopen_it(tmp_path, monkeypatch, capsys):
    from rcmdp_jax.study import orchestrate
    from rcmdp_jax.study.notes import unsaved

    class Trained:  # the study itself is not this test's: the note comes before it
        def __init__(self, *args):
            pass

        def run(self):
            return 0

    monkeypatch.setattr(orchestrate, "Study", Trained)
    args = ["--algos", "PPO", "--seeds", "1", "--devices", "1"]
    try:
        envs.register("only-in-this-script", envs.spec("cartpole"))
        assert unsaved(["only-in-this-script", "cartpole"], {}) == ["only-in-this-script"]
        assert unsaved(["only-in-this-script"], {"only-in-this-script": {"module": "m", "attr": "a"}}) == []
        assert cli.main(["--env", "only-in-this-script", *args, "--out", str(tmp_path / "a")]) == 0
        assert "note: 'only-in-this-script' was registered by this script; `rcmdp report`" in capsys.readouterr().out
        assert cli.main(["--env", "cartpole", *args, "--out", str(tmp_path / "b")]) == 0
        assert "note:" not in capsys.readouterr().out
    finally:
        envs._REGISTERED.pop("only-in-this-script", None)  # the name is this test's alone


def test_another_environment_under_the_name_a_run_was_trained_on_is_refused():
    """run.json describes each user environment (its spec's numbers, every parameter); a
    --resume, --eval-only or report with another environment under that name (another
    box registered by the script, an edited file) is one line naming what differs."""
    from rcmdp_jax.study.user_code import restore_envs

    args = ["--env", "pendulum-of-a-script", "--algos", "PPO", "--seeds", "1"]
    try:
        envs.register("pendulum-of-a-script", envs.spec("gymnax:Pendulum-v1"))
        plan = json.loads(build_plan(cli.parse_args(args)).to_json())  # as run.json keeps it
        described = plan["env_descriptions"]["pendulum-of-a-script"]
        # the preset's box, ±10 % of g = 10, m = 1, l = 1, as absolute half-widths
        assert described["params.kappa"] == pytest.approx([1.0, 0.1, 0.1]) and described["cost_names"] == ["speed"]
        restore_envs(plan)  # the same environment: accepted
        # another n_test in the spec: refused, unless the run chose its own with --n-test
        envs.register("pendulum-of-a-script", dataclasses.replace(envs.spec("gymnax:Pendulum-v1"), n_test=7))
        with pytest.raises(ValueError, match=r"\(n_test differs\)"):
            restore_envs(plan)
        restore_envs({**plan, "n_test": 3})
        # a hand-edited description compares as JSON: true is not 1.0
        envs.register("pendulum-of-a-script", envs.spec("gymnax:Pendulum-v1"))
        edited = json.loads(json.dumps(plan))
        xi_c = edited["env_descriptions"]["pendulum-of-a-script"]["params.xi_c"]
        assert xi_c[1] == 1.0
        xi_c[1] = True
        with pytest.raises(ValueError, match=r"\(params.xi_c \(m: true -> 1\) differs\)"):
            restore_envs(edited)
        envs.register("pendulum-of-a-script", envs.spec("gymnax:Pendulum-v1@uncertain=g:0.1,m:0.5,l:0.1"))
        with pytest.raises(ValueError, match=r"'pendulum-of-a-script' is not the one this run was trained on "
                                             r"\(params.kappa \(m: 0.1 -> 0.5\) differs\)"):  # fmt: skip
            restore_envs(plan)
    finally:
        envs._REGISTERED.pop("pendulum-of-a-script", None)  # the name is this test's alone


def test_a_registered_gymnax_spec_is_not_built_inside_the_size_estimate():
    """The size estimate counts a registered environment's kernels under ``jax.eval_shape``;
    the gymnax instance built there must not be kept (its arrays are tracers), or the
    study's programs later close over them (a run of ``--env NAME`` failed at its start)."""
    from rcmdp_jax.sizes import kernel_count

    envs.register("gymnax_cartpole_again", envs.spec("gymnax:CartPole-v1"))
    assert kernel_count("gymnax_cartpole_again") == kernel_count("gymnax:CartPole-v1")
    for spec_name in ("gymnax_cartpole_again", "gymnax:CartPole-v1"):
        leaves = jax.tree.leaves(envs.make(spec_name)[1])
        assert leaves and not any(isinstance(x, jax.core.Tracer) for x in leaves), spec_name


# ------------------------------------------------------------------ a FILE.py environment imports a module beside it
def test_a_file_environment_imports_a_module_beside_it(tmp_path, monkeypatch):
    from rcmdp_jax.study import user_code

    monkeypatch.setattr(sys, "path", list(sys.path))  # whatever the load adds goes with the test
    (tmp_path / "thermo_parts.py").write_text('from rcmdp_jax import envs\nSPEC = envs.spec("gymnax:CartPole-v1")\n')
    (tmp_path / "thermo.py").write_text("from thermo_parts import SPEC\n\ndef make():\n    return SPEC\n")
    name, record = user_code.load_spec(f"{tmp_path / 'thermo.py'}:make")  # from another working directory
    assert name == "thermo.py:make" and record["file"] == str(tmp_path / "thermo.py")
    assert envs.spec(name).cost_names == envs.spec("gymnax:CartPole-v1").cost_names


# ------------------------------------------------------------------ a module that changes directory or is stopped as it loads; a changed width
MOVER = textwrap.dedent("""
    import os
    from rcmdp_jax import envs

    os.chdir({elsewhere!r})  # a module that changes the working directory as it loads
    make = lambda: envs.spec("gymnax:CartPole-v1")
""")


def test_a_module_that_changes_directory_cannot_move_the_run_folder(tmp_path, monkeypatch, capsys):
    from rcmdp_jax.study import orchestrate

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), elsewhere.mkdir()
    (home / "mover.py").write_text(MOVER.format(elsewhere=str(elsewhere)))
    ran = []

    class NoStudy:  # the folder is what is checked: nothing trains
        def __init__(self, plan, folder, *args):
            ran.append(folder.root)

        def run(self):
            return 0

    monkeypatch.setattr(orchestrate, "Study", NoStudy)
    monkeypatch.chdir(home)
    assert cli.main(["--env", "mover.py:make", "--algos", "PPO", "--seeds", "1", "--out", "r_u16"]) == 0
    assert ran == [home / "r_u16"] and (home / "r_u16" / "run.json").is_file()
    assert not (elsewhere / "r_u16").exists() and f"-> {home / 'r_u16'}" in capsys.readouterr().out
    monkeypatch.chdir(home)
    assert cli.main(["--env", "mover.py:make", "--algos", "PPO", "--seeds", "1"]) == 0  # runs/<timestamp>
    assert ran[1].parent == home / "runs" and not (elsewhere / "runs").exists()


def test_sigterm_while_a_module_loads_is_one_line_and_exit_143(tmp_path, capsys, monkeypatch):
    from rcmdp_jax.study import console

    (tmp_path / "stopped.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    monkeypatch.setattr(console, "split_cpu", lambda: None)

    def unhandled(*_):
        raise RuntimeError("SIGTERM not handled by the command")

    previous = signal.signal(signal.SIGTERM, unhandled)  # what the test process would do instead of dying
    try:
        assert console.train(["--env", f"{tmp_path / 'stopped.py'}:make", "--out", str(tmp_path / "r")]) == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert capsys.readouterr().err.strip() == "interrupted while starting: nothing was trained"
    assert signal.getsignal(signal.SIGTERM) is previous and not (tmp_path / "r").exists()


def test_a_changed_width_names_its_field():
    import gymnax

    from rcmdp_jax.study.user_code import check_described, description

    speed = lambda s, a, n, p: jnp.abs(n.theta_dot)[None] - 1.5  # noqa: E731
    envs.register(
        "probe-pendulum", envs.robustify(gymnax.make("Pendulum-v1")[0], {"m": 0.2, "l": 0.3}, {"speed": speed})
    )
    was = description("probe-pendulum")
    was["params.kappa"] = [was["params.kappa"][0], 0.6]  # l's half-width 0.3 (x 1.0) was 0.6
    with pytest.raises(ValueError, match=r"params.kappa \(l: 0.6 -> 0.3\) differs"):
        check_described("probe-pendulum", {"probe-pendulum": was})

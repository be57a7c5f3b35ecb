"""A user's own environment end to end through the console command (``user_run``), then
the report and --eval-only in fresh processes; what run.json records of it (a folder of an
environment this process cannot rebuild, or another one under its name, is refused); a
file path as --env; run folder names; the console commands installed."""

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rcmdp_jax import envs
from rcmdp_jax.study import cli
from rcmdp_jax.study.plan import build_plan

BIN = Path(sys.executable).parent


POINTMASS = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from flax import struct
    from gymnax.environments import environment, spaces
    from rcmdp_jax import envs

    @struct.dataclass
    class State(environment.EnvState):
        x: jax.Array
        v: jax.Array
        time: int

    @struct.dataclass
    class Params(environment.EnvParams):
        mass: float = 1.0
        friction: float = 0.1
        max_steps_in_episode: int = 20

    class PointMass(environment.Environment):
        @property
        def default_params(self):
            return Params()

        def step_env(self, key, state, action, params):
            v = state.v + 0.05 * (jnp.where(action == 1, 1.0, -1.0) - params.friction * state.v) / params.mass
            new = State(x=state.x + 0.05 * v, v=v, time=state.time + 1)
            return self.get_obs(new), new, -jnp.abs(new.x), self.is_terminal(new, params), {}

        def reset_env(self, key, params):
            s = State(x=jax.random.uniform(key, (), minval=-1.0, maxval=1.0), v=jnp.zeros(()), time=0)
            return self.get_obs(s), s

        def get_obs(self, state, params=None, key=None):
            return jnp.stack([state.x, state.v])

        def is_terminated(self, state, params):
            return jnp.abs(state.x) > 3.0

        def is_terminal(self, state, params):
            return self.is_terminated(state, params) | (state.time >= params.max_steps_in_episode)

        def action_space(self, params=None):
            return spaces.Discrete(2)

        def observation_space(self, params):
            return spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32)

    def make():
        speed = lambda s, a, n, p: jnp.abs(n.v)[None] - 0.02
        env = envs.robustify(PointMass(), uncertain={"mass": 0.3, "friction": 0.5}, costs={"speed": speed}, noise=1e-2)
        return {"env": env, "learner": {"hp": {"eta_xi": 1e-4}}, "n_test": 2}
""")


SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


def _run(args, cwd):
    out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def user_run(tmp_path_factory):
    """``rcmdp --env usermass:make`` from the module's folder: PPO-Lag, 1 seed, 2 batches."""
    assert (BIN / "rcmdp").exists(), "the console command rcmdp is not installed here: pip install -e ."
    home = tmp_path_factory.mktemp("user")
    (home / "usermass.py").write_text(POINTMASS)
    out = home / "run"
    _run([str(BIN / "rcmdp"), "--env", "usermass:make", "--algos", "PPO-Lag", "--seeds", "2", "--n-test", "2",
          "--set", "total_timesteps=3200", "--plots", "off", "--out", str(out)], home)  # fmt: skip
    return out


@pytest.mark.slow
def test_a_user_environment_trains_reports_and_evaluates_in_fresh_processes(user_run, tmp_path):
    plan = json.loads((user_run / "run.json").read_text())
    assert plan["envs"] == ["usermass:make"] and plan["env_sources"]["usermass:make"]["module"] == "usermass"
    folders = [p.name for p in user_run.rglob("*") if p.is_dir()]
    assert "usermass_make" in folders and all(SAFE.match(n) for n in folders), folders
    results = user_run / "usermass_make" / "PPO-Lag" / "test_results.npz"
    before = dict(np.load(results))
    summary = (user_run / "usermass_make" / "summary.md").read_text()
    results.unlink()
    elsewhere = tmp_path  # a fresh process in another folder: the module is found from run.json
    _run([sys.executable, "-m", "rcmdp_jax", "--eval-only", str(user_run)], elsewhere)
    after = dict(np.load(results))
    np.testing.assert_array_equal(after["V"], before["V"])
    (user_run / "usermass_make" / "summary.md").unlink()
    report = _run([str(BIN / "rcmdp"), "report", str(user_run)], elsewhere)
    assert "PPO-Lag" in report.stdout and (user_run / "usermass_make" / "summary.md").read_text() == summary


@pytest.mark.slow
def test_summary_says_whether_the_constraint_is_kept_by_hand(user_run):
    z = np.load(user_run / "usermass_make" / "PPO-Lag" / "test_results.npz")
    C = z["C"][..., 0].astype(np.float64)  # seed, level, direction, episode
    nominal = C[:, 0].mean()
    kernels = C.mean(axis=(0, 3))
    lvl, d = np.unravel_index(np.argmax(kernels), kernels.shape)

    def broken_count(per_seed):  # above 0 by more than two standard errors over its episodes
        m, se = per_seed.mean(1), per_seed.std(1, ddof=1) / np.sqrt(per_seed.shape[1])
        return int(((m > 0) & (m > 2 * se)).sum())

    broken = broken_count(C[:, lvl, d])
    gamma_c = float(z["gamma_c"][0])  # the constraint's discount: the environment's gamma (a user's cost)
    row = f"| PPO-Lag | speed | C <= 0 | {gamma_c:.3g} | {nominal:.3f} | {kernels[lvl, d]:.3f} |"
    summary = (user_run / "usermass_make" / "summary.md").read_text()
    assert row in summary, summary
    for word in (
        "R_pen = Return - lambda_max",
        "R_pen± = Return - lambda_max * sum_j C_j",
        "min:",
        "Bold: the best mean",
    ):
        assert word in summary
    js = json.loads((user_run / "usermass_make" / "summary.json").read_text())["PPO-Lag"]["constraints"]["speed"]
    assert js["worst_seeds_broken"] == broken and np.isclose(js["worst"], kernels[lvl, d])


@pytest.mark.slow
def test_a_folder_of_an_environment_this_process_cannot_rebuild_is_one_line(user_run, tmp_path, capsys):
    from rcmdp_jax.study.console import report

    out = tmp_path / "copy"
    shutil.copytree(user_run, out)
    plan = json.loads((out / "run.json").read_text())
    plan["envs"] = ["pointmass-of-a-script"]  # registered by a script, no env_sources
    plan["configs"] = {"pointmass-of-a-script": plan["configs"]["usermass:make"]}
    (out / "run.json").write_text(json.dumps({**plan, "env_sources": {}}))
    assert report([str(out)]) == 2
    assert cli.main(["--eval-only", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("'pointmass-of-a-script' was registered by the script" in e for e in err), err


@pytest.mark.slow
def test_an_edited_environment_is_refused_before_anything_is_rewritten(user_run, tmp_path, capsys):
    from rcmdp_jax.study.console import report

    out = tmp_path / "copy"
    shutil.copytree(user_run, out)
    plan = json.loads((out / "run.json").read_text())
    assert len(plan["env_descriptions"]["usermass:make"]["params.kappa"]) == 2  # mass and friction
    plan["env_descriptions"]["usermass:make"]["params.kappa"] = [0.5, 0.5]  # as if the module's box had changed
    (out / "run.json").write_text(json.dumps(plan))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert report([str(out)]) == 2
    assert cli.main(["--eval-only", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("'usermass:make' is not the one this run was trained on (params.kappa" in e
                                 for e in err), err  # fmt: skip
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # run.json's descriptions or sources edited: one line, never a check turned off or a traceback
    edits = {
        "its description deleted": ("env_descriptions", {}, "env_descriptions has no description of 'usermass:make'"),
        "descriptions not a dict": ("env_descriptions", ["x"], "env_descriptions has no description"),
        "a source not a record": ("env_sources", {"usermass:make": 5}, "env_sources must map each environment"),
    }
    for what, (key, value, said) in edits.items():
        (out / "run.json").write_text(json.dumps({**plan, key: value}))
        assert report([str(out)]) == 2, what
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], (what, err)


def test_a_file_path_loads_and_records_its_absolute_path(tmp_path, monkeypatch, capsys):
    (tmp_path / "fileenv.py").write_text(POINTMASS)
    monkeypatch.chdir(tmp_path)
    plan = build_plan(cli.parse_args(["--env", "fileenv.py:make", "--algos", "PPO", "--seeds", "1"]))
    assert plan.envs == ("fileenv.py:make",)
    assert plan.env_sources["fileenv.py:make"] == {"file": str(tmp_path / "fileenv.py"), "attr": "make"}
    env, params = envs.make("fileenv.py:make")
    assert env.cost_names == ("speed",) and env.fields == ("mass", "friction")
    # a budget that whole batches round up is a note on the command line too
    build_plan(cli.parse_args(["--algos", "PPO", "--seeds", "1", "--set", "total_timesteps=1000"]))
    assert "note: --set total_timesteps=1000: PPO runs 1 iteration(s) of 1600" in capsys.readouterr().err


def test_folder_names_are_plain():
    from rcmdp_jax.study.run_plan import check_folder_names, folder_name

    name = "gymnax:MountainCarContinuous-v0@uncertain=power:0.2,gravity:abs:0.001@costs=speed"
    assert folder_name(name) == "gymnax_MountainCarContinuous-v0_uncertain_power_0.2_gravity_abs_0.001_costs_speed"
    assert SAFE.match(folder_name("MDPO-Robust-Lag:restart-batch@lam_init=0"))
    with pytest.raises(ValueError, match="would share the folder"):
        check_folder_names(["A:b", "A@b"])


@pytest.mark.slow  # starts another Python process (pyproject.toml's markers)
def test_console_commands_are_installed():
    for cmd in ("rcmdp", "rcmdp-report"):
        assert shutil.which(cmd, path=str(BIN)), f"{cmd} is not installed: pip install -e ."
    out = subprocess.run([str(BIN / "rcmdp"), "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "gymnax:ID" in out.stdout and "FILE.py:NAME" in out.stdout

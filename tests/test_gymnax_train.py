"""The 14 algorithms on ``gymnax:`` presets, through the API and the command (kept apart
from ``test_gymnax.py`` so the two xdist workers share the compile work)."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax import ALGORITHMS, envs, preset
from rcmdp_jax.study import cli

pytestmark = pytest.mark.slow  # the quick tier leaves them out (pyproject.toml's markers)


def test_every_algorithm_trains_a_few_iterations_on_the_discrete_preset_through_the_api():
    """Every algorithm of the grid as a member of its family, a few iterations, on
    CartPole-v1 (the continuous preset, Pendulum-v1, through the command: the next test)."""
    from rcmdp_jax.family import group, make_family

    name = "gymnax:CartPole-v1"

    def tiny(algo):
        if "MCPMD" in algo:
            return preset(name, algo, total_timesteps=12, ltma_iterations=2, eval_episodes=2)
        return preset(name, algo, total_timesteps=128, n_steps=32, minibatch_size=32, epochs=1,
                      ltma_iterations=2, eval_episodes=2)  # fmt: skip

    configs = {a: tiny(a) for a in ALGORITHMS}
    for names in group(configs):
        family = make_family([configs[a] for a in names])
        result = jax.jit(jax.vmap(family, in_axes=(None, 0)))(jax.random.key(1), jnp.arange(len(names)))
        for i, algo in enumerate(names):
            m = {k: np.asarray(v[i]) for k, v in result.metrics.items()}
            active = m["active"] > 0
            assert active.sum() >= 1, algo
            for k in ("policy_loss", "critic_loss", "lam", "xi"):
                assert np.all(np.isfinite(m[k][active])), (algo, k)
            xi, kappa = m["xi"][active], np.asarray(envs.make(name)[1].kappa)
            xi_c = np.asarray(envs.make(name)[1].xi_c)
            assert np.all(np.abs(xi - xi_c) <= kappa * (1 + 1e-5)), algo  # LTMA stays in the box
            if configs[algo].robust and "MCPMD" not in algo:  # the adversary ran (its moves: test_adversary.py)
                assert m["ltma_steps"][active][-1] > 0, algo


def test_the_cli_trains_every_algorithm_on_a_gymnax_preset_with_a_chosen_box_and_cost(tmp_path, capsys):
    """All 14 algorithms on the continuous preset, a few iterations, through the command's
    logic: a chosen box and two costs, checkpoints, the robustness sweep and the report (tables only:
    ``--plots off``)."""
    out = tmp_path / "run"
    args = ["--env", "gymnax:Pendulum-v1", "--uncertain", "g=0.1,m=abs:0.2", "--costs", "torque,speed",
            "--seeds", "2", "--steps", "64", "--n-test", "2", "--devices", "1",
            "--set", "n_steps=16", "--set", "minibatch_size=16", "--set", "epochs=1", "--set", "ltma_iterations=2",
            "--set", "eval_episodes=2", "--plots", "off", "--out", str(out)]  # fmt: skip
    assert cli.main(args) == 0
    name = "gymnax:Pendulum-v1@uncertain=g:0.1,m:abs:0.2@costs=torque,speed"
    folder = out / "gymnax_Pendulum-v1_uncertain_g_0.1_m_abs_0.2_costs_torque_speed"  # run.json keeps the name
    assert json.loads((out / "run.json").read_text())["envs"] == [name]
    summary = (folder / "summary.md").read_text()
    assert "Aggregate statistics" in summary and not list(folder.glob("*.png"))  # --plots off: the tables only
    for algo in ALGORITHMS:
        res = np.load(folder / algo / "test_results.npz")
        assert res["V"].shape == (2, 11, 4, 2) and res["C"].shape == (2, 11, 4, 2, 2), algo
        assert np.all(np.isfinite(res["V"])) and np.all(np.isfinite(res["C"])), algo
        assert f"| {algo} |" in summary, algo
        xi = np.load(folder / algo / "train_metrics.npz")["xi"]
        assert np.all(np.abs(xi - [10.0, 1.0]) <= np.array([1.0, 0.2]) * (1 + 1e-5)), algo
    assert dataclasses.is_dataclass(envs.make(name)[0].inner_params)

"""make_train's lanes: vmap over seeds, hyperparameters and kernels equals each run alone;
every preset of the grid trained as members of its family program (sample counts, no
NaNs), a member equal to its algorithm alone; the golden numbers that pin them."""

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny
from train_helpers import SEEDS, alone

from rcmdp_jax import ALGORITHMS, envs, make_train, preset, sweep


def test_vmap_over_seeds_equals_each_seed_alone_and_is_deterministic():
    cfg = tiny(algo="MDPO-Robust-Augmented-Lag")  # every phase: dual, LTMA, the augmented rule
    train = make_train(cfg)
    batched = jax.jit(jax.vmap(train))(SEEDS)
    for i in range(len(SEEDS)):
        single = alone(cfg, SEEDS[i])
        for key in ("eval_return", "lam", "xi", "policy_loss"):
            np.testing.assert_allclose(batched.metrics[key][i], single.metrics[key], rtol=1e-4, atol=1e-5)
    again = jax.jit(jax.vmap(train))(SEEDS)
    for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(again)):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(batched.metrics["policy_loss"][0], batched.metrics["policy_loss"][1])


def test_vmap_over_hyperparameters_and_kernels_in_one_call():
    """Lanes that differ in alpha or in the training kernel, in one vmapped call (the
    hyperparameter lanes from ``rcmdp_jax.sweep``): each lane equals its run alone, and each
    of the two changes the numbers."""
    cfg = tiny(algo="MDPO")
    env, params = envs.make("cartpole")
    corners = jax.tree.map(lambda x: x[-1, :2], env.test_kernels([0.0, 1.0], params))
    alphas, corner = [0.5, 3.0, 0.5], np.array([0, 0, 1])  # lane 1: another alpha; lane 2: another kernel
    hp = sweep(cfg, alpha=alphas)
    assert all(np.shape(x) == (3,) for x in jax.tree.leaves(hp)) and float(hp.lr[1]) == np.float32(cfg.hparams.lr)
    kernels = jax.tree.map(lambda x: x[corner], corners)
    result = jax.jit(jax.vmap(make_train(cfg), in_axes=(None, 0, 0)))(SEEDS[0], hp, kernels)
    np.testing.assert_allclose(result.metrics["alpha"][:, 0], alphas)
    np.testing.assert_allclose(result.state.env_params.xi, kernels.xi)
    for i in range(3):
        single = alone(cfg, SEEDS[0], cfg.hparams.replace(alpha=alphas[i]), jax.tree.map(lambda x, i=i: x[i], kernels))
        for key in ("policy_loss", "episode_costs"):
            np.testing.assert_allclose(result.metrics[key][i], single.metrics[key], rtol=1e-4, atol=1e-5, err_msg=key)
    assert not np.allclose(result.metrics["policy_loss"][0], result.metrics["policy_loss"][1])
    assert not np.allclose(result.metrics["eval_costs"][0], result.metrics["eval_costs"][2])


@pytest.mark.slow
def test_sample_counts():
    cfg = tiny()
    m = preset_member("cartpole", cfg.name)  # its family's lane: its numbers alone (the family test)
    np.testing.assert_allclose(m["policy_steps"], cfg.batch_size * np.arange(1, cfg.num_iterations + 1))
    assert np.all(np.diff(m["dual_steps"]) > 0) and np.all(np.diff(m["ltma_steps"]) > 0)
    assert np.all(np.asarray(m["ltma_steps"][0]) <= cfg.option("ltma_iterations") * cfg.option("ltma_horizon"))


@functools.cache
def preset_families(env_name: str) -> tuple[dict, dict]:
    """Every algorithm of the grid on ``env_name``, ``tiny``, trained as members of its
    family on ``SEEDS[0]`` (one compile per family): ``(configs, {members: result})``.
    Trained once per test run; the preset and the family tests assert on it."""
    from rcmdp_jax.family import group, make_family

    configs = {a: tiny(env_name, a) for a in ALGORITHMS}
    results = {}
    for names in group(configs):
        family = make_family([configs[a] for a in names])
        results[tuple(names)] = jax.jit(jax.vmap(family, in_axes=(None, 0)))(SEEDS[0], jnp.arange(len(names)))
    return configs, results


def preset_member(env_name: str, algo: str) -> dict:
    """The metrics of ``algo``'s lane in ``preset_families(env_name)``."""
    names, result = next((k, r) for k, r in preset_families(env_name)[1].items() if algo in k)
    return {k: np.asarray(v[names.index(algo)]) for k, v in result.metrics.items()}


@pytest.mark.slow
@pytest.mark.parametrize("env_name", envs.ENV_NAMES)
def test_every_preset_compiles_and_runs_without_nans(env_name):
    """Every algorithm of the grid, 3 iterations, trained as members of its family (one
    compile per family; a member's numbers are its algorithm's, see the family test)."""
    assert all(preset(env_name, a).name == a for a in ALGORITHMS)
    pinned = {}
    for names, result in preset_families(env_name)[1].items():
        for i, algo in enumerate(names):
            m = {k: np.asarray(v[i]) for k, v in result.metrics.items()}
            active = m["active"] > 0
            assert active.sum() >= 3, (env_name, algo)
            for key, value in m.items():
                if not key.startswith("eval") and not key.startswith("episode_"):
                    assert np.all(np.isfinite(value[active])), (env_name, algo, key)
            evaluated = np.isfinite(m["eval_return"])
            assert evaluated[0] and np.all(evaluated <= active), (env_name, algo)
            params = jax.tree.map(lambda x, i=i: x[i], result.state.params)
            assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(params)), (env_name, algo)
            pinned[algo] = golden_summary(m, params)
    check_golden(env_name, pinned)


GOLDEN = Path(__file__).with_name("golden") / "presets.json"


GOLDEN_METRICS = ("lam", "lam_tilde", "c_hat", "xi", "policy_loss", "critic_loss", "approx_kl", "alpha",
                  "eval_return", "policy_steps", "dual_steps", "ltma_steps", "dual_updates")  # fmt: skip


def golden_summary(m: dict, params) -> dict:
    """What the golden file pins of one member's short run: the listed metrics of every
    iteration and the L1 norm of each parameter array."""
    out = {k: np.asarray(m[k], np.float64).tolist() for k in GOLDEN_METRICS}
    out["param_l1"] = [float(np.abs(np.asarray(x, np.float64)).sum()) for x in jax.tree.leaves(params)]
    return out


def check_golden(env_name: str, pinned: dict) -> None:
    """Compare with ``golden/presets.json``: pinned numbers, so that a refactor that moves
    any algorithm's numbers beyond float rounding fails. ``RCMDP_WRITE_GOLDEN=1`` rewrites this domain's entry
    (only for a deliberate change of the method, said in the commit)."""
    import json
    import os

    table = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if os.environ.get("RCMDP_WRITE_GOLDEN") == "1":
        table[env_name] = pinned
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(table, indent=1, sort_keys=True, allow_nan=True))
        return
    assert env_name in table, f"no golden numbers for {env_name}: run once with RCMDP_WRITE_GOLDEN=1"
    assert sorted(table[env_name]) == sorted(pinned)
    for algo, want in table[env_name].items():
        assert_golden(f"{env_name} {algo}", pinned[algo], want)


def assert_golden(what: str, got: dict, want: dict) -> None:
    """Every pinned number of one run within float rounding of the golden file's."""
    assert sorted(got) == sorted(want), what
    for key, value in want.items():
        np.testing.assert_allclose(
            np.asarray(got[key], np.float64), np.asarray(value, np.float64), rtol=2e-4, atol=2e-5,
            err_msg=f"{what} {key}",
        )  # fmt: skip


def test_the_two_mdpo_ends_alone_keep_their_golden_numbers():
    """The quick tier's guard on the numbers (the slow tier pins every algorithm of every
    domain above): MDPO and MDPO-Robust-Augmented-Lag on CartPole, trained alone through
    the programs the vmap tests compiled; a member's numbers are its algorithm's alone
    (``test_family_member_equals_its_algorithm_alone``)."""
    import json

    table = json.loads(GOLDEN.read_text())["cartpole"]
    for algo in ("MDPO", "MDPO-Robust-Augmented-Lag"):
        result = alone(tiny(algo=algo), SEEDS[0])
        m = {k: np.asarray(v) for k, v in result.metrics.items()}
        assert_golden(f"cartpole {algo} alone", golden_summary(m, result.state.params), table[algo])


@pytest.mark.slow
def test_family_member_equals_its_algorithm_alone():
    """A member of the family program (the preset test's MDPO family on CartPole) gives
    its algorithm's numbers trained alone; the members really differ."""
    from rcmdp_jax.family import group, make_family

    names = ["MDPO", "MDPO-Lag", "MDPO-Robust-Augmented-Lag", "MDPO-Robust"]
    configs = {a: tiny(algo=a) for a in names}
    configs["PPO-Lag"] = tiny(algo="PPO-Lag")
    assert group(configs) == [names, ["PPO-Lag"]]
    presets, results = preset_families("cartpole")
    members, batched = next((list(k), r) for k, r in results.items() if "MDPO" in k)
    assert all(configs[a] == presets[a] for a in names)
    row = {a: members.index(a) for a in names}
    for a in ("MDPO", "MDPO-Robust-Augmented-Lag"):  # the two ends; the others differ only in flags
        single = alone(configs[a], SEEDS[0])
        for key in ("eval_return", "lam", "xi", "policy_loss", "dual_steps", "ltma_steps", "c_hat"):
            got = np.asarray(batched.metrics[key][row[a]])
            np.testing.assert_allclose(got, single.metrics[key], rtol=1e-4, atol=1e-5, err_msg=f"{a} {key}")
    # the members really differ: no LTMA samples without -Robust, no dual samples without -Lag
    steps = np.asarray(batched.metrics["ltma_steps"][:, -1])[[row[a] for a in names]]
    np.testing.assert_array_equal(steps > 0, [False, False, True, True])
    dual = np.asarray(batched.metrics["dual_steps"][:, -1])[[row[a] for a in names]]
    np.testing.assert_array_equal(dual > 0, [False, True, True, False])
    with pytest.raises(ValueError, match="may differ only in"):
        make_family([configs["MDPO"], configs["PPO-Lag"]])

"""The episode cost EpCost (the undiscounted sum of the per-step cost over an episode; of an
indicator, the count of unsafe steps) and the per-constraint cost discount gamma_c, against
hand counts and NumPy sums of the episodes' own states."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rcmdp_jax.envs.gymnax_any import limit_name

from rcmdp_jax import checkpoint, envs
from rcmdp_jax.advantages import discounted_returns
from rcmdp_jax.dual import batch_readings
from rcmdp_jax.evaluate import policy_sweep
from rcmdp_jax.rollout import (
    collect_rollout,
    cost_discounts,
    episode_values,
    init_accumulator,
    sample_episode,
    value_discounts,
)
from rcmdp_jax.study import report

LIMIT, BUDGET, SPEED = 0.01, 5.0, 0.02
# MountainCar-v0 with two constraints: at most 5 steps an episode with |velocity| > 0.01 (an
# indicator: gamma_c = 1 by default) and |velocity| <= 0.02 (a signed cost: the training gamma)
NAME = envs.gymnax_name("gymnax:MountainCar-v0", "gravity=0.1", f"velocity>{LIMIT}:{BUDGET:g},velocity:{SPEED}")


def push_right(obs, key):
    return 2


def by_hand(s_next, alive, horizon, gamma):
    """``(EpCost [2], C [2])`` of one episode from its next states' velocities (NumPy)."""
    v = np.abs(np.asarray(s_next, np.float64)[:, 1])
    alive = np.asarray(alive, np.float64)
    unsafe = (v > LIMIT).astype(np.float64)
    indicator, signed = unsafe - BUDGET / horizon, v - SPEED
    ep_cost = np.array([np.sum(alive * unsafe), np.sum(alive * signed)])
    c = np.array([np.sum(alive * indicator), np.sum(alive * gamma ** np.arange(len(v)) * signed)])
    return ep_cost, c


def test_indicator_defaults_to_the_episode_count_and_presets_keep_gamma():
    env, _ = envs.make(NAME)
    assert env.cost_gammas[0] == 1.0 and np.isnan(env.cost_gammas[1])
    assert env.cost_offsets == pytest.approx((BUDGET / env.episode_length, 0.0))
    np.testing.assert_allclose(np.asarray(cost_discounts(env, 0.99)), [1.0, 0.99], rtol=1e-7)
    np.testing.assert_allclose(np.asarray(value_discounts(env, 0.99)), [0.99, 1.0, 0.99], rtol=1e-7)
    # the presets' continuous costs and the study's domains: the training gamma, the same program as ever
    for name in ("gymnax:Pendulum-v1", "cartpole", "inventory"):
        env, _ = envs.make(name)
        assert env.cost_gammas is None and cost_discounts(env, 0.95) == 0.95 and value_discounts(env, 0.95) == 0.95


def test_episode_cost_and_gamma_c_of_one_episode_by_hand():
    env, params = envs.make(NAME)
    key = jax.random.PRNGKey(3)
    v, c, n, _, ep = episode_values(key, env, params, push_right, env.gamma, env.episode_length, ep_cost=True)
    steps = sample_episode(key, env, params, push_right, env.episode_length)  # the same episode, step by step
    ep_ref, c_ref = by_hand(steps.s_next, steps.alive, env.episode_length, env.gamma)
    assert 0 < ep_ref[0] < n  # some unsafe steps, not all
    np.testing.assert_allclose(np.asarray(ep), ep_ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.asarray(c), c_ref, rtol=1e-5, atol=1e-4)
    # gamma_c = 1 over a whole episode: C = EpCost - B
    assert float(c[0]) == pytest.approx(float(ep[0]) - BUDGET * float(n) / env.episode_length, abs=2e-3)  # float32 sums


def test_the_robustness_test_keeps_episode_costs_and_gamma_c():
    env, params = envs.make(NAME)
    kernels = env.test_kernels(np.array([0.0, 1.0], np.float32), params)
    out = policy_sweep(env, kernels, push_right, 2, env.gamma, jax.random.PRNGKey(5))
    assert out["EpCost"].shape == out["C"].shape == (2, 2, 2, 2)
    keys = jax.random.split(jax.random.PRNGKey(5), 2)
    for lvl, d, e in [(0, 0, 0), (1, 1, 1), (1, 0, 1)]:
        kernel = jax.tree.map(lambda x: x[lvl, d], kernels)
        steps = sample_episode(keys[e], env, kernel, push_right, env.episode_length)
        ep_ref, c_ref = by_hand(steps.s_next, steps.alive, env.episode_length, env.gamma)
        np.testing.assert_allclose(np.asarray(out["EpCost"][lvl, d, e]), ep_ref, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(np.asarray(out["C"][lvl, d, e]), c_ref, rtol=1e-5, atol=1e-4)


def test_training_rollout_counts_the_episode_cost_of_finished_episodes():
    from rcmdp_jax.networks import build_networks
    from rcmdp_jax.presets import preset

    env, params = envs.make(NAME)
    actor, _ = build_networks(preset(NAME, "PPO-Lag"), env)
    actor_params = actor.init(jax.random.PRNGKey(0), jnp.zeros((env.obs_dim,)))
    n_envs, horizon = 2, env.episode_length
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(1), n_envs), params)
    out = collect_rollout(jax.random.PRNGKey(2), env, params, actor, actor_params, state, obs,
                          init_accumulator(n_envs, 2), horizon + 30, env.gamma)  # fmt: skip
    traj, _, _, acc, stats = out
    done, nxt = np.asarray(traj.done), np.asarray(traj.next_obs, np.float64)
    ep_sum, c_sum, finished = np.zeros(2), np.zeros(2), 0
    for b in range(n_envs):
        ends = np.flatnonzero(done[:, b])
        start = 0
        for end in ends:  # every finished episode: its next states from its start to its end
            ep, c = by_hand(nxt[start : end + 1, b], np.ones(end + 1 - start), horizon, env.gamma)
            ep_sum, c_sum, finished, start = ep_sum + ep, c_sum + c, finished + 1, end + 1
        unfinished = by_hand(nxt[start:, b], np.ones(len(nxt) - start), horizon, env.gamma)[0]
        np.testing.assert_allclose(np.asarray(acc.ep_costs[b]), unfinished, rtol=1e-5, atol=1e-4)
        assert float(acc.steps[b]) == len(nxt) - start
    assert finished == float(stats["episodes"]) > 0
    np.testing.assert_allclose(np.asarray(stats["ep_costs"]), ep_sum, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(np.asarray(stats["disc_costs"]), c_sum, rtol=1e-5, atol=1e-3)


def test_dual_readings_with_gamma_c_one_are_episode_sums():
    rng = np.random.default_rng(0)
    costs = rng.normal(size=(12, 3, 2)).astype(np.float32)
    done = np.zeros((12, 3), bool)
    done[4, 0] = done[7, 1] = True
    env, _ = envs.make(NAME)
    got = np.asarray(batch_readings("cost_to_go", jnp.asarray(costs), jnp.asarray(done), jnp.asarray(done),
                                    gamma=cost_discounts(env, 0.9)))  # fmt: skip
    want = np.zeros_like(costs, np.float64)
    for b in range(3):
        for t in range(12):
            end = next((u for u in range(t, 12) if done[u, b]), 11)  # the rest of the episode, inside the batch
            want[t, b, 0] = costs[t : end + 1, b, 0].sum()  # gamma_c = 1: the plain sum
            want[t, b, 1] = sum(0.9 ** (u - t) * costs[u, b, 1] for u in range(t, end + 1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # a scalar gamma (no cost discount of the environment's own) is the same program as before
    same = discounted_returns(jnp.asarray(costs), jnp.asarray(done), 0.9)
    assert np.array_equal(np.asarray(batch_readings("cost_to_go", costs, done, done, gamma=0.9)), np.asarray(same))


def test_start_value_reading_with_gamma_c_one_is_the_episode_sum():
    from rcmdp_jax.rollout import run_episodes

    env, params = envs.make(NAME)
    actor = type("Fixed", (), {"apply": staticmethod(lambda p, o: _Right())})()
    v, c, steps, ep = run_episodes(jax.random.PRNGKey(4), env, params, actor, None, 3, env.gamma, True, ep_cost=True)
    keys = jax.random.split(jax.random.PRNGKey(4), 3)
    refs = [by_hand(*_steps(env, params, k), env.episode_length, env.gamma) for k in keys]
    np.testing.assert_allclose(np.asarray(c).mean(0), np.mean([r[1] for r in refs], 0), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.asarray(ep), [r[0] for r in refs], rtol=1e-5, atol=1e-4)


class _Right:
    """A distribution that always acts 2 (push right)."""

    def mode(self):
        return jnp.int32(2)

    def log_prob(self, a):
        return jnp.float32(0.0)


def _steps(env, params, key):
    steps = sample_episode(key, env, params, push_right, env.episode_length)
    return steps.s_next, steps.alive


def test_costs_syntax_of_the_cost_discount_and_its_label():
    assert limit_name("x>0.3:2") == "|x|>0.3 at most 2/episode"
    assert limit_name("x>0.3:2:gamma") == "|x|>0.3 at most 2/episode discounted by gamma"
    env, _ = envs.make(envs.gymnax_name("gymnax:MountainCar-v0", "gravity=0.1", "velocity>0.01:5:gamma"))
    assert env.cost_gammas is None or np.isnan(env.cost_gammas[0])  # the training gamma: today's constraint
    env, _ = envs.make(envs.gymnax_name("gymnax:MountainCar-v0", "gravity=0.1", "velocity>0.01:5:0.9"))
    assert env.cost_gammas == pytest.approx((0.9,))
    for bad in ("velocity>0.01:5:1.5", "velocity>0.01:5:0"):
        with pytest.raises(ValueError, match=r"cost discount .* \(0, 1\]"):
            envs.make(envs.gymnax_name("gymnax:MountainCar-v0", "gravity=0.1", bad))
    with pytest.raises(ValueError, match="gamma_c"):
        envs.indicator(lambda s, a, n, p: n.velocity > 0, budget=1.0, gamma_c=2.0)


def test_with_gamma_c_gives_a_cost_function_of_ones_own_the_episode_sum():
    import gymnax

    inner, _ = gymnax.make("MountainCar-v0")
    fast = envs.with_gamma_c(lambda s, a, n, p: jnp.abs(n.velocity)[None] - SPEED, 1.0)
    env = envs.robustify(inner, {"gravity": 0.1}, {"fast": fast}, gamma=0.9)
    assert env.cost_gammas == (1.0,) and env.cost_offsets == (0.0,)


def test_an_older_checkpoint_without_the_episode_cost_restores_filled(tmp_path):
    from flax import struct

    @struct.dataclass
    class Result:
        state: dict
        metrics: dict

    new = Result(
        state={"episodes": {"ret": np.ones(2, np.float32), "ep_costs": np.ones((2, 1), np.float32),
                            "steps": np.ones(2, np.float32)}},
        metrics={"lam": np.arange(3, dtype=np.float32), "eval_ep_cost": np.ones((3, 1), np.float32)},
    )  # fmt: skip
    old = {"state": {"episodes": {"ret": np.full(2, 7.0, np.float32)}},
           "metrics": {"lam": np.arange(3.0, dtype=np.float32)}}  # fmt: skip
    checkpoint.save(tmp_path / "old", old)
    abstract = jax.eval_shape(lambda: new)
    assert checkpoint.matches(tmp_path / "old", abstract)
    got = checkpoint.restore(tmp_path / "old", abstract)
    np.testing.assert_array_equal(got.state["episodes"]["ret"], [7.0, 7.0])
    np.testing.assert_array_equal(got.metrics["lam"], [0.0, 1.0, 2.0])
    assert np.isnan(got.metrics["eval_ep_cost"]).all() and got.metrics["eval_ep_cost"].shape == (3, 1)
    np.testing.assert_array_equal(got.state["episodes"]["ep_costs"], np.zeros((2, 1)))
    # a checkpoint that lacks any other leaf is still another tree: refused as before
    other = {"state": {"episodes": {}}, "metrics": {"lam": np.arange(3.0, dtype=np.float32)}}
    checkpoint.save(tmp_path / "other", other)
    assert checkpoint.matches(tmp_path / "other", abstract) is False
    with pytest.raises(ValueError):
        checkpoint.restore(tmp_path / "other", abstract)


def test_the_constraint_table_shows_gamma_c_and_episode_costs_beside_c():
    rng = np.random.default_rng(1)
    C = rng.normal(size=(2, 2, 2, 3, 2))  # seeds, levels, directions, episodes, m
    ep = rng.uniform(0, 9, size=C.shape)
    C[:, 0], ep[:, 0] = C[:, 0, :1], ep[:, 0, :1]  # level 0's directions: the nominal kernel, the same episodes
    costs = {"A": {"EpCost": ep, "gamma_c": np.array([1.0, 0.99]), "horizon": 200}}
    text, js = report.constraint_section({"A": (None, C)}, ("unsafe", "speed"), np.array([0.0, 1.0]), costs=costs)
    # without kinds both are limits: C decides, and C's worst kernel is the worst
    assert "EpCost over H = 200 steps" in text and "gamma_c" in text
    per_kernel = C[..., 0].mean(axis=(0, 3))
    lvl, d = np.unravel_index(np.argmax(per_kernel), per_kernel.shape)
    assert js["A"]["unsafe"]["ep_cost_nominal"] == pytest.approx(ep[:, 0, ..., 0].mean())
    assert js["A"]["unsafe"]["ep_cost_worst"] == pytest.approx(ep[:, lvl, d, :, 0].mean())
    assert js["A"]["unsafe"]["gamma_c"] == 1.0 and js["A"]["speed"]["gamma_c"] == 0.99
    assert "| A | unsafe | C <= 0 | 1 |" in text and "| A | speed | C <= 0 | 0.99 |" in text
    # a result file written before: the columns say they are unknown
    text, js = report.constraint_section({"A": (None, C)}, ("unsafe", "speed"), np.array([0.0, 1.0]))
    assert "| A | unsafe | C <= 0 | ? |" in text and "ep_cost_nominal" not in js["A"]["unsafe"]


def test_worst_case_values_and_ltma_direction_discount_each_constraint_by_its_own():
    from rcmdp_jax.kernel_gradients import episode_quantities, score_gradient
    from rcmdp_jax.ltma import ltma_direction, step_costs

    env, params = envs.make(NAME)
    key = jax.random.PRNGKey(3)
    total, steps = episode_quantities(key, env, params, push_right, env.gamma, env.episode_length)
    np.testing.assert_allclose(np.asarray(total[1:]), by_hand(steps.s_next, steps.alive, env.episode_length,
                                                              env.gamma)[1], rtol=1e-5, atol=1e-4)  # fmt: skip
    # every constraint at the training gamma: the combined weights give the one-discount direction
    same = envs.gymnax_name("gymnax:MountainCar-v0", "gravity=0.1", f"velocity>{LIMIT}:5:0.99")
    env, params = envs.make(same)
    assert env.cost_gammas == pytest.approx((0.99,)) and env.gamma == pytest.approx(0.99)
    traj = jax.vmap(lambda k: sample_episode(k, env, params, push_right, 50))(jax.random.split(key, 3))
    lam = jnp.array([2.0])
    got = ltma_direction(env, params, traj, lam, env.gamma)
    want = score_gradient(env, params, params.xi, traj, step_costs(traj, lam), env.gamma)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-6)
    assert np.any(np.asarray(want) != 0)


@pytest.mark.slow
def test_a_run_folder_written_before_the_episode_cost_reports_and_retests(trained, tmp_path, capsys):
    """A run folder as an older version wrote it (no EpCost in its results, metrics and
    checkpoint) reports with the new columns unknown, and --eval-only restores its checkpoints
    (the missing leaves filled) and tests them again, now with EpCost and gamma_c."""
    import orbax.checkpoint as ocp
    from cli_helpers import _copy
    from tiny_configs import QUICK

    from rcmdp_jax.study import cli, console
    from rcmdp_jax.study.run_folder import RunFolder

    out = _copy(trained, tmp_path)
    algo_dir, ckpt = out / "cartpole" / "MDPO-Lag", RunFolder(out).ckpt_dir("cartpole", "MDPO-Lag")
    test = dict(np.load(algo_dir / "test_results.npz"))
    assert test["EpCost"].shape == test["C"].shape and test["gamma_c"] == pytest.approx([0.99])
    assert test["horizon"] == 100
    metrics = dict(np.load(algo_dir / "train_metrics.npz"))
    assert metrics["eval_ep_cost"].shape == metrics["eval_costs"].shape
    np.savez_compressed(algo_dir / "test_results.npz", **{k: v for k, v in test.items()
                                                          if k not in ("EpCost", "gamma_c", "horizon")})  # fmt: skip
    np.savez_compressed(algo_dir / "train_metrics.npz", **{k: v for k, v in metrics.items() if "ep_cost" not in k})
    with ocp.StandardCheckpointer() as c:
        tree = c.restore(ckpt.absolute())

    def drop(node):
        if not isinstance(node, dict):
            return node
        return {k: drop(v) for k, v in node.items() if k not in checkpoint.ADDED_LEAVES}

    import shutil

    shutil.rmtree(ckpt)
    checkpoint.files_path(ckpt).unlink(missing_ok=True)
    checkpoint.save(ckpt, drop(tree))
    capsys.readouterr()
    assert console.report([str(out)]) == 0
    assert "| MDPO-Lag | \\|x_dot\\|-0.15 | C <= 0 | ? |" in capsys.readouterr().out
    assert cli.main(["--eval-only", str(out), *QUICK]) == 0
    again = dict(np.load(algo_dir / "test_results.npz"))
    np.testing.assert_array_equal(again["V"], test["V"])  # the same trained policy, restored
    np.testing.assert_array_equal(again["EpCost"], test["EpCost"])
    assert "| MDPO-Lag | \\|x_dot\\|-0.15 | C <= 0 | 0.99 |" in capsys.readouterr().out


def test_learners_cost_signals_discount_each_cost_by_its_gamma_c():
    """MCPMD's Lagrangian returns-to-go and the batch learners' GAE: the reward and the signed
    cost by gamma, the indicator by gamma_c = 1 (NumPy sums)."""
    from types import SimpleNamespace

    from rcmdp_jax.learners import make_learner
    from rcmdp_jax.learners.batch import lagrangian_gae
    from rcmdp_jax.presets import preset
    from rcmdp_jax.rollout import Episode

    env, _ = envs.make(NAME)
    rng = np.random.default_rng(2)
    T, lam, gamma = 7, np.array([2.0, 3.0], np.float32), 0.9
    r, c = rng.normal(size=T).astype(np.float32), rng.normal(size=(T, 2)).astype(np.float32)
    alive = np.array([1, 1, 1, 1, 1, 0, 0], np.float32)
    z = np.zeros(T, np.float32)
    ep = Episode(obs=z, action=z, dropout_key=z, log_prob=z, reward=jnp.asarray(r), costs=jnp.asarray(c),
                 alive=jnp.asarray(alive))  # fmt: skip
    hp = SimpleNamespace(gamma=gamma, gae_lambda=1.0)
    got = make_learner(preset(NAME, "MCPMD-Lag"), env, None, None).signal(ep, None, jnp.asarray(lam), hp)
    want = [sum(alive[u] * (gamma ** (u - t) * (r[u] - lam[1] * c[u, 1]) - lam[0] * c[u, 0]) for u in range(t, T))
            for t in range(T)]  # fmt: skip
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    # GAE with gae_lambda = 1 and a zero critic: the discounted returns of each stream, no episode end
    data = SimpleNamespace(reward=jnp.asarray(r)[:, None], costs=jnp.asarray(c)[:, None], obs=z[:, None],
                           next_obs=z[:, None], terminated=jnp.zeros((T, 1)), done=jnp.zeros((T, 1)))  # fmt: skip
    critic = SimpleNamespace(apply=lambda p, o: jnp.zeros(o.shape + (3,)))
    _, targets = lagrangian_gae(critic, None, data, jnp.asarray(lam), hp, env)
    for j, g in enumerate((gamma, 1.0, gamma)):  # reward, indicator, signed cost
        stream = np.concatenate([r[:, None], c], axis=1)[:, j]
        ref = [sum(g ** (u - t) * stream[u] for u in range(t, T)) for t in range(T)]
        np.testing.assert_allclose(np.asarray(targets[:, 0, j]), ref, rtol=1e-5, atol=1e-5)

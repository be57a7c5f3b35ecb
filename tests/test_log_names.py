"""The training log's names (``training_log.TrainingLog``): the CSV header and the TensorBoard
tags by what each value is — the constraint by its name, the kernel by its fields —, the
events' step the learner's environment steps and the iteration a scalar beside it; on
hand-made metrics (nothing trains here)."""

import numpy as np
from cli_helpers import events

from rcmdp_jax.study import training_log
from rcmdp_jax.study.run_folder import RunFolder


def _metrics():
    rng = np.random.default_rng(0)
    S, T = 2, 4
    f = lambda *shape: rng.normal(size=(S, T, *shape)).astype(np.float32)  # noqa: E731
    steps = np.tile(np.arange(1, T + 1, dtype=np.float32) * 1600, (S, 1))
    active = np.ones((S, T), np.float32)
    active[1, 3] = 0  # seed 1's last slot did nothing (MCPMD's step budget)
    eval_return = f()
    eval_return[:, 1] = np.nan  # the training curve between its points
    return dict(lam=f(2), episode_ep_cost=f(2), eval_return=eval_return, xi=f(4), policy_steps=steps, active=active,
                policy_loss=f())  # fmt: skip


def test_the_log_names_each_value_and_steps_in_environment_steps(tmp_path):
    env = "gymnax:CartPole-v1@costs=x>0.3:5,x>0.2"
    metrics = _metrics()
    folder = RunFolder(tmp_path).algo_dir(env, "PPO-Lag")
    log = training_log.TrainingLog({"PPO-Lag": folder}, env, tensorboard=True)
    log.chunk(0, {k: v[:, :2] for k, v in metrics.items()}, 0)
    log.chunk(0, {k: v[:, 2:] for k, v in metrics.items()}, 2)
    log.finish("PPO-Lag", metrics)
    header = (folder / "train_metrics.csv").read_text().splitlines()[0].split(",")
    a, b = "|x|>0.3 at most 5 per episode", "|x|>0.2 at most 0 per episode"
    assert header == ["iteration", "seed", f"cost/{a}/ep_cost", f"cost/{b}/ep_cost", "kernel/gravity", "kernel/masspole",
                      "kernel/length", "kernel/force_mag", f"lambda/{a}", f"lambda/{b}", "return/eval", "run/active",
                      "steps/policy", "update/policy_loss"]  # fmt: skip
    for seed in range(2):
        got = events(folder / "tensorboard" / f"seed_{seed}")
        assert set(got) == {*header[2:], "iteration"}
        ran = [t for t in range(4) if metrics["active"][seed, t] > 0]
        steps = {t: int(metrics["policy_steps"][seed, t]) for t in ran}
        assert got["iteration"] == {steps[t]: float(t) for t in ran}
        assert got[f"lambda/{b}"] == {steps[t]: metrics["lam"][seed, t, 1] for t in ran}
        assert got["kernel/length"] == {steps[t]: metrics["xi"][seed, t, 2] for t in ran}
        assert got["return/eval"] == {steps[t]: metrics["eval_return"][seed, t] for t in ran if t != 1}

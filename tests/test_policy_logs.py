"""Trained policies users load and use, and the training logs they read: ``load_policy``
acts as the trained actor (a NumPy forward pass of the checkpoint's weights), ``rcmdp eval``
and ``evaluate`` on a grid kernel give the robustness test's numbers there, the CSV rows
and the TensorBoard scalars are the npz metrics, bad input is one line (exit 2), and the
compile progress line. Reads the session's shared tiny runs (``conftest.full_run``,
``trained``); trains nothing of its own."""

import json
import shutil
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from cli_helpers import _copy, _load, _one_line, _snapshot, assert_csv_is_npz, column_values, events, read_csv

from rcmdp_jax import load_policy
from rcmdp_jax.kernel_text import parse
from rcmdp_jax.study import cli, console, runtime, training_log

XI = ("xi[0]", "xi[1]", "xi[2]", "xi[3]")  # a kernel's entries by index (the parser's own checks)
NAMES = ("cart position", "cart velocity", "pole angle", "pole angular velocity")  # cartpole's, as its report names them


def actor_weights(run, algo, seed):
    """The actor's weights of ``seed`` read straight from the checkpoint (no ``make_train``)."""
    tree = ocp.StandardCheckpointer().restore(run / "cartpole" / algo / "checkpoint")
    mlp = tree["state"]["params"]["actor"]["params"]["MLP_0"]
    return [(np.asarray(mlp[f"Dense_{i}"]["kernel"][seed]), np.asarray(mlp[f"Dense_{i}"]["bias"][seed]))
            for i in (0, 1)]


def logits(weights, obs):
    (w0, b0), (w1, b1) = weights
    return np.maximum(obs @ w0 + b0, 0) @ w1 + b1  # networks.MLP: relu hidden layer, linear output


@pytest.mark.parametrize("algo, seed", [("MDPO-Lag", 1), ("PPO-Lag", 0)])
def test_a_loaded_policy_acts_as_the_trained_actor(full_run, algo, seed):
    policy = load_policy(full_run, algo, seed)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    ref = logits(actor_weights(full_run, algo, seed), obs.astype(np.float64))
    act = jax.jit(jax.vmap(policy.act))
    np.testing.assert_array_equal(np.asarray(act(obs)), ref.argmax(-1))  # deterministic: the mode
    other = logits(actor_weights(full_run, algo, 1 - seed), obs.astype(np.float64))
    assert (other.argmax(-1) != ref.argmax(-1)).any() or not np.allclose(other, ref)  # the seed matters
    keys = jax.random.split(jax.random.PRNGKey(3), 4000)
    drawn = np.asarray(jax.jit(jax.vmap(policy.act, in_axes=(None, 0)))(obs[0], keys))  # sampling with a key
    p = np.exp(ref[0] - ref[0].max())
    p /= p.sum()
    share = np.bincount(drawn, minlength=2) / drawn.size
    assert np.all(np.abs(share - p) < 4 * np.sqrt(p * (1 - p) / drawn.size) + 1e-9), (share, p)
    assert (policy.env_name, policy.algorithm, policy.seed, policy.config.name) == ("cartpole", algo, seed, algo)


def grid_kernel(test_xi, level, d) -> str:
    """A test kernel as absolute field values (float32 values, written exactly)."""
    return ",".join(f"{n}={float(x)!r}" for n, x in zip(NAMES, test_xi[level, d]))


# Same keys and episodes as the robustness test; the compiled programs differ (one kernel
# here, 11 x 16 there, sharded over devices), so a discounted float32 sum over up to 200 steps
# may round differently in its last bits: |C| <= 50 gives ~1e-5. A wrong kernel, key or seed
# moves an episode's values by far more (checked below with the neighbouring kernel).
ROUNDING = dict(rtol=1e-5, atol=1e-4)


def test_rcmdp_eval_gives_the_robustness_test_at_a_grid_point(full_run, tmp_path, capsys):
    test = _load(full_run, "MDPO-Robust", "test_results.npz")
    seed, level, d = 1, 10, 5
    out = tmp_path / "eval.json"
    argv = ["eval", str(full_run), "--algo", "MDPO-Robust", "--seed", str(seed), "--kernel",
            grid_kernel(test["test_xi"], level, d), "--json", str(out)]  # fmt: skip
    assert console.main(argv) == 0
    said = capsys.readouterr().out
    assert "return" in said and "|x_dot|-0.15" in said and "3 episode(s)" in said, said
    got = json.loads(out.read_text())
    V, C = test["V"][seed, level, d].astype(np.float64), test["C"][seed, level, d, :, 0].astype(np.float64)
    n = V.size
    np.testing.assert_allclose(got["metrics"]["return"]["mean"], V.mean(), **ROUNDING)
    np.testing.assert_allclose(got["metrics"]["return"]["se"], V.std(ddof=1) / np.sqrt(n), **ROUNDING)
    np.testing.assert_allclose(got["constraints"]["|x_dot|-0.15"]["C"]["mean"], C.mean(), **ROUNDING)
    np.testing.assert_allclose(got["constraints"]["|x_dot|-0.15"]["C"]["se"], C.std(ddof=1) / np.sqrt(n), **ROUNDING)
    assert got["n_episodes"] == n and got["in_box"] is True

    policy = load_policy(full_run, "MDPO-Robust", seed)  # the same from Python, episode by episode
    for lv, dd in [(level, d), (4, 9), (0, 0)]:
        ev = policy.evaluate(grid_kernel(test["test_xi"], lv, dd))
        np.testing.assert_allclose(ev.episodes["V"], test["V"][seed, lv, dd], **ROUNDING)
        np.testing.assert_allclose(ev.episodes["C"], test["C"][seed, lv, dd], **ROUNDING)
    near = policy.evaluate(grid_kernel(test["test_xi"], level, d - 1))  # the neighbouring corner: other numbers
    assert not np.allclose(near.episodes["C"], test["C"][seed, level, d], **ROUNDING)
    again = policy.evaluate(grid_kernel(test["test_xi"], level, d), n_episodes=5, seed=7)  # other episodes
    assert again.n_episodes == 5 and not np.allclose(again.episodes["V"][:3], test["V"][seed, level, d])


def test_a_kernel_is_named_by_changes_and_values():
    xi_c = np.array([1.0, 2.0, 0.0, 4.0], np.float32)
    np.testing.assert_array_equal(parse("xi[1]=+50%,xi[3]=3.5", xi_c, XI), np.float32([1.0, 3.0, 0.0, 3.5]))
    np.testing.assert_array_equal(parse("xi[0]=-10%", xi_c, XI), np.float32([0.9, 2.0, 0.0, 4.0]))
    np.testing.assert_array_equal(parse(None, xi_c, NAMES), xi_c)
    np.testing.assert_array_equal(parse("nominal", xi_c, NAMES), xi_c)
    two_d = parse("xi[0,1]=+20%", np.ones((2, 2), np.float32), ("xi[0,0]", "xi[0,1]", "xi[1,0]", "xi[1,1]"))
    np.testing.assert_array_equal(two_d, np.float32([[1.0, 1.2], [1.0, 1.0]]))
    for text, words in [("g=1", "no field 'g'"), ("xi[0]", "is not FIELD=VALUE"), ("xi[0]=x", "finite number"),
                        ("xi[0]=inf", "finite number"), ("xi[2]=+5%", "nominal value is 0"),
                        ("xi[0]=1,xi[0]=2", "named twice")]:  # fmt: skip
        with pytest.raises(ValueError, match="^kernel") as err:
            parse(text, xi_c, XI)
        assert words in str(err.value) and "\n" not in str(err.value)


def test_eval_lines_keep_one_column_of_numbers_for_long_constraint_names():
    from rcmdp_jax.study.policy import Evaluation

    name = "|x|>0.3 at most 5/episode"
    ev = Evaluation(env="e", algorithm="PPO-Lag", seed=0, kernel="nominal", xi=np.zeros(1), in_box=True,
                    n_episodes=4, metrics={"return": (67.94, 3.3)}, episodes={},
                    constraints={name: {"C": (3.76, 1.82), "EpCost": (6.9, 1.84)}})  # fmt: skip
    head, *rows = ev.lines()
    assert "4 episode(s)" in head and [r.split()[0] for r in rows] == ["return", "C", "EpCost"]
    assert rows[2].startswith(f"  EpCost {name} ") and rows[1].startswith(f"  C {name} ")
    assert len({r.index("±") for r in rows}) == 1, rows  # the numbers line up under each other
    assert rows[2].endswith("6.9000 ± 1.8400") and rows[0].endswith("67.9400 ± 3.3000")


def test_a_relative_kernel_and_one_outside_the_box(full_run):
    policy = load_policy(full_run, "PPO-Lag", 0)
    xi_c = np.asarray(policy.env_params.xi_c, np.float64)
    ev = policy.evaluate("cart velocity=+50%", n_episodes=4, seed=0)
    np.testing.assert_array_equal(ev.xi, (xi_c * [1, 1.5, 1, 1]).astype(np.float32))
    assert not ev.in_box and ev.kernel == "cart velocity +50 %" and ev.n_episodes == 4
    V = ev.episodes["V"].astype(np.float64)
    assert ev.metrics["return"] == pytest.approx((V.mean(), V.std(ddof=1) / 2))
    assert set(ev.constraints) == {"|x_dot|-0.15"} and "C" in ev.constraints["|x_dot|-0.15"]
    assert list(ev.metrics) == ["return"] and "at_state_bound" not in "".join(ev.lines())  # CartPole has no bound
    one = policy.evaluate(n_episodes=1)
    assert one.in_box  # the nominal kernel
    # one episode: its standard error is 0, as stats.mean_se says of one value, and a number in the JSON
    assert one.metrics["return"] == (float(one.episodes["V"][0]), 0.0) and one.to_dict()["metrics"]["return"]["se"] == 0


def test_bad_input_of_load_policy_is_one_line(full_run, tmp_path):
    cases = [(("MDPO",), "algorithm='MDPO' is not in the run (did you mean 'MDPO-Lag'?); choose one of: MDPO-Lag, MDPO-Robust, PPO-Lag"),
             (("MDPO-Lag", 2), "seed=2: the run trained seeds 0 .. 1"),
             (("MDPO-Lag", -1), "seed=-1"), (("MDPO-Lag", True), "seed=True"),
             (("MDPO-Lag", 0, "inventory"), "env='inventory' is not in the run; choose one of: cartpole")]  # fmt: skip
    for args, message in cases:
        args = (*args, 0) if len(args) == 1 else args
        with pytest.raises(ValueError) as err:
            load_policy(full_run, *args)
        assert message in str(err.value) and "\n" not in str(err.value), err.value
    with pytest.raises(ValueError, match="is not a run folder"):
        load_policy(tmp_path, "MDPO-Lag", 0)
    policy = load_policy(full_run, "MDPO-Lag", 0)
    for kw, message in [({"n_episodes": 0}, "n_episodes must be a positive integer, got 0"), ({"n_episodes": 2**31}, "beyond the int32"),
                        ({"n_episodes": 2.5}, "n_episodes must be"), ({"seed": -3}, r"seed must be an integer in \[0, 2\*\*32\)"),
                        ({"kernel": 3}, "kernel must be a string")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            policy.evaluate(**kw)


def test_a_run_of_several_environments_needs_env_and_a_checkpoint_must_be_there(trained, tmp_path, monkeypatch):
    import dataclasses

    from rcmdp_jax.study.run_folder import RunFolder

    old = _copy(trained, tmp_path)
    shutil.rmtree(old / "cartpole" / "MDPO-Lag" / "checkpoint")
    with pytest.raises(ValueError, match="no finished checkpoint of cartpole/MDPO-Lag in .*--resume"):
        load_policy(old, "MDPO-Lag", 0)
    read = RunFolder.read_plan
    monkeypatch.setattr(RunFolder, "read_plan", lambda self, flag: dataclasses.replace(
        read(self, flag), envs=("cartpole", "inventory")))  # fmt: skip
    with pytest.raises(ValueError, match=r"^env: the run holds 2 environments; name one of: cartpole, inventory$"):
        load_policy(trained, "MDPO-Lag", 0)
    assert load_policy(trained, "MDPO-Lag", 0, env="cartpole").env_name == "cartpole"


def test_bad_input_of_rcmdp_eval_is_one_line_exit_2(full_run, tmp_path, capsys):
    before = _snapshot(full_run)
    base = ["eval", str(full_run), "--algo", "MDPO-Lag", "--seed", "0", "--json", str(tmp_path / "x.json")]
    for extra, words in [(["--algo", "MDPO"], ["--algo='MDPO'", "MDPO-Lag, MDPO-Robust, PPO-Lag"]),
                         (["--seed", "5"], ["--seed=5", "0 .. 1"]), (["--kernel", "mass=+5%"], ["--kernel", "cart position"]),
                         (["--kernel", "pole angle=abc"], ["--kernel", "finite number"]),
                         (["--n-episodes", "0"], ["--n-episodes must be"]), (["--env", "inventory"], ["--env="]),
                         (["--episode-seed", "-1"], ["--episode-seed must"]),
                         (["--seed", "x"], ["invalid int"])]:  # fmt: skip
        assert console.main(base + extra) == 2, extra
        _one_line(capsys, "rcmdp eval: error:", *words)
    assert console.main(["eval", str(tmp_path), "--algo", "MDPO-Lag", "--seed", "0"]) == 2
    _one_line(capsys, "is not a run folder")
    assert console.main(["eval", str(full_run), "--seed", "0"]) == 2
    _one_line(capsys, "--algo")
    assert not (tmp_path / "x.json").exists() and _snapshot(full_run) == before


def test_a_run_folder_of_an_older_version_loads(trained, tmp_path):
    """A folder without the CSV and event files, its run.json with the options as flat config
    fields (as versions before the options moved wrote it: tests/golden)."""
    old = _copy(trained, tmp_path)
    (old / "cartpole" / "MDPO-Lag" / "train_metrics.csv").unlink()
    plan = json.loads((old / "run.json").read_text())
    cfg = plan["configs"]["cartpole"]["MDPO-Lag"]
    cfg.update(dict(cfg.pop("options")))
    (old / "run.json").write_text(json.dumps(plan))
    obs = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32)
    a, b = load_policy(old, "MDPO-Lag", 1), load_policy(trained, "MDPO-Lag", 1)
    np.testing.assert_array_equal(jax.vmap(a.act)(obs), jax.vmap(b.act)(obs))
    assert a.config == b.config


@pytest.mark.parametrize("algo", ["MDPO-Lag", "MDPO-Robust", "PPO-Lag"])
def test_the_csv_rows_are_the_npz_metrics(full_run, algo):
    header = assert_csv_is_npz(full_run / "cartpole" / algo)
    # named by what they are: the constraint by its name, the kernel by its fields
    for name in ("cost/|x_dot|-0.15/c_hat", "cost/|x_dot|-0.15/ep_cost", "kernel/pole angular velocity", "return/eval",
                 "lambda/|x_dot|-0.15", "steps/policy", "update/policy_loss"):  # fmt: skip
        assert name in header, header
    assert "lam" not in header and "xi/pole angular velocity" not in header


def test_an_older_run_folder_gets_its_csv_on_eval_only(trained, tmp_path):
    old = _copy(trained, tmp_path)
    algo = old / "cartpole" / "MDPO-Lag"
    (algo / "train_metrics.csv").unlink()
    assert cli.main(["--eval-only", str(old), "--plots", "off"]) == 0
    assert_csv_is_npz(algo)


def test_the_event_files_hold_the_scalars(full_run):
    """The CSV's columns as tags by name, each at the environment steps of its iteration (the
    learner's, ``policy_steps``), the iteration a scalar of its own."""
    metrics = _load(full_run, "PPO-Lag", "train_metrics.npz")
    header, _ = read_csv(full_run / "cartpole" / "PPO-Lag" / "train_metrics.csv")
    for seed in range(2):
        got = events(full_run / "cartpole" / "PPO-Lag" / "tensorboard" / f"seed_{seed}")
        assert set(got) == {*header[2:], "iteration"}
        assert {"lambda/|x_dot|-0.15", "cost/|x_dot|-0.15/ep_cost", "return/eval"} <= set(got)
        env_steps = metrics["policy_steps"][seed]  # steps so far after each iteration
        assert np.all(np.diff(env_steps) > 0)
        assert got["iteration"] == {int(s): float(t) for t, s in enumerate(env_steps)}
        for column in header[2:]:
            want = column_values(metrics, column)[seed]
            steps = [t for t in range(want.size) if not np.isnan(want[t])]
            assert sorted(got[column]) == [int(env_steps[t]) for t in steps], column
            np.testing.assert_array_equal([got[column][int(env_steps[t])] for t in steps], want[steps], err_msg=column)


def test_tensorboard_without_tensorboardx(monkeypatch, tmp_path, capsys):
    import sys

    import tensorboardX

    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # as if not installed
    assert runtime.event_files("off") == (False, "")
    on, note = runtime.event_files("auto")
    assert not on and "tensorboardX is not installed" in note and "rcmdp_jax[tensorboard]" in note
    assert "train_metrics.csv" in note and "\n" not in note
    out = tmp_path / "never"
    assert cli.main(["--algos", "MDPO-Lag", "--tensorboard", "on", "--out", str(out)]) == 2
    _one_line(capsys, "--tensorboard on: tensorboardX is not installed")
    assert not out.exists()
    monkeypatch.setitem(sys.modules, "tensorboardX", tensorboardX)
    assert runtime.event_files("auto") == (True, "") == runtime.event_files("on")


def test_a_line_while_a_program_compiles(capsys):
    with runtime.ticking("[cartpole 1/2] MDPO-Lag:", "compiling the training program", every=0.1):
        time.sleep(0.45)
    lines = capsys.readouterr().out.splitlines()
    assert 3 <= len(lines) <= 5, lines
    seconds = [float(line.split(": ")[-1].split("s")[0]) for line in lines]
    assert all(line.startswith("[cartpole 1/2] MDPO-Lag: compiling the training program: ") for line in lines)
    assert seconds == sorted(seconds) and 0.05 < seconds[0] < 0.3
    with runtime.ticking("x", "quick", every=5.0):  # a short compile says nothing
        pass
    assert capsys.readouterr().out == ""


def test_a_kernel_of_several_axes_gets_a_column_per_entry():
    """Inventory 3-D's ``xi`` is ``[3, 2]`` an iteration: the CSV gives it six columns, in C order
    (a 4-D metric used to stop the run in the log's writer)."""
    rng = np.random.default_rng(0)
    metrics = {"lam": rng.normal(size=(2, 5)), "xi": rng.normal(size=(2, 5, 3, 2)), "eval_costs": rng.normal(size=(2, 5, 3))}
    cols = training_log.columns(metrics, ())
    assert [c for c, _, _ in cols] == [*(f"cost/{j}/eval_C" for j in range(3)), *(f"kernel/{j}" for j in range(6)),
                                       "lambda"]  # fmt: skip
    values = training_log.table(metrics, cols)
    assert values.shape == (2, 5, 10)
    np.testing.assert_array_equal(values[1, 3, 3:9], metrics["xi"][1, 3].ravel())  # xi[i, j] at column 3 + 2i + j
    np.testing.assert_array_equal(values[..., :3], metrics["eval_costs"])


def test_eval_says_each_constraints_verdict_over_its_episodes(full_run):
    ev = load_policy(full_run, "PPO-Lag", 0).evaluate("cart velocity=+20%", n_episodes=6, seed=3)
    c = ev.episodes["C"][:, 0].astype(np.float64)  # the study's CartPole: a limit, C <= 0 decides
    mean, se = c.mean(), c.std(ddof=1) / np.sqrt(c.size)
    want = "too close to call" if abs(mean) <= 2 * se else "kept" if mean <= 0 else "broken"
    (said,) = ev.verdicts.values()
    assert said.startswith(f"{want} (kept when C <= 0")
    if want == "too close to call":
        assert said.endswith(f"; {int(np.floor(6 * (2 * se / mean) ** 2)) + 1} episodes decide)")
    assert ev.lines()[-1].startswith("  verdict |x_dot|-0.15") and ev.lines()[-1].endswith(said)
    assert ev.to_dict()["verdicts"] == ev.verdicts


@pytest.mark.parametrize("env, bounded", [("inventory", True), ("cartpole", False), ("gymnax:Pendulum-v1", False)])
def test_eval_says_the_state_bound_where_the_environment_has_one(env, bounded):
    """``at_state_bound`` (the share of episodes whose kernel mean reached Inventory's clip) on an
    environment with a state bound only: an untrained actor on Inventory with its bound lowered to 0.5
    reaches it in every episode; CartPole and a gymnax environment have none to report."""
    from rcmdp_jax import envs
    from rcmdp_jax.networks import build_networks
    from rcmdp_jax.presets import preset
    from rcmdp_jax.study.policy import LoadedPolicy

    cfg = preset(env, "PPO", "short")
    robust, params = envs.make(env)
    if bounded:
        params = params.replace(state_bound=0.5)
    actor, _ = build_networks(cfg, robust)
    weights = actor.init(jax.random.PRNGKey(0), np.zeros(robust.obs_dim, np.float32))
    policy = LoadedPolicy(None, env, "PPO", 0, cfg, weights, robust, params, actor, 4, jax.random.PRNGKey(1))
    ev = policy.evaluate(n_episodes=4)
    said = [line.split()[0] for line in ev.lines()[1:]]
    assert ("at_state_bound" in ev.metrics) == ("at_state_bound" in said) == bounded, said
    if bounded:
        assert ev.metrics["at_state_bound"] == (1.0, 0.0) and ev.to_dict()["metrics"]["at_state_bound"]["mean"] == 1

"""The runner end to end on a tiny budget: artifacts, table = stats of saved
episodes, vmap = no-vmap, resume = uninterrupted, eval-only, bad input."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rcmdp_jax import stats
from rcmdp_jax.study import cli

RUN_PY = Path(__file__).resolve().parent.parent / "experiments" / "run.py"  # the command users call

ALGOS = "MDPO-Lag,MDPO-Robust,PPO-Lag"  # two families: {MDPO-Lag, MDPO-Robust}, {PPO-Lag}
TINY = ["--algos", ALGOS, "--seeds", "2", "--steps", "128", "--n-test", "3",
        "--set", "n_steps=16", "--set", "minibatch_size=16", "--set", "ltma_iterations=2",
        "--set", "eval_episodes=2"]  # fmt: skip


def _load(out, algo, name):
    return dict(np.load(Path(out) / "cartpole" / algo / name))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "full"
    assert cli.main(TINY + ["--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_end_to_end_artifacts_and_table(full_run, capsys):
    out = full_run
    meta = json.loads((out / "run.json").read_text())
    assert meta["algos"] == ALGOS.split(",") and meta["seeds"] == 2
    # --steps 128 with 4 x 16-step batches: exactly 2 iterations, recorded
    assert meta["will_run"]["cartpole"]["PPO-Lag"] == {"iterations": 2, "policy_steps": 128}
    env_dir = out / "cartpole"
    for name in ("summary.md", "summary.tex", "summary.json", "test_return.png", "test_cost_1.png", "train_curves.png"):
        assert (env_dir / name).stat().st_size > 0, name
    import matplotlib.image

    for name, size in (("test_return.png", (440, 660)), ("train_curves.png", (770, 1100))):
        img = matplotlib.image.imread(env_dir / name)
        assert img.shape[:2] == size, (name, img.shape)
        # not blank: the curves put many distinct colours on the white canvas
        assert len(np.unique(img.reshape(-1, img.shape[-1])[:, :3], axis=0)) > 50, name
    summary = json.loads((env_dir / "summary.json").read_text())
    md = (env_dir / "summary.md").read_text()
    tex = (env_dir / "summary.tex").read_text()
    # rliable's IQM: the mean of the middle half of all (seed, kernel) scores, by hand
    assert "Aggregate statistics" in md and (env_dir / "intervals.png").stat().st_size > 0
    for algo in ALGOS.split(","):
        res = _load(out, algo, "test_results.npz")
        r_pen = stats.penalised_returns(res["V"].astype(np.float64), res["C"].astype(np.float64), 50.0)["R_pen"]
        scores = np.sort(r_pen.mean(-1).ravel())  # 2 seeds x 176 kernels
        iqm = scores[len(scores) // 4 : len(scores) - len(scores) // 4].mean()
        aggregate = json.loads((env_dir / "aggregate.json").read_text())
        assert aggregate["R_pen"]["iqm"][algo][0] == pytest.approx(iqm, rel=1e-9)
    for algo in ALGOS.split(","):
        d = env_dir / algo
        assert (d / "checkpoint").is_dir() and (d / "train_metrics.npz").exists()
        res = _load(out, algo, "test_results.npz")
        assert res["V"].shape == (2, 11, 16, 3) and res["C"].shape == (2, 11, 16, 3, 1)
        metrics = _load(out, algo, "train_metrics.npz")
        assert metrics["eval_return"].shape == (2, 2) and metrics["xi"].shape == (2, 2, 4)
        # the table's numbers are the statistics of the saved per-episode results
        V, C = res["V"].astype(np.float64), res["C"].astype(np.float64)
        for metric, x in stats.penalised_returns(V, C, 50.0).items():
            scores = x.mean(axis=(0, 3)).ravel()
            assert summary[algo][metric]["mean"] == pytest.approx(x.mean(), rel=1e-9)
            assert summary[algo][metric]["se"] == pytest.approx(scores.std(ddof=1) / np.sqrt(176), rel=1e-9)
            assert summary[algo][metric]["min"] == pytest.approx(scores.min(), rel=1e-9)
            assert f"{x.mean():.2f} ± {scores.std(ddof=1) / np.sqrt(176):.2f}" in md
        assert algo in md and algo in tex
    # the marks are docs/method.md §4's rule on the table's own numbers: the best, and every algorithm
    # within one pooled standard error of it
    for metric in ("Return", "R_pen±", "R_pen"):
        best = max(summary, key=lambda a: summary[a][metric]["mean"])
        for a in summary:
            pooled = np.sqrt((summary[best][metric]["se"] ** 2 + summary[a][metric]["se"] ** 2) / 2)
            within = summary[best][metric]["mean"] - summary[a][metric]["mean"] <= pooled
            assert summary[a][metric]["marked"] == within, (metric, a)


@pytest.mark.slow
def test_sweep_level_zero_is_identical_across_directions(full_run):
    res = _load(full_run, "MDPO-Lag", "test_results.npz")
    V, C = res["V"], res["C"]
    assert np.all(V[:, 0] == V[:, 0, :1]) and np.all(C[:, 0] == C[:, 0, :1])
    for level in range(1, 11):
        assert not np.all(V[:, level] == V[:, level, :1]) or not np.all(C[:, level] == C[:, level, :1])
    assert np.any(V[:, -1] != V[:, -1, :1])


@pytest.mark.slow
def test_vmap_and_no_vmap_give_the_same_numbers(full_run, tmp_path):
    out = tmp_path / "loop"
    assert cli.main(TINY + ["--no-vmap", "--out", str(out)]) == 0
    for algo in ALGOS.split(","):
        a, b = _load(full_run, algo, "test_results.npz"), _load(out, algo, "test_results.npz")
        # batched and unbatched matmuls round differently in the last bits; over a run that
        # can flip a rare test episode (an argmax near a tie), never the statistics
        close = np.isclose(a["V"], b["V"], rtol=1e-4, atol=1e-4)
        assert close.mean() > 0.99, close.mean()
        assert abs(a["V"].mean() - b["V"].mean()) < 1e-3 * (1 + abs(a["V"].mean()))
        ma, mb = _load(full_run, algo, "train_metrics.npz"), _load(out, algo, "train_metrics.npz")
        for key in ("lam", "xi", "policy_loss"):
            np.testing.assert_allclose(ma[key], mb[key], rtol=1e-4, atol=1e-5)


def _assert_same_run(a_dir, b_dir, algos):
    for algo in algos:
        a, b = _load(a_dir, algo, "test_results.npz"), _load(b_dir, algo, "test_results.npz")
        np.testing.assert_array_equal(a["V"], b["V"])
        np.testing.assert_array_equal(a["C"], b["C"])
        ma, mb = _load(a_dir, algo, "train_metrics.npz"), _load(b_dir, algo, "train_metrics.npz")
        for key in ma:
            np.testing.assert_array_equal(ma[key], mb[key])


class Killed(Exception):
    """Stands for the process being killed (a real signal would end pytest too)."""


@pytest.mark.slow
def test_resume_after_interruption_equals_an_uninterrupted_run(full_run, tmp_path, monkeypatch):
    out = tmp_path / "interrupted"
    # the first family (MDPO-Lag and MDPO-Robust, trained in one program), then a "kill"
    trained = []
    from rcmdp_jax.study import orchestrate

    real = orchestrate.train_prepared

    def train_then_die(prep, label):
        if trained:
            raise Killed(label)
        trained.append(label)
        return real(prep, label)

    monkeypatch.setattr(orchestrate, "train_prepared", train_then_die)
    with pytest.raises(Killed):
        cli.main(TINY + ["--out", str(out)])
    monkeypatch.undo()
    first, second, third = ALGOS.split(",")
    assert (out / "cartpole" / first / "checkpoint").is_dir()
    assert (out / "cartpole" / second / "checkpoint").is_dir()
    assert not (out / "cartpole" / third).exists()
    # a plain rerun refuses to overwrite the folder
    assert cli.main(TINY + ["--out", str(out)]) == 2
    assert cli.main(TINY + ["--out", str(out), "--resume"]) == 0
    _assert_same_run(full_run, out, ALGOS.split(","))
    # a family killed half-saved: resume trains the whole family again, writes the missing member
    shutil.rmtree(out / "cartpole" / second)
    kept = (out / "cartpole" / first / "train_metrics.npz").stat().st_mtime_ns
    assert cli.main(TINY + ["--out", str(out), "--resume"]) == 0
    assert (out / "cartpole" / first / "train_metrics.npz").stat().st_mtime_ns == kept
    _assert_same_run(full_run, out, ALGOS.split(","))


@pytest.mark.slow
def test_a_second_study_in_the_process_reuses_its_compiled_programs(full_run, tmp_path):
    """Run twice in one process (a notebook, the tests): the second run traces and
    compiles nothing of the families, sweeps and layouts (``study.programs``) and gives
    the same numbers; an environment name registered anew is a new program."""
    import dataclasses

    from rcmdp_jax import envs
    from rcmdp_jax.study import programs

    assert cli.main(TINY + ["--out", str(tmp_path / "a")]) == 0  # full_run's programs, unless dropped since
    before = dict(programs.counts)
    assert cli.main(TINY + ["--out", str(tmp_path / "b")]) == 0
    assert programs.counts["built"] == before["built"], (before, programs.counts)
    assert programs.counts["reused"] >= before["reused"] + 3  # two families and the sweep at least
    _assert_same_run(full_run, tmp_path / "b", ALGOS.split(","))
    spec = envs.spec("cartpole")
    try:
        envs.register("programs-test", spec)
        first = programs.env_identity("programs-test")
        envs.register("programs-test", dataclasses.replace(spec))
        assert programs.env_identity("programs-test") != first and programs.env_identity("cartpole") == "cartpole"
    finally:
        envs._REGISTERED.pop("programs-test", None)  # the name is this test's alone


def _copy(run, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(run, out)
    return out


@pytest.mark.slow
def test_eval_only_reruns_the_sweep_from_checkpoints(full_run, tmp_path):
    out = _copy(full_run, tmp_path)  # the shared run stays as it is for the other tests
    before = {a: _load(out, a, "test_results.npz")["V"] for a in ALGOS.split(",")}
    for a in before:
        (out / "cartpole" / a / "test_results.npz").unlink()
    assert cli.main(["--eval-only", str(out)]) == 0
    for a, v in before.items():
        np.testing.assert_array_equal(_load(out, a, "test_results.npz")["V"], v)


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--env", "pendulum"],
            "--env 'pendulum' is not allowed; choose one of: cartpole, inventory, inventory3d, all",
        ),
        (["--env", "inventory@cost_threshold=low"], "--env inventory@cost_threshold=low: environment "
                                                    "'inventory@cost_threshold=low': write inventory@cost_threshold=NUMBER"),
        (["--algos", "MDPO,SAC"], "unknown algorithm 'SAC'"),
        (["--seeds", "0"], "--seeds must be a positive integer"),
        (["--set", "lr"], "--set expects KEY=VALUE, got 'lr'"),
        (["--set", "lrate=1"], "unknown config field(s) ['lrate']"),
        (["--set", "lr=-1"], "lr must be finite and > 0"),
        (["--set", "learner=ppo"], "learner is chosen by --algos, not --set"),
        (["--set", "robust=True"], "robust is chosen by --algos, not --set"),
        (["--set", "env=inventory"], "env is chosen by --env, not --set"),
        (["--set", "policy_hidden=(1.5,)"], "policy_hidden must be a tuple of positive integer layer widths"),
        (["--set", "critic_hidden='abc'"], "critic_hidden must be a tuple of positive integer layer widths"),
        (["--set", "gamma=True"], "gamma must be a number, got True"),
        (["--set", "lr=[1,2]"], "lr must be a number, got [1, 2]"),
        (["--set", "normalize_advantages=0"], "normalize_advantages must be True or False"),
        (["--devices", "99"], "--devices 99: this host has"),
        (["--algos", "MDPO,MDPO"], "--algos names MDPO more than once"),
        (["--algos", "MDPO-Lag@epochs=3"], "ALGO@FIELD=NUMBER with FIELD one of"),
        (["--algos", "MDPO-Lag@lr=1e-3@lr=2e-3"], "lr given twice in MDPO-Lag@lr=1e-3@lr=2e-3"),
        (["--env", "gymnax:Pendulum-v1", "--costs", "theta_dot:nan"], "the limit must be a finite number in float32"),
        (["--env", "gymnax:Pendulum-v1", "--costs", "theta_dot:1e40"], "the limit must be a finite number in float32"),
        (["--set", "dual_estimator=mean"], "dual_estimator='mean' is not allowed"),
        (["--set", "n_steps=1000000000"], "n_envs*n_steps=4000000000 (the batch) is beyond int32"),
        (["--steps", "10000000000"], "total_timesteps=10000000000 is beyond the int32 counters"),
        (["--set", "eval_episodes=100000000"], "GiB of this machine's"),
        (["--set", "policy_hidden=(100000000,)"], "mostly for policy_hidden;"),
        (["--seed", "99999999999999999999"], "--seed must be an integer in [0, 2**32)"),
        (["--set", "lr=1j"], "lr must be a real number, got 1j"),
        (["--set", "lr=1e-300"], "lr must be finite and > 0 in float32"),
        (["--steps", "1600", "--set", "total_timesteps=3200"], "--steps and --set total_timesteps=... both set"),
    ],
)
def test_bad_input_exits_2_with_one_message_and_writes_nothing(tmp_path, capsys, args, message):
    """In process (``cli.main``, what ``run.py`` calls): each case costs milliseconds;
    the next test checks the command itself the same way on one case."""
    out = tmp_path / "never"
    assert cli.main([*args, "--out", str(out)]) == 2
    printed = capsys.readouterr()
    assert message in printed.err
    assert printed.err.strip().count("\n") == 0  # one line
    assert "compiled" not in printed.out
    assert not out.exists()


def test_an_empty_out_or_a_compile_cache_that_is_a_file_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where runs/<timestamp> would go
    assert cli.main(["--out", "", "--seeds", "1"]) == 2
    assert "--out is empty" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    a_file = tmp_path / "cache.txt"
    a_file.write_text("not a folder")
    out = tmp_path / "never"
    assert cli.main(["--compile-cache", str(a_file), "--out", str(out), "--seeds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--compile-cache" in err and "cannot use it as a folder" in err and err.count("\n") == 0
    assert a_file.read_text() == "not a folder" and not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [(["--set", "lr=-1"], "lr must be finite and > 0")])
def test_bad_input_to_the_command_exits_2_with_one_line(tmp_path, args, message):
    out = tmp_path / "never"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, str(RUN_PY), *args, "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and proc.stderr.startswith("run.py: error:")
    assert proc.stderr.strip().count("\n") == 0  # one line
    assert "compiled" not in proc.stdout
    assert not out.exists()


def test_a_diverged_run_is_never_shown_as_a_result(tmp_path, capsys):
    out = tmp_path / "diverged"
    tiny = [a if a != ALGOS else "MDPO-Lag,MDPO" for a in TINY]
    # an absurd learning rate (finite, so accepted) makes MDPO-Lag's weights overflow to NaN
    assert cli.main(tiny + ["--out", str(out), "--set", "lr=1e30"]) == 4
    printed = capsys.readouterr().out
    assert "DIVERGED" in printed
    env_dir = out / "cartpole"
    for algo in ("MDPO-Lag", "MDPO"):
        res = _load(out, algo, "test_results.npz")
        assert res["diverged"].shape == (2,) and res["diverged"].all()
        assert json.loads((env_dir / algo / "diverged.json").read_text())["seeds"] == [0, 1]
    md = (env_dir / "summary.md").read_text()
    assert "MDPO-Lag (0/2 seeds; 2 diverged) | diverged: no seed left" in md and "**" not in md
    summary = json.loads((env_dir / "summary.json").read_text())
    assert summary["MDPO-Lag"]["seeds_used"] == 0 and "Return" not in summary["MDPO-Lag"]


def test_one_diverged_seed_of_a_batch_is_found_and_the_others_kept():
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import make_train, preset
    from rcmdp_jax.divergence import diverged_seeds

    cfg = preset("cartpole", "MDPO-Lag", total_timesteps=128, n_steps=16, minibatch_size=16, eval_episodes=2)
    hp = jax.tree.map(lambda x: jnp.full((3,), x, jnp.float32), cfg.hparams).replace(lr=jnp.array([3e-4, 1e30, 3e-4]))
    result = jax.jit(jax.vmap(make_train(cfg)))(jax.random.split(jax.random.PRNGKey(0), 3), hp)
    np.testing.assert_array_equal(diverged_seeds(result), [False, True, False])


def test_a_partly_diverged_algorithm_is_summarised_over_its_other_seeds_and_never_marked():
    from rcmdp_jax.study import report

    rng = np.random.default_rng(0)
    good = (rng.normal(10.0, 1.0, (3, 2, 2, 4)), rng.normal(-1.0, 0.1, (3, 2, 2, 4, 1)))
    better = (good[0][:2] + 100.0, good[1][:2])  # 2 of 3 seeds left, far ahead
    rows = report.summary_rows({"A": good, "B": better, "C": None}, 50.0, {"A": (3, 3), "B": (2, 3), "C": (0, 3)})
    cells = {algo: c for algo, _, c in rows}
    labels = {algo: label for algo, label, _ in rows}
    assert labels["B"] == "B (2/3 seeds; 1 diverged)" and cells["C"] is None
    assert cells["A"]["Return"][1] and not cells["B"]["Return"][1]  # B is never marked, A is the best complete one
    assert cells["B"]["Return"][0].mean == pytest.approx(better[0].mean())
    assert "| C (0/3 seeds; 3 diverged) | diverged: no seed left | | |" in report.markdown_table(rows)


@pytest.mark.parametrize(
    "hparams,message",
    [(dict(lr=float("inf")), "lr must be finite"), (dict(gamma=2.0), "gamma must be in"),
     (dict(lr=float("nan")), "lr must be finite"), (dict(vf_coef=float("nan")), "vf_coef must be finite"),
     (dict(eta_lam=1e300), "eta_lam must be finite")],
)  # fmt: skip
def test_bad_hparams_through_the_api_are_refused_before_training(hparams, message):
    import jax

    from rcmdp_jax import make_train, preset

    cfg = preset("cartpole", "MDPO-Lag", total_timesteps=64, n_steps=16, minibatch_size=16)
    with pytest.raises(ValueError, match=message):
        make_train(cfg)(jax.random.PRNGKey(0), cfg.hparams.replace(**hparams))


@pytest.mark.parametrize("xi", [[1.0, 1.0, 1.0, 2.0], [1.0, float("nan"), 1.0, 1.0]])
def test_a_kernel_outside_the_box_is_refused(xi):
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import envs, make_train, preset

    _, params = envs.make("cartpole")
    cfg = preset("cartpole", "MDPO", total_timesteps=64, n_steps=16, minibatch_size=16)
    with pytest.raises(ValueError, match="xi"):
        make_train(cfg)(jax.random.PRNGKey(0), None, params.replace(xi=jnp.array(xi)))


def test_an_output_folder_that_cannot_be_made_is_one_line(capsys):
    assert cli.main(TINY + ["--out", "/proc/rcmdp-x"]) == 2
    err = capsys.readouterr().err
    assert "--out /proc/rcmdp-x: cannot create the run folder" in err and err.count("\n") == 1


def test_bad_run_folders_are_one_line_errors(tmp_path, capsys):
    import report

    assert cli.main(["--eval-only", str(tmp_path / "nowhere")]) == 2
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "run.json").write_text('{"hello": 1}')
    assert cli.main(["--eval-only", str(tmp_path / "foreign")]) == 2
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{not json")
    assert cli.main(["--resume", "--out", str(tmp_path / "broken")] + TINY[:2]) == 2
    assert report.main([str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "is not a run folder" in err and "not a run.json of this runner (missing" in err
    assert "cannot read" in err and f"report: error: RUN_DIR: {tmp_path / 'nowhere'} is not a run folder" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_stale_results_are_never_served(full_run, tmp_path, capsys):
    import report

    out = _copy(full_run, tmp_path)
    env_dir = out / "cartpole"
    # eval-only with a checkpoint gone: non-zero, names it, and its stale row leaves the table
    shutil.rmtree(env_dir / "PPO-Lag" / "checkpoint")
    assert cli.main(["--eval-only", str(out)]) == 5
    assert "no checkpoint for cartpole/PPO-Lag" in capsys.readouterr().err
    assert "PPO-Lag" not in (env_dir / "summary.md").read_text()
    # --eval-only cannot silently ignore another --n-test
    assert cli.main(["--eval-only", str(out), "--n-test", "50"]) == 2
    assert "--n-test" in capsys.readouterr().err
    # report.py refuses when an algorithm's test results are missing, and rewrites nothing
    before = (env_dir / "summary.md").read_text()
    (env_dir / "MDPO-Lag" / "test_results.npz").unlink()
    assert report.main([str(out)]) == 2
    assert "no test results for cartpole/MDPO-Lag" in capsys.readouterr().err
    assert (env_dir / "summary.md").read_text() == before


@pytest.mark.slow
def test_report_on_results_with_nan_says_so_instead_of_nan(full_run, tmp_path, capsys):
    import report

    out = _copy(full_run, tmp_path)
    path = out / "cartpole" / "PPO-Lag" / "test_results.npz"
    z = dict(np.load(path))
    z.pop("diverged")  # as written by an older runner, without the flag
    z["V"][1, 3, 2, 0] = np.nan
    np.savez_compressed(path, **z)
    assert report.main([str(out)]) == 0
    md = (out / "cartpole" / "summary.md").read_text()
    assert "nan" not in md and "PPO-Lag (1/2 seeds; 1 diverged)" in md


@pytest.mark.slow
def test_report_on_a_results_file_of_another_environment_is_one_line(full_run, tmp_path, capsys):
    """A test_results.npz copied in from a run on another environment (4 kernels, not
    CartPole's 16): one line naming it, nothing rewritten (not an IndexError)."""
    import report

    out = _copy(full_run, tmp_path)
    path = out / "cartpole" / "PPO-Lag" / "test_results.npz"
    z = dict(np.load(path))
    z["V"], z["C"] = z["V"][:, :, :4], z["C"][:, :, :4]
    np.savez_compressed(path, **z)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert report.main([str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "PPO-Lag/test_results.npz holds results of shape (11, 4, 3)" in err, err
    assert "MDPO-Lag's (11, 16, 3): it is not this run's" in err, err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_the_schedules_study_writes_one_table(tmp_path):
    out = tmp_path / "schedules"
    args = ["--schedules", "--env", "inventory", "--seeds", "1", "--steps", "64", "--n-test", "1",
            "--set", "n_steps=16", "--set", "minibatch_size=16", "--set", "ltma_iterations=2",
            "--set", "eval_episodes=2", "--out", str(out)]  # fmt: skip
    assert cli.main(args) == 0
    md = (out / "inventory" / "summary.md").read_text()
    table = md.split("\n## ")[0]  # the study's table (the rliable and state-bound sections follow)
    rows = [line for line in table.splitlines() if line.startswith("| MDPO-Robust")]
    assert len(rows) == 21 and rows[0].startswith("| MDPO-Robust:fixed |")
    assert "| MDPO-Robust-Augmented-Lag:restart-batch |" in md
    assert (out / "inventory" / "test_return.png").stat().st_size > 0
    timing = json.loads((out / "inventory" / "MDPO-Robust_fixed" / "timing.json").read_text())  # a plain folder name
    assert len(timing["family"]) == 21  # every variant in one compiled program


@pytest.mark.slow
def test_resume_names_the_option_that_differs(full_run, tmp_path, capsys):
    out = _copy(full_run, tmp_path)
    assert cli.main(TINY + ["--out", str(out), "--resume", "--seeds", "3"]) == 2
    assert "the options differ from the run in" in capsys.readouterr().err
    assert cli.main(TINY + ["--out", str(out), "--resume", "--set", "eta_lam=0.5"]) == 2
    err = capsys.readouterr().err
    assert "(configs: cartpole/MDPO-Lag: eta_lam; cartpole/MDPO-Robust: eta_lam; cartpole/PPO-Lag: eta_lam)" in err


@pytest.mark.slow
def test_resume_of_a_run_written_before_a_config_field_existed(full_run, tmp_path, capsys):
    """An older version's run.json lacks fields added since (e.g. ``dual_dropout``): they
    count as their defaults, what that version ran, so the run resumes; one written when the
    robust methods' options were flat fields (``"ltma_estimator": "score"``) reads into
    ``Config.options``; a field or option whose value this command changes is named."""
    out = _copy(full_run, tmp_path)
    plan = json.loads((out / "run.json").read_text())
    for cfg in plan["configs"]["cartpole"].values():
        assert cfg.pop("dual_dropout") is False
        cfg.update({k: v for k, v in cfg.pop("options") if k != "dual_reading"})  # the flat form
        cfg["options"] = []
    assert all(c["ltma_estimator"] == "score" for c in plan["configs"]["cartpole"].values() if c["robust"])
    (out / "run.json").write_text(json.dumps(plan))
    before = _load(out, "PPO-Lag", "test_results.npz")["V"]
    assert cli.main(TINY + ["--out", str(out), "--resume"]) == 0
    np.testing.assert_array_equal(_load(out, "PPO-Lag", "test_results.npz")["V"], before)
    capsys.readouterr()
    assert cli.main(TINY + ["--out", str(out), "--resume", "--set", "ltma_estimator=pathwise"]) == 2
    assert "cartpole/MDPO-Lag: ltma_estimator" in capsys.readouterr().err


@pytest.mark.slow
def test_resume_with_a_damaged_checkpoint_retrains_only_that_family(full_run, tmp_path, capsys):
    out = _copy(full_run, tmp_path)
    env_dir = out / "cartpole"
    # a checkpoint whose metadata file is missing (killed while saving) and whose results are gone
    (env_dir / "PPO-Lag" / "checkpoint" / "_CHECKPOINT_METADATA").unlink()
    (env_dir / "PPO-Lag" / "test_results.npz").unlink()
    kept = (env_dir / "MDPO-Lag" / "train_metrics.npz").stat().st_mtime_ns
    assert cli.main(TINY + ["--out", str(out), "--resume"]) == 0
    assert "incomplete checkpoint of PPO-Lag moved to" in capsys.readouterr().out
    assert (env_dir / "PPO-Lag" / "checkpoint.damaged").is_dir()
    assert (env_dir / "MDPO-Lag" / "train_metrics.npz").stat().st_mtime_ns == kept
    _assert_same_run(full_run, out, ["PPO-Lag"])
    # a truncated checkpoint (metadata there, data gone) with results missing: set aside, named
    for f in (env_dir / "PPO-Lag" / "checkpoint").iterdir():
        if f.name != "_CHECKPOINT_METADATA":
            shutil.rmtree(f) if f.is_dir() else f.unlink()
    (env_dir / "PPO-Lag" / "test_results.npz").unlink()
    assert cli.main(TINY + ["--out", str(out), "--resume"]) == 5
    assert "damaged checkpoint" in capsys.readouterr().out
    assert cli.main(TINY + ["--out", str(out), "--resume"]) == 0  # and the next resume retrains it
    _assert_same_run(full_run, out, ["PPO-Lag"])


@pytest.mark.slow
def test_ctrl_c_is_a_short_message_without_traceback(tmp_path):
    import signal
    import time

    out = tmp_path / "interrupted"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    # one algorithm (one small program: the sigterm test in test_hostile_run_folder.py runs the
    # same, so the session's compilation cache serves one of the two), long enough to be
    # interrupted while training
    args = ["--algos", "MDPO-Lag", *TINY[2:]]
    args = [a if a != "128" else "64000" for a in args]
    proc = subprocess.Popen(
        [sys.executable, str(RUN_PY), *args, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    for line in proc.stdout:
        if "compiled in" in line:
            break
    proc.send_signal(signal.SIGINT)
    t0 = time.perf_counter()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "--resume" in err and "Traceback" not in err
    assert time.perf_counter() - t0 < 5.0


def test_existing_output_folder_is_never_overwritten(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    assert cli.main(TINY + ["--out", str(out)]) == 2
    assert (out / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt"]


@pytest.mark.slow
def test_worst_case_flag_puts_the_search_next_to_the_grid(tmp_path):
    out = tmp_path / "worst"
    args = ["--env", "inventory", "--algos", "MDPO-Lag", "--seeds", "2", "--steps", "64", "--n-test", "3",
            "--set", "n_steps=16", "--set", "minibatch_size=16", "--set", "eval_episodes=2", "--worst-case"]  # fmt: skip
    assert cli.main(args + ["--out", str(out)]) == 0
    env_dir = out / "inventory"
    z = np.load(env_dir / "MDPO-Lag" / "worst_case.npz")
    assert sorted(z.files) == sorted(
        f"{o}/{f}" for o in ("return", "r_pen", "cost0") for f in ("xi", "episodes", "history")
    )
    assert z["return/xi"].shape == (2, 5, 2) and z["return/episodes"].shape == (2, 5, 100, 2)
    xi_c, kappa = np.array([-2.0, 3.5]), np.array([15.0, 15.0])
    for o in ("return", "r_pen", "cost0"):
        assert np.all(np.abs(z[f"{o}/xi"] - xi_c) <= kappa + 1e-4), o
    # the table's numbers, recomputed from the saved episodes
    V = np.load(env_dir / "MDPO-Lag" / "test_results.npz")["V"]
    wc = json.loads((env_dir / "worst_case.json").read_text())["per_algorithm"]["MDPO-Lag"]["Return"]
    np.testing.assert_allclose(wc["grid"], V.mean(-1).reshape(2, -1).min(1), rtol=1e-6)
    np.testing.assert_allclose(wc["search"], z["return/episodes"][..., 0].mean(-1).min(1), rtol=1e-6)
    md = (env_dir / "summary.md").read_text()
    assert "Worst case: the grid's vs a gradient search's" in md
    assert f"| MDPO-Lag | {np.mean(wc['grid']):.2f} | {np.mean(wc['search']):.2f} (" in md
    # a run stopped between the test and the search: --resume searches, to the same numbers (up to
    # float rounding: the policy now comes from the checkpoint, and the search may be compiled anew)
    (env_dir / "MDPO-Lag" / "worst_case.npz").unlink()
    assert cli.main(args + ["--out", str(out), "--resume"]) == 0
    again = np.load(env_dir / "MDPO-Lag" / "worst_case.npz")
    for key in z.files:
        np.testing.assert_allclose(again[key], z[key], rtol=1e-5, atol=1e-5, err_msg=key)
    np.testing.assert_array_equal(np.load(env_dir / "MDPO-Lag" / "test_results.npz")["V"], V)


@pytest.mark.slow
def test_run_folder_rules_eval_only_resume_lock_and_damaged_files(full_run, tmp_path, capsys):
    """--eval-only refuses the options it would ignore; --resume refuses a different
    --worst-case and an edited run.json; a second process is refused by the folder's
    lock (a dead process's lock is taken over); a truncated result file is one line in
    report.py, and --resume re-creates it (re-sweep, metrics from the checkpoint)."""
    import os
    import subprocess

    import report

    out = _copy(full_run, tmp_path)
    env_dir = out / "cartpole"
    summary = (env_dir / "summary.md").read_text()
    for extra, name in ((["--set", "lr=nan"], "--set"), (["--seeds", "0"], "--seeds"), (["--env", "nope"], "--env"),
                        (["--out", str(tmp_path / "x")], "--out"), (["--resume"], "--resume")):  # fmt: skip
        assert cli.main(["--eval-only", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert f"does not use {name}" in err and err.count("\n") == 1, err
    assert (env_dir / "summary.md").read_text() == summary and not (tmp_path / "x").exists()
    assert cli.main(TINY + ["--out", str(out), "--resume", "--worst-case"]) == 2
    assert "options differ" in capsys.readouterr().err
    plan = json.loads((out / "run.json").read_text())
    for edit, message in (({"seeds": 3}, "run.json says 3 seed(s) but cartpole/MDPO-Lag was trained with 2"),
                          ({"algos": "MDPO-Lag"}, "envs and algos must be lists of distinct names")):  # fmt: skip
        (out / "run.json").write_text(json.dumps({**plan, **edit}))
        assert cli.main(["--eval-only", str(out)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    (out / "run.json").write_text(json.dumps(plan))
    # the lock: a running process holds it (flock); a dead one's is taken over
    hold = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode()); print(1, flush=True); "
            "time.sleep(60)")  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()  # held
        assert cli.main(["--eval-only", str(out)]) == 2
        assert f"in use by another run or report (PID {holder.pid})" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert cli.main(["--eval-only", str(out)]) == 0  # the lock's process is gone: taken over
    assert not (out / ".lock").exists()  # and released
    # truncated files: report.py says so in one line; --resume re-creates them
    metrics = env_dir / "PPO-Lag" / "train_metrics.npz"
    tests = env_dir / "MDPO-Lag" / "test_results.npz"
    want_metrics, want_tests = _load(out, "PPO-Lag", "train_metrics.npz"), _load(out, "MDPO-Lag", "test_results.npz")
    for path in (metrics, tests):
        path.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])
    capsys.readouterr()
    assert report.main([str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot be read" in err and "--resume re-creates it" in err and err.count("\n") == 1, err
    assert cli.main(TINY + ["--out", str(out), "--resume"]) == 0
    assert "train_metrics.npz could not be read: re-created from the checkpoint" in capsys.readouterr().out
    for got, want in ((_load(out, "PPO-Lag", "train_metrics.npz"), want_metrics),
                      (_load(out, "MDPO-Lag", "test_results.npz"), want_tests)):  # fmt: skip
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)

"""The runner end to end on a tiny budget (``full_run``, conftest.py): the study's
artifacts and table (the statistics of the saved episodes), vmap = no-vmap, resume after
an interruption = an uninterrupted run, then a second study in the same process, the
schedules and worst-case studies, Ctrl-C on the command. (Eval-only on a copy of
``full_run``: ``test_cli_resume.py``'s run folder rules.)"""

import json
import os
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import RUN_PY, _assert_same_run, _load
from tiny_configs import ALGOS, QUICK, TINY

from rcmdp_jax import stats
from rcmdp_jax.study import cli


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
    """``--no-vmap`` (a Python loop over seeds, one program per algorithm) of the study's robust
    algorithm against its lanes in the vmapped family of ``full_run`` (same seeds: they do not
    depend on ``--algos``); the loop is the same for every algorithm."""
    out = tmp_path / "loop"
    algo = "MDPO-Robust"
    assert algo in ALGOS.split(",")
    assert cli.main(TINY + QUICK + ["--no-vmap", "--algos", algo, "--out", str(out)]) == 0
    a, b = _load(full_run, algo, "test_results.npz"), _load(out, algo, "test_results.npz")
    # batched and unbatched matmuls round differently in the last bits; over a run that
    # can flip a rare test episode (an argmax near a tie), never the statistics
    close = np.isclose(a["V"], b["V"], rtol=1e-4, atol=1e-4)
    assert close.mean() > 0.99, close.mean()
    assert abs(a["V"].mean() - b["V"].mean()) < 1e-3 * (1 + abs(a["V"].mean()))
    ma, mb = _load(full_run, algo, "train_metrics.npz"), _load(out, algo, "train_metrics.npz")
    for key in ("lam", "xi", "policy_loss"):
        np.testing.assert_allclose(ma[key], mb[key], rtol=1e-4, atol=1e-5)


class Killed(Exception):
    """Stands for the process being killed (a real signal would end pytest too)."""


@pytest.mark.slow
def test_resume_after_interruption_equals_an_uninterrupted_run_and_a_second_study_compiles_nothing(
    full_run, tmp_path, monkeypatch
):
    """Killed after the first family: --resume (with no other option) gives the uninterrupted run's numbers, and
    again after a family half saved; then a second study in this process (the programs are
    all here now) builds nothing (``_a_second_study_reuses_the_compiled_programs``)."""
    out = tmp_path / "interrupted"
    # the first family (MDPO-Lag and MDPO-Robust, trained in one program), then a "kill"
    trained = []
    from rcmdp_jax.study import orchestrate

    real = orchestrate.train_prepared

    def train_then_die(prep, label, log=None, snapshot=None):
        if trained:
            raise Killed(label)
        trained.append(label)
        return real(prep, label, log, snapshot)

    monkeypatch.setattr(orchestrate, "train_prepared", train_then_die)
    with pytest.raises(Killed):
        cli.main(TINY + QUICK + ["--out", str(out)])
    monkeypatch.undo()
    first, second, third = ALGOS.split(",")
    assert (out / "cartpole" / first / "checkpoint").is_dir()
    assert (out / "cartpole" / second / "checkpoint").is_dir()
    assert not (out / "cartpole" / third).exists()
    # a plain rerun refuses to overwrite the folder
    assert cli.main(TINY + ["--out", str(out)]) == 2
    assert cli.main(["--out", str(out), "--resume", *QUICK]) == 0  # the run's options from its run.json
    _assert_same_run(full_run, out, ALGOS.split(","))
    # a family killed half-saved: resume trains the whole family again, writes the missing member
    shutil.rmtree(out / "cartpole" / second)
    kept = (out / "cartpole" / first / "train_metrics.npz").stat().st_mtime_ns
    assert cli.main(TINY + QUICK + ["--out", str(out), "--resume"]) == 0
    assert (out / "cartpole" / first / "train_metrics.npz").stat().st_mtime_ns == kept
    _assert_same_run(full_run, out, ALGOS.split(","))
    _a_second_study_reuses_the_compiled_programs(full_run, tmp_path)


def _a_second_study_reuses_the_compiled_programs(full_run, tmp_path):
    """Run again in one process (a notebook, the tests; the resumed runs above built the
    programs here): the second run traces and compiles nothing of the families, sweeps
    and layouts (``chunked.cached``) and gives the same numbers; an environment name
    registered anew is a new program."""
    import dataclasses

    from rcmdp_jax import chunked as compiled
    from rcmdp_jax import envs

    before = dict(compiled.counts)
    assert cli.main(TINY + QUICK + ["--out", str(tmp_path / "b")]) == 0
    assert compiled.counts["built"] == before["built"], (before, compiled.counts)
    assert compiled.counts["reused"] >= before["reused"] + 3  # two families and the sweep at least
    _assert_same_run(full_run, tmp_path / "b", ALGOS.split(","))
    spec = envs.spec("cartpole")
    try:
        envs.register("programs-test", spec)
        first = compiled.env_identity("programs-test")
        envs.register("programs-test", dataclasses.replace(spec))
        assert compiled.env_identity("programs-test") != first and compiled.env_identity("cartpole") == "cartpole"
    finally:
        envs._REGISTERED.pop("programs-test", None)  # the name is this test's alone


@pytest.mark.slow
def test_the_schedules_study_writes_one_table(tmp_path):
    out = tmp_path / "schedules"
    args = ["--schedules", "--env", "inventory", "--seeds", "1", "--steps", "64", "--n-test", "1",
            "--set", "n_steps=16", "--set", "minibatch_size=16", "--set", "ltma_iterations=2",
            "--set", "eval_episodes=2", *QUICK, "--out", str(out)]  # fmt: skip
    assert cli.main(args) == 0
    md = (out / "inventory" / "summary.md").read_text()
    table = md.split("\n## ")[0]  # the study's table (the rliable and state-bound sections follow)
    rows = [line for line in table.splitlines() if line.startswith("| MDPO-Robust")]
    assert len(rows) == 21 and rows[0].startswith("| MDPO-Robust:fixed |")
    assert "| MDPO-Robust-Augmented-Lag:restart-batch |" in md  # (many lines told apart: test_report_readable.py)
    timing = json.loads((out / "inventory" / "MDPO-Robust_fixed" / "timing.json").read_text())  # a plain folder name
    assert len(timing["family"]) == 21  # every variant in one compiled program


@pytest.mark.slow
def test_worst_case_flag_puts_the_search_next_to_the_grid(tmp_path):
    out = tmp_path / "worst"
    args = ["--env", "inventory", "--algos", "MDPO-Lag", "--seeds", "2", "--steps", "64", "--n-test", "3",
            "--set", "n_steps=16", "--set", "minibatch_size=16", "--set", "eval_episodes=2", "--worst-case", *QUICK]  # fmt: skip
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
def test_ctrl_c_is_a_short_message_without_traceback(tmp_path):
    import signal
    import time

    out = tmp_path / "interrupted"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    # one algorithm (one small program: the sigterm test in test_run_folder_writes.py runs the
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
    said = "finished algorithms are saved (a family in training from its last snapshot, if one was written)"
    assert err.strip().startswith(f"run.py: interrupted: {said}; continue with "), err
    assert time.perf_counter() - t0 < 5.0
    # the command it prints resumes as it stands: run.json holds the options (test_resume_options.py)
    assert f"continue with python {shlex.quote(str(RUN_PY))} --resume --out {shlex.quote(str(out))}\n" in err, err

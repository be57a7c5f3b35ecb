"""experiments/launch.py, what every experiment script shares: the resumable launch of the
runner, its one exit-code rule (0 and 3 read the folder, everything else stops the script), one
mean ± SE and one machine description; the job pool under the same rule; dual_reading.py's
table drops the seeds the run's report drops. A stand-in runner (a script that exits with the
status it is given) takes run.py's place: nothing trains."""

import sys
import textwrap

import dual_reading
import job_pool
import launch
import numpy as np
import pytest

FAKE_RUNNER = textwrap.dedent(
    """
    import sys
    args = sys.argv[1:]
    print("ran", " ".join(args))
    sys.exit(int(args[args.index("--status") + 1]))
    """
)


@pytest.fixture
def runner(tmp_path):
    path = tmp_path / "fake_run.py"
    path.write_text(FAKE_RUNNER)
    return path


def test_the_command_resumes_exactly_when_run_json_is_there(tmp_path):
    out = tmp_path / "run"
    cmd = launch.command(out, ["--env", "cartpole", "--seeds", 2])
    assert cmd == [sys.executable, str(launch.RUN_PY), "--env", "cartpole", "--seeds", "2", "--out", str(out)]
    out.mkdir()
    assert "--resume" not in launch.command(out, [])  # a folder alone is no started run
    (out / "run.json").write_text("{}")
    assert launch.command(out, ["--seeds", "2"])[-3:] == ["--out", str(out), "--resume"]


@pytest.mark.parametrize("status", [0, 3])
def test_finished_statuses_are_returned_and_logged(tmp_path, runner, status):
    log = tmp_path / "logs" / "one.log"
    assert launch.launch(tmp_path / "run", ["--status", status], log=log, program=runner) == status
    assert launch.launch(tmp_path / "run", ["--status", status], log=log, program=runner) == status
    lines = log.read_text().splitlines()
    assert lines == [f"ran --status {status} --out {tmp_path / 'run'}"] * 2  # appended, not overwritten


@pytest.mark.parametrize("status,words", [(2, "bad input"), (4, "no seed left"), (5, "checkpoint"),
                                          (143, "SIGTERM"), (1, "a crash")])  # fmt: skip
def test_every_other_status_stops_the_script_naming_it(tmp_path, runner, status, words):
    log = tmp_path / "one.log"
    with pytest.raises(launch.LaunchFailed) as err:
        launch.launch(tmp_path / "run", ["--status", status], log=log, program=runner)
    assert err.value.status == status
    message = str(err.value.code)
    assert f"exited with status {status} ({launch.explain(status)})" in message and words in message
    assert str(runner) in message and str(log) in message
    # the same status without check: returned, for a script that reports it its own way
    assert launch.launch(tmp_path / "run", ["--status", status], log=log, program=runner, check=False) == status


def test_the_rule_is_one_tuple():
    assert [s for s in range(-20, 256) if launch.finished(s)] == [0, 3]


def test_mean_se_by_hand():
    m, se = launch.mean_se([1.0, 2.0, 6.0])  # mean 3, sample std sqrt(7), n 3
    assert m == pytest.approx(3.0) and se == pytest.approx(np.sqrt(7.0 / 3.0))
    assert launch.mean_se([4.0]) == (4.0, 0.0)
    assert all(np.isnan(launch.mean_se([])))
    assert launch.format_mean_se([1.0, 2.0, 6.0]) == "+3.00 ± 1.53"
    assert launch.format_mean_se([-0.5, -0.5], digits=3) == "-0.500 ± 0.000"
    assert launch.format_mean_se([]) == "–"


def test_the_machine_is_described_once():
    m = launch.machine()
    assert set(m) == {"cpu", "cores", "python"} and m["cores"] >= 1 and m["cpu"]
    assert launch.describe(m) == f"{m['cores']}-core {m['cpu']}"
    with_jax = launch.machine(devices=True)
    assert {"backend", "devices", "jax"} <= set(with_jax)
    assert launch.describe(with_jax).endswith(f", {with_jax['backend']} backend, JAX {with_jax['jax']}")


def test_the_pool_goes_on_after_diverged_seeds_and_stops_on_anything_else(tmp_path, runner):
    done = []
    ok = [(f"job{s}", launch.command(tmp_path / f"r{s}", ["--status", s], program=runner)) for s in (0, 3)]
    job_pool.run_pool(ok, 2, lambda s: None, lambda name, seconds: done.append(name), logs=tmp_path)
    assert sorted(done) == ["job0", "job3"]
    assert (tmp_path / "job3.log").read_text().startswith("ran --status 3")
    bad = [("job4", launch.command(tmp_path / "r4", ["--status", 4], program=runner))]
    with pytest.raises(SystemExit, match=r"job4: exited with status 4 \(an algorithm has no seed left\)"):
        job_pool.run_pool(bad, 1, lambda s: None, lambda name, seconds: done.append(name))
    assert "job4" not in done


def test_dual_reading_drops_the_seeds_the_report_drops(tmp_path):
    # 4 seeds, 2 levels x 1 direction x 3 episodes, one constraint: seed 1 diverged in training,
    # seed 2 has a non-finite test episode; the report keeps seeds 0 and 3 (run_folder.kept_seeds)
    S, L, D, E = 4, 2, 1, 3
    C = np.zeros((S, L, D, E, 1))
    C[:, :, :, :, 0] = np.array([-1.0, 50.0, 0.5, 1.0])[:, None, None, None]
    C[0, 1] = 0.25  # seed 0's worst kernel
    V = np.ones((S, L, D, E)) * np.array([10.0, -99.0, 7.0, 20.0])[:, None, None, None]
    V[2, 1, 0, 0] = np.nan
    algo = "PPO-Lag+corners"
    folder = tmp_path / "cartpole" / dual_reading.slug(algo)
    folder.mkdir(parents=True)
    np.savez(folder / "test_results.npz", C=C, V=V, diverged=np.array([False, True, False, False]))
    r = dual_reading.per_seed(tmp_path, algo)
    assert (r["seeds"], r["trained"]) == (2, 4)
    assert r["C_nominal"] == [-1.0, 1.0] and r["C_worst"] == [0.25, 1.0] and r["V_nominal"] == [10.0, 20.0]

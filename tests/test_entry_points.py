"""The commands beside the runner keep its promises: ``rcmdp report`` under SIGINT/SIGTERM
(130 / 143, one line, the report's files all old or all new); one run-folder check
(``RunFolder.open``) for ``--resume``, ``--eval-only``, ``rcmdp report``, ``rcmdp eval`` and
``load_policy``, which refuses an edited run.json and results of the wrong shape; ``rcmdp
eval``'s and ``act``'s inputs; the ``--costs`` discount; feasibility's refusals before its
folder exists, its partial file checked, and its one-policy value measured on ``n_test``
episodes; and a table of the smaller messages. Copies of the session's ``trained`` run
(conftest.py); each refusal is one line, exit 2, nothing changed."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_helpers import FEAS, _copy, _one_line, _snapshot
from tiny_configs import HOSTILE_TINY as TINY

from rcmdp_jax import load_policy
from rcmdp_jax.study import cli, console
from rcmdp_jax.study.run_plan import PlanError, RunFolderError

ALGO = "MDPO-Lag"  # the one algorithm of ``trained``


def _edited(trained, tmp_path, edit) -> Path:
    out = _copy(trained, tmp_path)
    plan = json.loads((out / "run.json").read_text())
    edit(plan)
    (out / "run.json").write_text(json.dumps(plan, indent=2))
    return out


# ------------------------------------------------------------------ one run-folder check
EDITS = {
    "seed 0 -> 1": (lambda p: p.update(seed=1), "was trained with seed 0"),
    "n_test 3 -> 5": (lambda p: p.update(n_test=5), "run.json says 5 test episode(s)"),
    "seeds 2 -> 3": (lambda p: p.update(seeds=3), "run.json says 3 seed(s)"),
    "policy_hidden": (lambda p: p["configs"]["cartpole"][ALGO].update(policy_hidden=[32, 32]),
                      "does not match its checkpoint"),
}  # fmt: skip


@pytest.mark.parametrize("what", list(EDITS))
def test_eval_and_load_policy_refuse_an_edited_run_folder(trained, tmp_path, capsys, what):
    edit, words = EDITS[what]
    out = _edited(trained, tmp_path, edit)
    before = _snapshot(out)
    for seed in ("0", "2") if what.startswith("seeds") else ("0",):  # seeds 2 -> 3: seed 2 was an IndexError
        assert console.main(["eval", str(out), "--algo", ALGO, "--seed", seed]) == 2
        _one_line(capsys, "rcmdp eval: error:", words)
    with pytest.raises(ValueError, match=re.escape(words)) as err:
        load_policy(out, ALGO, 0)
    assert "\n" not in str(err.value)
    assert _snapshot(out) == before


def test_one_check_serves_every_command(trained, tmp_path, capsys, monkeypatch):
    """--resume, --eval-only, report, eval and load_policy all ask ``RunFolder.open``."""
    from rcmdp_jax.study.run_folder import RunFolder

    def refused(self, flag, results=True, rewrites=True):
        raise RunFolderError(f"{flag}: the one check refused it")

    monkeypatch.setattr(RunFolder, "open", refused)
    out = _copy(trained, tmp_path)
    before = _snapshot(out)
    for argv in (["--eval-only", str(out)], TINY + ["--resume", "--out", str(out)]):
        assert cli.main(argv) == 2
        _one_line(capsys, "the one check refused it")
    for argv in (["report", str(out)], ["eval", str(out), "--algo", ALGO, "--seed", "0"]):
        assert console.main(argv) == 2
        _one_line(capsys, "the one check refused it")
    with pytest.raises(RunFolderError, match="the one check refused it"):
        load_policy(out, ALGO, 0)
    assert _snapshot(out) == before


@pytest.mark.slow
def test_results_of_the_wrong_shape_are_refused_and_eval_only_makes_them_again(trained, tmp_path, capsys):
    out = _copy(trained, tmp_path)
    path = out / "cartpole" / ALGO / "test_results.npz"
    whole = dict(np.load(path))
    np.savez_compressed(path, **{**whole, "V": whole["V"][:1]})  # one of two seeds' V
    before = _snapshot(out)
    assert console.main(["report", str(out)]) == 2
    _one_line(capsys, "test_results.npz holds V of shape (1,", "--eval-only")
    assert cli.main(TINY + ["--resume", "--out", str(out)]) == 2
    _one_line(capsys, "test_results.npz holds V of shape (1,", "--eval-only")
    assert _snapshot(out) == before
    assert cli.main(["--eval-only", str(out)]) == 0
    np.testing.assert_array_equal(np.load(path)["V"], whole["V"])


# ------------------------------------------------------------------ rcmdp report under signals
def _report_interrupted(out: Path, sig, when) -> tuple[int, str]:
    """``rcmdp report`` in a subprocess, sent ``sig`` after ``when`` seconds, or (``when`` None)
    half a second after its report's stage appears (mid-report)."""
    env_dir = out / "cartpole"
    proc = subprocess.Popen([sys.executable, "-m", "rcmdp_jax", "report", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))  # fmt: skip
    if when is None:
        t0 = time.monotonic()
        while not list(env_dir.glob(".report-*")) and time.monotonic() - t0 < 60 and proc.poll() is None:
            time.sleep(0.05)
        when = 0.5
    time.sleep(when)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.slow
def test_report_under_sigint_and_sigterm_exits_130_143_and_keeps_the_old_files(trained, tmp_path):
    base = _copy(trained, tmp_path)
    assert console.report([str(base)]) == 0  # the figures too: a report to keep
    for i, (sig, when) in enumerate([(signal.SIGINT, 1.0), (signal.SIGINT, None), (signal.SIGTERM, None)]):
        out = tmp_path / f"run{i}"
        subprocess.run(["cp", "-a", str(base), str(out)], check=True)
        env_dir = out / "cartpole"
        inodes = {f.name: f.stat().st_ino for f in env_dir.iterdir() if f.is_file()}
        before = _snapshot(out)
        code, err = _report_interrupted(out, sig, when)
        assert code == 128 + sig, (sig, when, code, err)
        assert err.strip().count("\n") == 0 and "Traceback" not in err and "interrupted" in err, err
        assert "nothing was rewritten" in err
        assert {f.name: f.stat().st_ino for f in env_dir.iterdir() if f.is_file()} == inodes  # all old
        assert _snapshot(out) == before and not list(env_dir.glob(".report-*"))


# the report in a process with a second thread (JAX's pools are threads too), Ctrl-C (SIGTERM) sent to the
# process as the second staged file is renamed over its old one: a signal mask of the main thread does not
# hold it (the kernel hands it to the other thread)
RENAMES_INTERRUPTED = """
import os, signal, sys, threading, time
from rcmdp_jax.study import console
real, renamed = os.replace, []
def replace(src, dst):
    if ".report-" in str(src) and ".report-" not in str(dst):
        renamed.append(dst)
        if len(renamed) == 2:
            os.kill(os.getpid(), signal.Signals[sys.argv[2]])
    return real(src, dst)
os.replace = replace
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
sys.exit(console.report([sys.argv[1]]))
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_report_interrupted_while_renaming_ends_all_new(trained, tmp_path, sig):
    out = _copy(trained, tmp_path)
    env_dir = out / "cartpole"
    inodes = {f.name: f.stat().st_ino for f in env_dir.iterdir() if f.is_file()}
    proc = subprocess.run([sys.executable, "-c", RENAMES_INTERRUPTED, str(out), sig.name], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu"))  # fmt: skip
    assert proc.returncode == 128 + sig, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "rcmdp report: interrupted: the report was rewritten", proc.stderr
    now = {f.name: f.stat().st_ino for f in env_dir.iterdir() if f.is_file()}
    assert now.keys() >= inodes.keys() and all(now[n] != i for n, i in inodes.items())  # every file new
    assert not list(env_dir.glob(".report-*")) and not (out / ".lock").exists()


# ------------------------------------------------------------------ rcmdp eval's and act's inputs
@pytest.mark.parametrize("extra, words", [
    (["--kernel", "cart velocity=1e39"], ["--kernel", "beyond float32"]),
    (["--n-episodes", "100000000"], ["--n-episodes=100,000,000 needs about", "GiB of this machine's 4.0 GiB"]),
    (["--episode-seed", str(2**70)], ["--episode-seed must be an integer in [0, 2**32)"]),
    (["--episode-seed", "-1"], ["--episode-seed must be an integer in [0, 2**32)"]),
    (["--json", "/proc/x/r.json"], ["--json /proc/x/r.json: its folder /proc/x does not exist"]),
    (["--json", ""], ["--json is empty"]),
    (["--json", "EXISTING"], ["--json", "already exists; name a new file"]),
])  # fmt: skip
def test_eval_refuses_bad_input_before_evaluating(trained, tmp_path, capsys, monkeypatch, extra, words):
    from rcmdp_jax.study import policy

    def never(*_):
        raise AssertionError("evaluated before refusing")

    monkeypatch.setattr(policy, "cached", never)  # where LoadedPolicy.evaluate gets its program (imported there)
    if extra[0] == "--n-episodes":  # a machine of 4 GiB (the check reads this one's)
        monkeypatch.setattr(os, "sysconf", lambda name: {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 2**20}[name])
    existing = tmp_path / "earlier.json"
    if extra == ["--json", "EXISTING"]:  # a file written before: left as it was
        existing.write_text("{}")
        extra = ["--json", str(existing)]
    before = _snapshot(trained)
    assert console.main(["eval", str(trained), "--algo", ALGO, "--seed", "0", *extra]) == 2
    _one_line(capsys, "rcmdp eval: error:", *words)
    assert _snapshot(trained) == before
    assert not existing.exists() or existing.read_text() == "{}"


def test_eval_writes_strict_json_and_notes_non_finite_values(trained, tmp_path, capsys):
    from rcmdp_jax.study.policy import Evaluation

    ev = Evaluation("cartpole", ALGO, 0, "nominal", np.zeros(4), False, 1, {"return": (float("nan"), float("nan"))},
                    {}, {})  # fmt: skip
    assert json.loads(json.dumps(ev.to_dict(), allow_nan=False))["metrics"]["return"] == {"mean": None, "se": None}
    assert "not finite" in ev.lines()[-1] and "outside the box" in ev.lines()[-1]
    out = tmp_path / "e.json"
    assert console.main(["eval", str(trained), "--algo", ALGO, "--seed", "0", "--n-episodes", "1", "--json", str(out)]) == 0
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in strict JSON"))


def test_act_checks_its_input_in_one_error(trained):
    policy = load_policy(trained, ALGO, 0)
    for bad, error, words in [("obs", TypeError, "obs must be one observation"), (None, TypeError, "obs must be"),
                              (jnp.zeros(3), ValueError, "obs must have shape (4,)"),
                              (np.zeros((2, 4)), ValueError, "jax.vmap(policy.act) for a batch")]:  # fmt: skip
        with pytest.raises(error) as err:
            policy.act(bad)
        assert words in str(err.value) and "\n" not in str(err.value), err.value
    with pytest.raises(TypeError, match="key must be a JAX random key"):
        policy.act(jnp.zeros(4), key="k")
    ref = policy.act(jnp.zeros(4, jnp.float32))
    assert policy.act([0.0, 0.0, 0.0, 0.0]) == ref  # a list of numbers is one observation
    assert jax.jit(policy.act)(jnp.zeros(4)) == ref


def test_load_policy_names_a_wrong_argument(trained):
    for args, error, words in [((123, ALGO, 0), TypeError, "run must be a run folder"),
                               ((None, ALGO, 0), TypeError, "run must be a run folder"),
                               ((trained, ALGO, "0"), ValueError, "seed='0' (str) must be a whole number"),
                               ((trained, ALGO, 0.0), ValueError, "seed=0.0 (float) must be a whole number")]:  # fmt: skip
        with pytest.raises(error, match=re.escape(words)):
            load_policy(*args)


# ------------------------------------------------------------------ --costs' discount
@pytest.mark.parametrize("item, words", [
    ("theta_dot>1:5:", "the cost discount after the second ':' is empty"),
    ("theta_dot>1:5:1e-50", "must be in (0, 1]"),
    ("theta_dot>1:5:0", "must be in (0, 1]"),
])  # fmt: skip
def test_costs_discount_empty_or_zero_in_float32_is_refused(item, words):
    from rcmdp_jax.envs.gymnax_any import parse_limit
    from rcmdp_jax.envs.unsafe_steps import check_gamma_c

    with pytest.raises(ValueError) as err:
        parse_limit(item)
    assert words in str(err.value) and "GAMMA_C" in str(err.value), err.value
    assert parse_limit("theta_dot>1:5:0.5")[4] == 0.5 and parse_limit("theta_dot>1:5:gamma")[4] is None
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        check_gamma_c(1e-50)


# ------------------------------------------------------------------ the minor messages, one table
def _runner(tmp_path, capsys, *argv) -> str:
    steps = [] if "--steps" in argv else ["--steps", "2000"]
    assert cli.main([*argv, "--seeds", "2", *steps, "--n-test", "2", "--out", str(tmp_path / "r")]) == 2
    return _one_line(capsys)


def _eval_only_of_an_edited_vmap(trained, tmp_path, capsys, **_) -> str:
    out = _edited(trained, tmp_path, lambda p: p.update(vmap="yes"))
    assert cli.main(["--eval-only", str(out)]) == 2
    return _one_line(capsys)


def _budget_quick_note(tmp_path, capsys, **_) -> str:
    from rcmdp_jax.study.plan import build_plan

    build_plan(cli.parse_args(["--algos", "PPO-Lag", "--budget", "quick"]))
    return capsys.readouterr().err


def _broken_tensorboardx(monkeypatch, **_) -> str:
    import types

    from rcmdp_jax.study import runtime

    monkeypatch.setitem(sys.modules, "tensorboardX", types.ModuleType("tensorboardX"))  # no FileWriter in it
    with pytest.raises(PlanError) as err:
        runtime.event_files("on")
    return f"{err.value} | {runtime.event_files('auto')[1]}"


def _report_as(name: str, missing: bool):
    def case(trained, tmp_path, capsys, monkeypatch, **_) -> str:
        out = _copy(trained, tmp_path)
        if missing:
            (out / "cartpole" / ALGO / "test_results.npz").unlink()
        monkeypatch.setattr(sys, "argv", [f"/somewhere/bin/{name}", str(out)])
        assert console.report([str(out)]) == 2
        return _one_line(capsys)

    return case


def _load_policy_while_training(trained, tmp_path, **_) -> str:
    import shutil

    from rcmdp_jax.study.run_folder import take

    out = _copy(trained, tmp_path)
    shutil.rmtree(out / "cartpole" / ALGO / "checkpoint")
    release = take(out)  # a run still training in it
    try:
        with pytest.raises(RunFolderError) as err:
            load_policy(out, ALGO, 0)
    finally:
        release()
    return str(err.value)


def _feasibility(*extra):
    def case(tmp_path, capsys, monkeypatch, **_) -> str:
        from rcmdp_jax import feasibility

        monkeypatch.setattr(feasibility, "learned", lambda *a: (_ for _ in ()).throw(AssertionError("trained")))
        out = tmp_path / "f"
        if "--resume" in extra:
            out.mkdir()
        try:
            code = console.main([*FEAS, *extra, "--out", str(out)])
        except AssertionError:  # past its checks, to the training
            code = "trained"
        captured = capsys.readouterr()
        return f"{code} | {captured.out} | {captured.err}"

    return case


def _nan_controller(monkeypatch, **_) -> str:
    from rcmdp_jax import feasibility

    said = []
    monkeypatch.setattr(feasibility, "learned", lambda *a: (_ for _ in ()).throw(AssertionError("trained")))
    with pytest.raises(AssertionError, match="trained"):
        feasibility.check_feasibility("gymnax:Pendulum-v1@costs=speed",
                                      feasibility.FeasibilityConfig(seeds=1, steps=2000, n_test=2, search=None),
                                      controller=lambda obs: jnp.full((1,), jnp.nan), progress=said.append)  # fmt: skip
    return " | ".join(said)


def _make_eval_levels(**_) -> str:
    from rcmdp_jax import preset
    from rcmdp_jax.evaluate import make_eval

    with pytest.raises(TypeError) as err:
        make_eval(preset("cartpole", "PPO-Lag"), levels="abc")
    return str(err.value)


def _option_kinds(**_) -> str:
    from rcmdp_jax.plugin import kind_problem

    assert kind_problem(3, 1) == kind_problem(0.5, 1.0) == kind_problem(2, 1.0) == ""
    return " | ".join(kind_problem(v, d) for v, d in (("abc", 1), (1e40, 1), (2**40, 1), ("x", 1.0), (1e39, 1.0)))


MINOR = {
    "PPO-Lag@pid.kp=5,PPO-Lag is one configuration": (
        lambda tmp_path, capsys, **_: _runner(tmp_path, capsys, "--algos", "PPO-Lag@pid.kp=5,PPO-Lag"),
        ["--algos: PPO-Lag@pid.kp=5 and PPO-Lag are the same configuration"]),
    "--steps 99999999999 is --steps'": (
        lambda tmp_path, capsys, **_: _runner(tmp_path, capsys, "--algos", "PPO-Lag", "--steps", "99999999999"),
        ["error: --steps: total_timesteps=99999999999"]),
    "brax @backend with --uncertain": (
        lambda tmp_path, capsys, **_: _runner(tmp_path, capsys, "--env", "brax:inverted_pendulum@backend=mjx",
                                              "--uncertain", "mass=0.2"),
        ["@uncertain=FIELD:WIDTH", "--env brax:inverted_pendulum"]),
    "a budget of 2e39": (
        lambda tmp_path, capsys, **_: _runner(tmp_path, capsys, "--env", "gymnax:Pendulum-v1", "--costs",
                                              "theta_dot>1:2e39"),
        ["in float32 (at most 3.4e38)", "got 2e39", "GAMMA_C"]),
    "gamma and its value are one constraint": (
        lambda tmp_path, capsys, **_: _runner(tmp_path, capsys, "--env", "gymnax:Pendulum-v1", "--costs",
                                              "theta_dot>1:5:gamma,theta_dot>1:5:0.95"),
        ["are the same constraint"]),
    "an edited vmap": (_eval_only_of_an_edited_vmap, ["vmap must be true or false, got 'yes'"]),
    "--budget quick on cartpole": (_budget_quick_note, ["--budget quick: cartpole has no quick budget", "short"]),
    "a tensorboardX that fails on import": (_broken_tensorboardx, ["--tensorboard on: tensorboardX cannot be imported",
                                                                   "no TensorBoard event files: tensorboardX cannot"]),
    "rcmdp-report's name and runner": (_report_as("rcmdp-report", True), ["rcmdp-report: error:", "(rcmdp --resume"]),
    "report.py's name and runner": (_report_as("report.py", True), ["report.py: error:", "(run.py --resume"]),
    "eval while the run trains": (_load_policy_while_training, ["is not trained yet", "in use by another run"]),
    "feasibility's memory in its options": (_feasibility("--seeds", "100000000000"),
                                            ["2 | ", "fewer seeds (--seeds)", "(--n-test)", "feasibility on cartpole"]),
    "feasibility --resume on an empty folder": (_feasibility("--resume"),
                                                ["trained | ", "holds no constraint found before", "starts from the first"]),
    "a controller returning NaN": (_nan_controller, ["not finite", "not used as a witness"]),
    "make_eval(levels='abc')": (_make_eval_levels, ["levels must be a 1-D array"]),
    "a plug-in option of its default's kind": (_option_kinds, ["a whole number within int32 (at most 2**31 - 1 in size) | a whole",
                                                               "size) | a finite number in float32 | a finite number"]),
}  # fmt: skip
NOT_SAID = {"feasibility's memory in its options": ["n_envs", "min-cost"], "brax @backend with --uncertain":
            ["gymnax:ID"], "an edited vmap": ["seeds"], "--steps 99999999999 is --steps'": ["--set"]}  # fmt: skip


@pytest.mark.parametrize("case", list(MINOR))
def test_the_minor_messages(case, trained, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make, words = MINOR[case]
    said = make(trained=trained, tmp_path=tmp_path, capsys=capsys, monkeypatch=monkeypatch)
    for w in words:
        assert w in said, (case, said)
    for w in NOT_SAID.get(case, []):
        assert w not in said, (case, said)


def test_a_truncated_results_file_is_named_by_the_run_folders_path(trained, tmp_path, capsys):
    out = _copy(trained, tmp_path)
    path = out / "cartpole" / ALGO / "test_results.npz"
    path.write_bytes(path.read_bytes()[:100])
    before = _snapshot(out)
    assert console.report([str(out)]) == 2
    err = _one_line(capsys, f"{path} cannot be read", "nothing was rewritten")
    assert ".report-" not in err and _snapshot(out) == before and not list((out / "cartpole").glob(".report-*"))

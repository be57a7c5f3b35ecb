"""Do the tests catch small deliberate bugs? Each mutation below (one line of the dual's reading,
the constraint rules, LTMA's guarded reading, the reported metrics or the budget rule, changed
the way a slip would change it) is applied to a temporary copy of the working tree, and the test
files that touch that code run on the copy (``-m "not slow"``, stopping at the first failure):
*caught* when a test fails, *not caught* when all pass. The unchanged copy runs first and must
pass, or no verdict means anything.

    python experiments/mutation_check.py                 # every mutation, the tests as they are
    python experiments/mutation_check.py --only abs,any  # some of them
    python experiments/mutation_check.py --tests-from REF  # the tests as they were at git REF

The copy is imported instead of the installed package (its ``src`` first on ``PYTHONPATH``, the
``envs`` package placed inside it as the installed layout maps it). A mutation whose line is not
found is reported as such (the code moved), never counted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DUAL = ["tests/test_dual_reading.py", "tests/test_data_margin.py", "tests/test_pid_rule.py"]
RULES = DUAL + ["tests/test_math.py"]
READINGS = ["tests/test_dual_reading.py", "tests/test_dual_estimators.py", "tests/test_data_margin.py"]
LTMA = ["tests/test_dual_reading.py", "tests/test_ltma_dual_reading.py"]
BUDGET = ["tests/test_budget_rule.py", "tests/test_convergence.py"]

# name: (file, the line's text, the bug's text, what it does, test files); the first seven are the
# bugs issue 64 lists as surviving an earlier check, the others slips of the same code
MUTATIONS = {
    "margin-estimates": ("src/rcmdp_jax/dual.py", "None if estimates is None else estimates + margin",
                         "None if estimates is None else estimates",
                         "the margin left off the per-minibatch estimates (cost_to_go, the study's)", DUAL),
    "margin-c_hat": ("src/rcmdp_jax/dual.py", "return c_hat + margin, None", "return c_hat, None",
                     "the margin left off C^ (start_value, the gymnax presets')", DUAL),
    "gamma-not-gamma_c": ("src/rcmdp_jax/dual.py", "traj.done, v, v_next, gamma_c,", "traj.done, v, v_next, hp.gamma,",
                          "gamma instead of gamma_c in the multiplier batch's readings", READINGS),
    "ltma-one-env": ("src/rcmdp_jax/adversary/ltma.py", "return everywhere, worst_cost_kernel(xis, values), steps",
                     "return everywhere, found.xi, steps",
                     "LTMA's guarded reading not applied on the one-env (MCPMD) path", LTMA),
    "abs": ("src/rcmdp_jax/convergence.py", "else abs(mean_b - mean_a)", "else mean_b - mean_a",
            "budget rule: the move's abs dropped", BUDGET),
    "any": ("src/rcmdp_jax/convergence.py", "if all(passes(m, se)", "if any(passes(m, se)",
            "budget rule: 'every curve' read as 'any curve'", BUDGET),
    "se-at-N": ("src/rcmdp_jax/convergence.py", "se = np.std(b, ddof=1) / np.sqrt(b.size) if b.size > 1",
                "se = np.std(a, ddof=1) / np.sqrt(a.size) if a.size > 1",
                "budget rule: the standard error at N instead of 2N", BUDGET),
    "idle-c_hat": ("src/rcmdp_jax/step.py", "held = dict(lam=dual.lam, c_hat=dual.c_hat - dual.margin",
                   "held = dict(lam=dual.lam, c_hat=dual.c_hat", "idle slots report c_hat with the margin in it",
                   ["tests/test_dual_reading.py"]),
    "ltma-guard-off": ("src/rcmdp_jax/adversary/ltma.py", "if not self.reads_cost(ctx.cfg):",
                       "if not self.separate(ctx.cfg):", "LTMA guards only with several rollout envs", LTMA),
    "lam-clip": ("src/rcmdp_jax/constraints/lagrangian.py", "jnp.clip(lam + eta_lam * c_hat, 0.0, lam_clip)",
                 "jnp.maximum(lam + eta_lam * c_hat, 0.0)", "plain rule: lam_clip dropped", RULES),
    "augmented-multiplier": ("src/rcmdp_jax/constraints/augmented.py", "return dual.lam + hp.eta_lam * dual.c_hat",
                             "return dual.lam", "augmented rule: lam~ without its C^ term", RULES),
    "pid-rise": ("src/rcmdp_jax/constraints/pid.py", "jnp.maximum(d - state[\"d\"], 0.0)", "d - state[\"d\"]",
                 "PID: the derivative term on a falling cost too", RULES),
    "ascent-all-steps": ("src/rcmdp_jax/constraints/base.py", "jnp.where(i < n_steps, step(x, c), x)",
                         "step(x, c)", "the ascent takes every estimate, past K", READINGS),
    "margin-sqrt": ("src/rcmdp_jax/dual.py", "/ jnp.sqrt(hp.margin_n)", "/ hp.margin_n",
                    "data margin: sigma / n instead of sigma / sqrt(n)", DUAL),
    "episode-weights": ("src/rcmdp_jax/dual.py", "(starts * ends_later).reshape(-1)", "starts.reshape(-1)",
                        "the spread counts episodes cut by the batch's end", DUAL),
    "spread-decay": ("src/rcmdp_jax/dual.py", "decay * spread + (1.0 - decay) * now",
                     "(1.0 - decay) * spread + decay * now", "the spread's average weighs the past as the present",
                     DUAL),
    "minibatch-mean": ("src/rcmdp_jax/dual.py", "/ w.sum(1, keepdims=True)", "/ minibatch",
                       "a short last minibatch averaged over a full one", READINGS),
    "plateau": ("src/rcmdp_jax/convergence.py", "found = None  # it moved again", "pass  # it moved again",
                "budget rule: a plateau that training leaves read as convergence", BUDGET),
    "window": ("src/rcmdp_jax/convergence.py", "pick = (steps > (1.0 - window) * budget) & (steps <= budget)",
               "pick = (steps > (1.0 - window) * budget) & (steps < budget)",
               "budget rule: the window without the budget's own iteration", BUDGET),
}  # fmt: skip


def copy_tree(dest: Path, tests_from: str | None) -> None:
    """The working tree's files (tracked and new, not ignored) into ``dest``; ``envs`` also inside
    ``src/rcmdp_jax`` (the installed layout); with ``tests_from``, ``tests/`` as at that git ref."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split("\n")  # fmt: skip
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    shutil.copytree(dest / "envs", dest / "src" / "rcmdp_jax" / "envs")
    if tests_from:
        shutil.rmtree(dest / "tests")
        archive = subprocess.run(["git", "archive", tests_from, "tests"], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)


def run_tests(dest: Path, tests: list[str], timeout: float) -> tuple[bool, str]:
    """``(passed, the first test that failed or the last lines)`` of pytest on ``tests`` (those that exist) in ``dest``; one XLA
    cache for every run (keyed on the program: a mutated program compiles anew)."""
    tests = [t for t in tests if (dest / t).exists()]
    if not tests:
        return True, "no test file"
    env = {**os.environ, "PYTHONPATH": str(dest / "src"), "RCMDP_JAX_TEST_XLA_CACHE": str(dest / ".xla_cache")}
    cmd = [sys.executable, "-m", "pytest", "-n", "0", "-x", "-q", "-m", "not slow", "-p", "no:cacheprovider", *tests]
    try:
        out = subprocess.run(cmd, cwd=dest, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    lines = (out.stdout + out.stderr).strip().splitlines()
    failed = [ln.split(" - ")[0] for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    return out.returncode == 0, failed[0] if failed else "\n".join(lines[-3:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated mutation names (default: all): " + ", ".join(MUTATIONS))
    ap.add_argument("--tests-from", default=None, help="a git ref: run the tests as they were there")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per test run")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(MUTATIONS)
    unknown = [n for n in names if n not in MUTATIONS]
    if unknown:
        ap.error(f"--only: unknown mutation(s) {', '.join(unknown)}; choose from {', '.join(MUTATIONS)}")
    with tempfile.TemporaryDirectory(prefix="rcmdp-mutation-") as tmp:
        dest = Path(tmp)
        copy_tree(dest, args.tests_from)
        where = "import rcmdp_jax, rcmdp_jax.envs as e; print(rcmdp_jax.__file__, e.__file__)"
        check = subprocess.run([sys.executable, "-c", where], env={**os.environ, "PYTHONPATH": str(dest / "src")},
                               capture_output=True, text=True)  # fmt: skip
        if not check.stdout.startswith(str(dest)) or f"{dest}/src/rcmdp_jax/envs" not in check.stdout:
            sys.exit(f"the copy is not what imports: {check.stdout or check.stderr}")
        every = sorted({t for n in names for t in MUTATIONS[n][4]})
        t0 = time.time()
        ok, tail = run_tests(dest, every, args.timeout)
        print(f"unchanged copy: {'passes' if ok else 'FAILS'} ({time.time() - t0:.0f} s)", flush=True)
        if not ok:
            sys.exit(tail)
        caught = found = 0
        for name in names:
            path, old, new, what, tests = MUTATIONS[name]
            text = (dest / path).read_text()
            if text.count(old) != 1:
                print(f"{name:22s} line not found ({text.count(old)} matches): {what}", flush=True)
                continue
            found += 1
            (dest / path).write_text(text.replace(old, new))
            t0 = time.time()
            try:
                ok, tail = run_tests(dest, tests, args.timeout)
            finally:
                (dest / path).write_text(text)
            caught += not ok
            last = tail.splitlines()[-1] if tail else ""
            print(f"{name:22s} {'caught' if not ok else 'NOT CAUGHT':10s} {time.time() - t0:5.0f} s  {what}  [{last}]",
                  flush=True)  # fmt: skip
        tests_at = f" (tests as at {args.tests_from})" if args.tests_from else ""
        print(f"caught {caught} of {found} mutations{tests_at}")


if __name__ == "__main__":
    main()

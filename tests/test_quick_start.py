"""docs/cli.md's safe-RL quick start, run as the page writes it (its commands read from the page),
and the claims the page makes, which held over 10 seeds with room (and with the test suite's XLA
flags, which change the float arithmetic): both keep the budget at the nominal kernel in every
seed, and PPO-Robust-Lag is broken in no seed on its worst test kernel (with the data margin,
which of the two does better on the box the page does not claim); the verdict reads EpCost
against the budget seed by seed (the counts checked against the test episodes by hand), C is
EpCost less the budget's share of each episode's steps, ``rcmdp eval`` and ``load_policy`` print
the same lines, and the event files hold the tags the page reads back at the learner's
environment steps. Trains 2 algorithms x 3 seeds for 200,000 steps (slow)."""

import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import events
from doc_examples import QUICK_START, blocks, run

from rcmdp_jax.study import cli, console

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
ENV_DIR = "gymnax_CartPole-v1_costs_x_0.3_5"
NAME = "|x|>0.3 at most 5/episode"


def doc_command(prefix: str) -> list[str]:
    """The arguments of the page's quick-start command that begins ``$ rcmdp PREFIX``."""
    text = DOC.read_text()
    section = text[text.index("## Safe-RL quick start") : text.index("## Metric keys")]
    at = section.index(f"$ rcmdp {prefix}")
    line = section[at + 2 :].split("\n")
    words = line[0]
    while words.endswith("\\"):
        line = line[1:]
        words = words[:-1] + " " + line[0].strip()
    return shlex.split(words)[1:]


def seed_verdicts_by_hand(ep_cost: np.ndarray) -> list[str]:
    """``ep_cost`` [seeds, episodes]: each seed's mean against 5, two standard errors wide."""
    m = ep_cost.mean(1) - 5.0
    se = ep_cost.std(1, ddof=1) / np.sqrt(ep_cost.shape[1])
    return ["too close" if s > 0 and abs(x) <= 2 * s else "kept" if x <= 0 else "broken" for x, s in zip(m, se)]


@pytest.mark.slow
def test_the_quick_start_as_the_page_writes_it(tmp_path, capsys, monkeypatch):
    argv = doc_command("--env gymnax:CartPole-v1")
    assert argv[argv.index("--out") + 1] == "runs/safe"
    out = tmp_path / "runs" / "safe"
    argv[argv.index("--out") + 1] = str(out)
    assert cli.main(argv + ["--plots", "off"]) == 0  # the figures aside: the page reads none
    printed = capsys.readouterr().out
    rows = {r.split("|")[1].strip(): r for r in printed.splitlines() if r.startswith("| PPO-") and "EpCost <= 5" in r}
    assert set(rows) == {"PPO-Lag", "PPO-Robust-Lag"}, printed
    verdicts = {}
    for algo, row in rows.items():
        z = np.load(out / ENV_DIR / algo / "test_results.npz")
        ep, C = z["EpCost"][..., 0].astype(np.float64), z["C"][..., 0].astype(np.float64)
        # C = EpCost - 5 T / 200 for an episode of T <= 200 steps: at least EpCost - 5, at most EpCost
        assert np.all(C >= ep - 5.0 - 1e-3) and np.all(C <= ep + 1e-3)
        per_kernel = ep.mean(axis=(0, 3))
        lvl, d = np.unravel_index(np.argmax(per_kernel), per_kernel.shape)
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert (ep[:, 0] == ep[:, 0, :1]).all()  # level 0's directions: one kernel, the same episodes
        for at, episodes in ((8, ep[:, 0, 0]), (9, ep[:, lvl, d])):
            want = seed_verdicts_by_hand(episodes)
            counts = [int(n) for n in re.findall(r"(\d+) (?:kept|broken|too close)", cells[at])]
            assert counts == [want.count("kept"), want.count("broken"), want.count("too close")], (cells[at], want)
            assert sum(counts) == 3
            verdicts[algo, at] = want
        assert float(cells[6]) == pytest.approx(ep[:, 0].mean(), abs=1e-3)
    # the page's claims: both keep it at the nominal kernel in every seed; PPO-Robust-Lag is broken
    # in no seed on its worst test kernel (PPO-Lag may be: one seed of 23 was)
    assert verdicts["PPO-Lag", 8] == verdicts["PPO-Robust-Lag", 8] == ["kept"] * 3
    assert "broken" not in verdicts["PPO-Robust-Lag", 9], verdicts["PPO-Robust-Lag", 9]

    eval_argv = doc_command("eval runs/safe")
    eval_argv[1] = str(out)
    assert console.main(eval_argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split()[0] for ln in lines[1:]] == ["return", "C", "EpCost", "verdict"]
    ep_mean, ep_se = (float(x) for x in lines[3].split()[-3::2])  # EpCost's mean ± standard error
    want = "too close to call" if abs(ep_mean - 5) <= 2 * ep_se else "kept" if ep_mean <= 5 else "broken"
    assert f" {want} (kept when EpCost <= 5" in lines[4]
    from rcmdp_jax import load_policy

    seed, kernel = int(eval_argv[eval_argv.index("--seed") + 1]), eval_argv[eval_argv.index("--kernel") + 1]
    assert f'load_policy("runs/safe", "PPO-Lag", seed={seed})' in DOC.read_text() and f'kernel="{kernel}"' in DOC.read_text()
    policy = load_policy(out, "PPO-Lag", seed=seed)
    assert policy.evaluate(kernel=kernel).lines() == lines  # "the same five lines"

    monkeypatch.chdir(tmp_path)  # the pages' Python blocks on this run, as they write it (doc_examples.py)
    for page, i in sorted(QUICK_START):
        run(blocks(page)[i], {}, f"{page}, block {i}")

    name = NAME.replace("/", " per ")
    got = events(out / ENV_DIR / "PPO-Lag" / "tensorboard" / "seed_1")
    header = (out / ENV_DIR / "PPO-Lag" / "train_metrics.csv").read_text().splitlines()[0].split(",")
    assert len(got) == len(header) - 2 + 1 == 29  # the CSV's 28 columns and the iteration
    for tag in (f"cost/{name}/eval_ep_cost", f"lambda/{name}", f"cost/{name}/ep_cost"):
        assert tag in got, sorted(got)
    assert sorted(got["iteration"]) == [1600 * (t + 1) for t in range(125)]  # 125 iterations of 1,600 steps

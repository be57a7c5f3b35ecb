"""Results a person reads: the constraint section of summary.md by hand on made-up
results, the legend, named costs, and plots whose 14 lines are told apart."""

import re

import numpy as np

from rcmdp_jax import envs
from rcmdp_jax.presets import ALGORITHMS, schedule_variants
from rcmdp_jax.study import plots, report


def _results(rng, seeds=3, levels=4, dirs=2, eps=5, m=2):
    V = rng.normal(size=(seeds, levels, dirs, eps))
    C = rng.normal(scale=0.5, size=(seeds, levels, dirs, eps, m))
    return V, C


def test_the_constraint_section_by_hand():
    rng = np.random.default_rng(0)
    V, C = _results(rng)
    C[1, 2, 1, :, 0] += 5.0  # one seed breaks cost 0 badly on kernel (level 2, direction 1)
    C[:, 0] = C[:, 0, :1]  # level 0's directions: the nominal kernel on the same episodes
    text, js = report.constraint_section({"PPO-Lag": (V, C), "MDPO": None}, ("speed", "torque"),
                                              np.array([0.0, 0.3, 0.6, 1.0]))  # fmt: skip
    c = C[..., 0]
    nominal = np.mean([c[s, 0, d, e] for s in range(3) for d in range(2) for e in range(5)])
    per_kernel = {(lv, d): c[:, lv, d].mean() for lv in range(4) for d in range(2)}
    (lv, d), worst = max(per_kernel.items(), key=lambda kv: kv[1])
    assert (lv, d) == (2, 1)
    def verdicts(per_seed):  # two standard errors over each seed's episodes
        m, se = per_seed.mean(1), per_seed.std(1, ddof=1) / np.sqrt(per_seed.shape[1])
        close = np.abs(m) <= 2 * se
        return int((~close & (m <= 0)).sum()), int((~close & (m > 0)).sum()), int(close.sum())

    kept, broken, close = verdicts(c[:, lv, d])
    assert broken >= 1  # the seed that breaks it badly
    n_kept, n_broken, n_close = verdicts(c[:, 0, 0])
    row = f"| PPO-Lag | speed | C <= 0 | ? | {nominal:.3f} | {worst:.3f} | ? | ? | {n_kept} kept, {n_broken} broken, {n_close} too close"
    assert row in text, text  # results without the cost discount and EpCost: '?' there
    assert f"| {kept} kept, {broken} broken, {close} too close" in text and "0.6: direction 1 |" in text
    assert js["PPO-Lag"]["speed"]["worst_seeds_broken"] == broken and "MDPO" not in js
    assert "torque" in js["PPO-Lag"]


def test_a_cost_name_with_a_bar_stays_one_markdown_cell():
    """CartPole's ``|x_dot|-0.15`` and the command's ``|speed|<=1`` hold ``|``: each row of
    the constraint section keeps the header's eleven cells."""
    rng = np.random.default_rng(1)
    text, js = report.constraint_section({"PPO-Lag": _results(rng, m=1)}, ("|x_dot|-0.15",), np.arange(4.0))
    rows = [line for line in text.splitlines() if line.startswith("|")]
    cells = [len(re.split(r"(?<!\\)\|", row)) - 2 for row in rows]  # bars not escaped by a backslash
    assert cells == [11, 11, 11], rows
    assert r"| \|x_dot\|-0.15 |" in rows[2] and "|x_dot|-0.15" in js["PPO-Lag"]


def test_the_worst_case_table_keeps_its_cells_with_a_bar_in_the_cost_name():
    from rcmdp_jax.study.report import worst_case_section

    entry = {"grid": [0.1, 0.2], "search": [0.3, 0.1], "lower_is_worse": False,
             "search_xi": [[1.0, 2.0], [1.5, 2.5]], "grid_xi": [[1.0, 2.0], [1.0, 2.0]]}  # fmt: skip
    text, _ = worst_case_section({"PPO-Lag": {"C0": entry}}, "cartpole", {"C0": "|x_dot|-0.15"})
    rows = [line for line in text.splitlines() if line.startswith("|")]
    cells = [len(re.split(r"(?<!\\)\|", row)) - 2 for row in rows]
    assert cells == [4, 4, 4], rows
    assert r"* \|x_dot\|-0.15: the search went beyond the grid's worst in 1 of 2" in text


def test_the_legend_defines_every_column_and_mark():
    text = report.legend(50.0)
    for word in ("R_pen = Return - lambda_max * sum_j max(0, C_j)", "R_pen± = Return - lambda_max * sum_j C_j",
                 "lambda_max = 50", "min:", "Bold: the best mean", "pooled standard error", "kept when C_j <= 0"):  # fmt: skip
        assert word in text, word


def test_costs_are_named():
    assert envs.cost_names("cartpole", 1) == ("|x_dot|-0.15",)
    assert envs.cost_names("inventory3d", 3)[2] == "a_3-0.5s_3"
    assert envs.cost_names("gymnax:Pendulum-v1@costs=speed,torque", 2) == ("speed", "torque")
    assert envs.cost_names("nowhere", 2) == ("C_1", "C_2")


def test_fourteen_lines_are_told_apart_and_lambda_only_for_constrained(tmp_path):
    look = plots.styles(ALGORITHMS)
    pairs = {(s["color"], str(s["linestyle"])) for s in look.values()}
    assert len(pairs) == 14
    by_learner = {}
    for algo, s in look.items():
        by_learner.setdefault(plots.parsed(algo)[0], set()).add(s["color"])
    assert all(len(c) == 1 for c in by_learner.values()) and len(set.union(*by_learner.values())) == 3
    assert look["PPO-Robust-Lag"]["color"] != look["MDPO-Robust-Lag"]["color"]
    assert look["PPO-Robust-Lag"]["linestyle"] == look["MDPO-Robust-Lag"]["linestyle"]
    steps = np.tile(np.arange(3.0), (2, 1))
    m = {"policy_steps": steps, "eval_return": steps, "eval_costs": steps[..., None], "lam": np.full((2, 3, 1), 5.0),
         "xi": np.ones((2, 3, 1))}  # fmt: skip
    fig = plots.plot_training(tmp_path, {a: m for a in ALGORITHMS}, np.ones(1), np.ones(1), "x", ("speed",))
    lam_lines = [line.get_label() for line in fig.axes[2].get_lines()]
    assert lam_lines == [a for a in ALGORITHMS if "Lag" in a]
    assert len(fig.axes[0].get_lines()) == 14 and "speed" in fig.axes[1].get_title()
    variants = list(schedule_variants())  # --schedules: 21 lines, three variants of seven schedules each
    look = plots.styles(variants)
    assert len(variants) == 21 and len({(s["color"], str(s["linestyle"])) for s in look.values()}) == 21


def test_the_worst_kernel_is_said_in_its_fields_terms():
    from rcmdp_jax.kernel_text import describe

    assert describe([26.0, 0.35], [20.0, 0.5], ("heater_gain", "loss")) == "heater_gain +30 %, loss -30 %"
    assert describe([20.0, 0.5], [20.0, 0.5], ("heater_gain", "loss")) == "the nominal kernel"
    assert describe([0.25, 3.0], [0.0, 3.0], ("bias", "g")) == "bias +0.25"  # a nominal 0: the change itself
    rng = np.random.default_rng(0)
    V, C = _results(rng, m=1)
    C[:, 3, 1, :, 0] += 5.0  # level 1.0, direction 1: the worst kernel
    test_xi = np.array(
        [
            [[20.0, 0.5], [20.0, 0.5]],
            [[22.0, 0.45], [18.0, 0.55]],
            [[24.0, 0.4], [16.0, 0.6]],
            [[26.0, 0.35], [14.0, 0.65]],
        ]
    )  # [level, direction, field]; level 0 the nominal kernel
    text, js = report.constraint_section({"PPO-Lag": (V, C)}, ("too_hot",), np.array([0.0, 0.3, 0.6, 1.0]),
                                              test_xi, ("heater_gain", "loss"))  # fmt: skip
    assert "| 1: heater_gain -30 %, loss +30 % |" in text
    entry = js["PPO-Lag"]["too_hot"]
    assert entry["worst_kernel"] == "heater_gain -30 %, loss +30 %" and entry["worst_xi"] == [14.0, 0.65]


def test_the_study_domains_kernels_are_named_by_what_they_perturb():
    from rcmdp_jax.kernel_text import describe, kernel_names

    names = kernel_names("cartpole", (4,))  # xi multiplies the next state (x, x_dot, theta, theta_dot)
    assert names == ("cart position", "cart velocity", "pole angle", "pole angular velocity")
    assert describe([0.995, 1.05, 1.0, 1.0], [1.0] * 4, names) == "cart position -0.5 %, cart velocity +5 %"
    assert kernel_names("inventory@cost_threshold=0.13", (2,)) == ("stock's feature-1 weight", "stock's feature-2 weight")
    three = kernel_names("inventory3d", (3, 2))  # row i: item i's next stock; column k: feature k's weight
    assert len(three) == 6 and three[3] == "item 2's feature-2 weight"
    assert kernel_names("inventory", (3,)) == ("xi[0]", "xi[1]", "xi[2]")  # a shape the names do not fit


def test_the_cost_plot_shows_each_levels_worst_kernel_and_says_so(tmp_path, monkeypatch):
    import matplotlib.figure

    rng = np.random.default_rng(2)
    V, C = _results(rng, m=1)
    C[:, 2, 0, :, 0] += 3.0  # one direction of level 2 far worse than the other
    scores = C[..., 0].mean(axis=(0, 3))  # (level, direction) by hand
    figures = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: figures.append(self))
    worst = {0: {"PPO-Lag": "level 0.6, heater_gain +30 %, loss -30 %"}}  # constraint 0's, as the report words it
    plots.plot_robustness(tmp_path, {"PPO-Lag": (V, C)}, np.array([0.0, 0.3, 0.6, 1.0]), "thermo", ("too_hot",), worst)
    ax = figures[1].axes[0]
    worst, mean = (line.get_ydata() for line in ax.get_lines()[:2])
    np.testing.assert_allclose(worst, [max(scores[lv]) for lv in range(4)])
    np.testing.assert_allclose(mean, [np.mean(scores[lv]) for lv in range(4)])
    assert "worst kernel" in ax.get_title()
    caption = " ".join(t.get_text() for t in figures[1].texts)
    assert "solid: each level's worst test kernel" in caption and "faint: the mean" in caption
    assert "worst kernel: PPO-Lag: level 0.6, heater_gain +30 %, loss -30 %" in caption


def test_the_search_table_says_the_kernel_it_found_in_field_terms():
    from rcmdp_jax.study.report import worst_case_section

    entry = {"grid": [0.1, 0.2], "search": [0.3, 0.1], "lower_is_worse": False,
             "search_xi": [[26.0, 0.35], [20.0, 0.5]], "grid_xi": [[20.0, 0.5], [20.0, 0.5]]}  # fmt: skip
    text, js = worst_case_section({"PPO-Lag": {"C0": entry}}, "thermo", {"C0": "too_hot"}, np.array([20.0, 0.5]),
                                  ("heater_gain", "loss"))  # fmt: skip
    assert "| heater_gain +30 %, loss -30 % ([26.0, 0.35]) |" in text
    assert js["per_algorithm"]["PPO-Lag"]["C0"]["search_kernel"] == ["heater_gain +30 %, loss -30 %",
                                                                      "the nominal kernel"]  # fmt: skip


def test_the_verdict_is_printed_by_the_report_and_at_the_end_of_a_run(trained, tmp_path, capsys):
    import json
    import shutil

    import report

    from rcmdp_jax.study import cli

    out = tmp_path / "copy"
    shutil.copytree(trained, out)
    assert report.main([str(out)]) == 0
    printed = capsys.readouterr().out
    assert "## Is the constraint kept?" in printed and "| MDPO-Lag | \\|x_dot\\|-0.15 |" in printed
    summary = json.loads((out / "cartpole" / "summary.json").read_text())
    kernel = summary["MDPO-Lag"]["constraints"]["|x_dot|-0.15"]["worst_kernel"]
    fields = "cart position|cart velocity|pole angle|pole angular velocity"  # CartPole's kernel_names
    assert kernel == "the nominal kernel" or re.fullmatch(rf"(({fields}) [+-][\d.]+ %(, )?)+", kernel), kernel
    assert kernel in printed and kernel in (out / "cartpole" / "summary.md").read_text()
    assert cli.main(["--eval-only", str(out)]) == 0
    end = capsys.readouterr().out.split("finished in", 1)[1]
    assert "## Is the constraint kept?" in end and kernel in end


def test_the_legend_says_what_r_pen_pm_bolds():
    from rcmdp_jax.study.report import legend

    assert "its bold can go to an algorithm with a far lower Return that stays well under its limit" in " ".join(
        legend(50.0).split()
    )


def test_the_margins_trained_with_are_said_once_in_json_and_in_the_summary():
    """``margin_of``'s ``rule`` (summary.json) is the summary's sentence; algorithms that trained with
    one margin share it; the data margin adds its value at the last iteration (the seeds' mean)."""
    from types import SimpleNamespace

    from rcmdp_jax.study.report_sections import margin_of, margin_text

    def cfg(m, z, n=20.0):
        return SimpleNamespace(hparams=SimpleNamespace(cost_margin=m, margin_z=z, margin_n=n), constraint="lagrangian")

    margin = np.zeros((2, 3, 1))  # [seeds, iterations, constraint]: the last iteration's 1.0 and 2.0
    margin[:, -1, 0] = [1.0, 2.0]
    margins = {"A": margin_of(cfg(0.0, 2.0), {"margin": margin}), "B": margin_of(cfg(0.5, 0.0)),
               "C": margin_of(cfg(0.0, 0.0)), "D": margin_of(cfg(0.0, 0.0))}  # fmt: skip
    assert margins["A"]["rule"] == "the data margin 2 sigma_j / sqrt(20)" and margins["A"]["derived"] == [1.5]
    assert margins["B"]["rule"] == "cost_margin = 0.5, trained toward C <= -0.5 (the dual phase reads C^ + 0.5)"
    assert margin_text(margins) == (
        "\nThe safety margin each algorithm trained with (the verdict is at the limit, not at the margin): A: the data "
        "margin 2 sigma_j / sqrt(20), at the last iteration 1.5 (per constraint); B: cost_margin = 0.5, trained toward "
        "C <= -0.5 (the dual phase reads C^ + 0.5); C, D: cost_margin = 0, no margin, trained toward C <= 0.\n"
    )
    assert margin_text({}) == ""

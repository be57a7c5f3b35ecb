"""A run folder's environment reported (``write_env_report``): its tables (Markdown and LaTeX from one
writer, JSON), the sections in words (``report_sections``), rliable's statistics, its figures (``plots``)."""

from __future__ import annotations

import importlib
import json

import numpy as np

from rcmdp_jax import envs, stats, verdict
from rcmdp_jax.atomic import write_kept, write_text
from rcmdp_jax.kernel_text import kernel_names
from rcmdp_jax.study.plots import drop_stale, plot_aggregate, plot_robustness, plot_training
from rcmdp_jax.study.report_sections import constraint_section, legend, margin_of, md_cell, md_table, worst_case_section
from rcmdp_jax.study.run_folder import RunFolder, load_npz
from rcmdp_jax.worst_case import compare_with_grid

HEADERS = ("Algorithm", "Return", "R_pen±", "R_pen")
# bootstrap resamples of the IQM intervals (rliable's default is 50,000; its bootstrap runs in Python:
# 500 keep a 14-algorithm x 176-kernel report to seconds); read when a report is written (tests lower it)
REPS = 500


def summary_rows(results: dict, lambda_max: float, seeds: dict | None = None):
    """``[(algo, label, {metric: {"mean", "se", "min", "marked"}} or None)]``; ``seeds``: ``{algo: (used, trained)}``
    (an algorithm with diverged seeds: summarised over the others, labelled with the count, never marked)."""
    seeds = seeds or {}
    kept = {a: r for a, r in results.items() if r is not None}
    complete = [a for a in kept if seeds.get(a, (1, 1))[0] == seeds.get(a, (1, 1))[1]]
    table, marks = stats.algorithm_table(kept, lambda_max, complete)
    rows = []
    for algo in results:
        used, total = seeds.get(algo, (1, 1))
        label = algo if used == total else f"{algo} ({used}/{total} seeds; {total - used} diverged)"
        cells = {m: {**vars(table[m][algo]), "marked": marks[m].get(algo, False)} for m in table if algo in kept}
        rows.append((algo, label, cells or None))
    return rows


def _cells(rows, esc, bold: str, no_seed: str) -> list[list[str]]:
    """Each row's texts through ``esc``, the marked in ``bold`` (a format); ``no_seed``: the row of none left."""
    text = lambda c: esc(f"{c['mean']:.2f} ± {c['se']:.2f} (min {c['min']:.2f})")
    cell = lambda c: bold.format(text(c)) if c["marked"] else text(c)
    return [[esc(label), *map(cell, cells.values())] if cells else [esc(label), no_seed] for _, label, cells in rows]


def markdown_table(rows) -> str:
    """The summary table in Markdown (an algorithm with no seed left: its message, then two empty cells)."""
    return "\n".join(md_table(HEADERS, _cells(rows, md_cell, "**{}**", "diverged: no seed left | |"))) + "\n"


def latex_table(rows) -> str:
    esc = lambda x: x.replace("±", r"$\pm$").replace("_", r"\_")
    lines = [r"\begin{tabular}{lccc}", r"\toprule", " & ".join(esc(h) for h in HEADERS) + r" \\", r"\midrule"]
    no_seed = r"\multicolumn{3}{c}{diverged: no seed left}"
    lines += [" & ".join(c) + r" \\" for c in _cells(rows, esc, r"\textbf{{{}}}", no_seed)]
    return "\n".join(lines + [r"\bottomrule", r"\end{tabular}"]) + "\n"


def installed(module: str) -> bool:
    """Whether an optional package imports (matplotlib, rliable)."""
    try:
        importlib.import_module(module)
    except Exception:  # not installed, or its dependencies clash (e.g. rliable's arch with pandas 3)
        return False
    return True


def write_env_report(folder: RunFolder, env_name: str, algos, made, configs=None, plots=True, out=None) -> str:
    """One environment's summary.{md,tex,json} and (``plots``) figures into ``out`` (default: its folder); its
    Markdown table and verdict. ``made``: ``envs.make(env_name)``; ``configs``: ``{algo: Config}`` (the margins)."""
    (env, params), bounds, seeds, costs = made, {}, {}, {}
    out = folder.env_dir(env_name) if out is None else out
    results, metrics, levels = folder.load_results(env_name, algos, bounds, seeds, costs)
    if not results:
        return ""
    kept = {a: r for a, r in results.items() if r is not None}
    names = envs.cost_names(env_name, env.num_constraints)
    if not plots and (stale := drop_stale(out, len(names))):
        print(f"--plots off: removed the earlier report's figures ({', '.join(stale)}); 'rcmdp report RUN_DIR' draws "
              "them again")  # fmt: skip
    files = (load_npz(folder.algo_dir(env_name, a) / "test_results.npz") for a in kept)
    test_xi = next((np.asarray(z["test_xi"], np.float64) for z in files if np.ndim(z.get("test_xi")) >= 2), None)
    xi_names = kernel_names(env_name, test_xi.shape[2:]) if test_xi is not None else None
    margins = {a: margin_of(c, metrics.get(a)) for a, c in (configs or {}).items() if c.constrained and a in kept}
    rows = summary_rows(results, env.lambda_max, seeds)
    md = markdown_table(rows)
    kept_text, kept_json = constraint_section(results, names, levels, test_xi, xi_names, costs, verdict.kinds(env),
                                              margins, env_name)  # fmt: skip
    text = f"# {env_name}: robustness test\n\n{md}{legend(env.lambda_max)}{kept_text}"
    if diverged := ", ".join(f"{a} {t - u}" for a, (u, t) in seeds.items() if u < t):
        text += ("\nDiverged seeds (non-finite parameters, multipliers, kernel, losses or test episodes) are left out "
                 f"of every statistic; their rows are never marked: {diverged}.\n")  # fmt: skip
    bound = {a: {"overall": float(np.mean(b)), "per_level": np.asarray(b, np.float64).mean(axis=(0, 2, 3)).tolist()}
             for a, b in bounds.items()}  # fmt: skip
    if any(np.any(b) for b in bounds.values()):
        per_level = [[md_cell(a), *(f"{100.0 * f:.1f}" for f in b["per_level"])] for a, b in bound.items()]
        table = md_table(["Algorithm", *(f"{x:g}" for x in levels)], per_level)
        text += ("\n## Test episodes that reached the state bound (%), per distortion level\n\nThe kernel mean is "
                 "clipped at the state bound (docs/fidelity.md, choices): these episodes' returns and costs are those "
                 "of the clipped dynamics.\n\n" + "\n".join(table) + "\n")  # fmt: skip
    if kept and installed("rliable.library"):
        figures = out if plots and installed("matplotlib") else None
        agg_text, agg_json = aggregate_section(kept, env.lambda_max, env_name, figures)
        text += agg_text
        write_text(out / "aggregate.json", json.dumps(agg_json, indent=2))
    elif kept:
        text += "\n(rliable is not installed: no IQM / probability-of-improvement section; pip install -e '.[stats]')\n"
    searched = [a for a in kept if (folder.algo_dir(env_name, a) / "worst_case.npz").exists()]
    loaded = {a: folder.load_worst_case(env_name, a) for a in searched}  # (the search's kernels, the grid's xi)
    found = {a: compare_with_grid(*kept[a], nested, env.lambda_max, grid_xi) for a, (nested, grid_xi) in loaded.items()}
    if found:
        wc_text, wc_json = worst_case_section(found, env_name, {f"C{j}": n for j, n in enumerate(names)},
                                              None if test_xi is None else test_xi[0, 0], xi_names)  # fmt: skip
        text += wc_text
        write_text(out / "worst_case.json", json.dumps(wc_json, indent=2))
    used = {f"seeds_{k}": {a: s[i] for a, s in seeds.items()} for i, k in enumerate(("used", "trained"))}
    per = {**used, "constraints": kept_json, "margin": margins, "state_bound_fraction": bound}  # summary.json's keys
    summary = {a: {**(cells or {}), **{k: v[a] for k, v in per.items() if a in v}} for a, _, cells in rows}
    write_kept(out / "summary.md", text)
    write_kept(out / "summary.tex", latex_table(rows))
    write_kept(out / "summary.json", json.dumps(summary, indent=2))
    where = lambda e: f"level {e['worst_level']:g}, " + e.get("worst_kernel", f"direction {e['worst_direction']}")
    if plots and not installed("matplotlib"):
        print("matplotlib is not installed: plots skipped (pip install -e '.[plot]')")
    elif plots:
        if kept:
            worst = {j: {a: where(c[n]) for a, c in kept_json.items() if n in c} for j, n in enumerate(names)}
            plot_robustness(out, kept, levels, env_name, names, worst)
        if metrics:
            plot_training(out, metrics, np.asarray(params.xi_c), np.asarray(params.kappa), env_name, names)
    return md + kept_text  # what the run's end and ``rcmdp report`` print: the table and the verdict


def aggregate_section(results: dict, lambda_max: float, env_name: str, out_dir=None) -> tuple[str, dict]:
    """Markdown and JSON of rliable's IQM with its interval, the best's probability of improvement (a point
    estimate) and profiles of ``Return`` and ``R_pen``, a run a seed, a task a test kernel; figures into ``out_dir``."""
    from rliable import library as rly
    from rliable import metrics as rm

    js: dict = {}
    lines = [
        f"\n## Aggregate statistics across seeds and test kernels ({env_name}, rliable)\n",
        "Scores: each seed's mean over a test kernel's episodes, for every kernel of the grid. IQM: the mean of "
        f"the middle 50% of all (seed, kernel) scores; [95% stratified-bootstrap interval, {REPS} resamples]. "
        "P(best > algo) (point estimate): probability that a seed of the highest-IQM algorithm beats a seed of the "
        "other on a kernel, averaged over kernels.\n",
    ]
    for metric in ("Return", "R_pen"):
        per = {a: stats.penalised_returns(V, C, lambda_max)[metric].mean(-1) for a, (V, C) in results.items()}
        scores = {a: x.reshape(x.shape[0], -1) for a, x in per.items()}  # [S, L * D]
        np.random.seed(0)  # rliable draws from NumPy's global generator
        point, ci = rly.get_interval_estimates(scores, lambda x: np.array([rm.aggregate_iqm(x)]), reps=REPS)
        iqm = {a: (float(point[a][0]), float(ci[a][0, 0]), float(ci[a][1, 0])) for a in scores}
        best = max(iqm, key=lambda a: iqm[a][0])
        poi = {a: float(rm.probability_of_improvement(scores[best], s)) for a, s in scores.items() if a != best}
        taus = np.linspace(min(s.min() for s in scores.values()), max(s.max() for s in scores.values()), 41)
        profiles = rly.create_performance_profile(scores, taus, reps=10)[0]  # its intervals are not used
        js[metric] = {"iqm": {a: list(v) for a, v in iqm.items()}, "best": best,
                      "probability_of_improvement": {f"{best} > {a}": v for a, v in poi.items()},
                      "profile_taus": taus.tolist(),
                      "profiles": {a: np.asarray(p).tolist() for a, p in profiles.items()}}  # fmt: skip
        rows = [[md_cell(a), f"{q[0]:.2f} [{q[1]:.2f}, {q[2]:.2f}]", f"{poi[a]:.2f}" if a in poi else "—"]
                for a, q in iqm.items()]  # fmt: skip
        lines += [f"\n### {metric}\n", *md_table(["Algorithm", "IQM [95% CI]", f"P({best} > algo)"], rows)]
    if out_dir is not None:
        plot_aggregate(out_dir, js, env_name)
    return "\n".join(lines) + "\n", js

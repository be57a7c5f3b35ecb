"""Tables and plots of a run folder (also usable on its own:
``python experiments/report.py RUN_DIR`` regenerates every table and plot)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rcmdp_jax import stats
from rcmdp_jax.kernel_text import kernel_names
from rcmdp_jax.study import report_sections
from rcmdp_jax.study.plots import drop_stale, plot_robustness, plot_training
from rcmdp_jax.study.run_folder import RunFolder, load_npz, write_text

HEADERS = ("Algorithm", "Return", "R_pen±", "R_pen")


def _cell(s: stats.Summary) -> str:
    return f"{s.mean:.2f} ± {s.se:.2f} (min {s.min:.2f})"


def summary_rows(results: dict, lambda_max: float, seeds: dict | None = None):
    """``[(algo, label, {metric: (Summary, marked)} or None)]`` in the order of ``results``.

    ``seeds``: ``{algo: (seeds used, seeds trained)}``. An algorithm with diverged seeds
    is summarised over the others, labelled with the count and never marked; one with
    none left (``results[algo] is None``) is a row that says so."""
    seeds = seeds or {}
    kept = {a: r for a, r in results.items() if r is not None}
    table, _ = stats.algorithm_table(kept, lambda_max) if kept else ({m: {} for m in stats.METRICS}, None)
    complete = [a for a in kept if seeds.get(a, (1, 1))[0] == seeds.get(a, (1, 1))[1]]
    marks = {
        m: stats.within_one_pooled_se({a: table[m][a] for a in complete}) if complete else {} for m in stats.METRICS
    }
    rows = []
    for algo in results:
        used, total = seeds.get(algo, (1, 1))
        label = algo if used == total else f"{algo} ({used}/{total} seeds; {total - used} diverged)"
        cells = None if algo not in kept else {m: (table[m][algo], marks[m].get(algo, False)) for m in stats.METRICS}
        rows.append((algo, label, cells))
    return rows


def markdown_table(rows) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for _, label, cells in rows:
        if cells is None:
            lines.append(f"| {report_sections.md_cell(label)} | diverged: no seed left | | |")
            continue
        out = []
        for m in stats.METRICS:
            s, marked = cells[m]
            out.append(f"**{_cell(s)}**" if marked else _cell(s))
        lines.append(f"| {report_sections.md_cell(label)} | " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


def latex_table(rows) -> str:
    def esc(x: str) -> str:
        return x.replace("±", r"$\pm$").replace("_", r"\_")

    lines = [r"\begin{tabular}{lccc}", r"\toprule", " & ".join(esc(h) for h in HEADERS) + r" \\", r"\midrule"]
    for _, label, cells in rows:
        if cells is None:
            lines.append(esc(label) + r" & \multicolumn{3}{c}{diverged: no seed left} \\")
            continue
        out = []
        for m in stats.METRICS:
            s, marked = cells[m]
            txt = esc(_cell(s))
            out.append(rf"\textbf{{{txt}}}" if marked else txt)
        lines.append(esc(label) + " & " + " & ".join(out) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def summary_json(rows, seeds: dict | None = None) -> dict:
    out = {}
    for algo, _, cells in rows:
        entry = {} if cells is None else {
            m: {"mean": s.mean, "se": s.se, "min": s.min, "marked": marked} for m, (s, marked) in cells.items()
        }  # fmt: skip
        if seeds and algo in seeds:
            entry["seeds_used"], entry["seeds_trained"] = seeds[algo]
        out[algo] = entry
    return out


def state_bound_table(bounds: dict, levels: np.ndarray) -> str:
    """Markdown: per algorithm and distortion level, the % of test episodes whose kernel
    mean reached the environment's state bound (``envs.inventory``)."""
    head = "| Algorithm | " + " | ".join(f"{x:g}" for x in levels) + " |"
    lines = [head, "|" + "---|" * (len(levels) + 1)]
    for algo, b in bounds.items():
        frac = 100.0 * np.asarray(b, np.float64).mean(axis=(0, 2, 3))
        lines.append(f"| {report_sections.md_cell(algo)} | " + " | ".join(f"{f:.1f}" for f in frac) + " |")
    return "\n".join(lines) + "\n"


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def load_worst_case(folder: RunFolder, env_name: str, results: dict, lambda_max: float) -> dict:
    """``{algo: worst_case.compare_with_grid(...)}`` for the algorithms with a
    ``worst_case.npz`` (``run.py --worst-case``), over the seeds kept in ``results``."""
    algos = [a for a, r in results.items() if r is not None
             and (folder.algo_dir(env_name, a) / "worst_case.npz").exists()]  # fmt: skip
    if not algos:
        return {}
    from rcmdp_jax.worst_case import compare_with_grid

    found = {}
    for algo in algos:
        nested, grid_xi = folder.load_worst_case(env_name, algo)
        found[algo] = compare_with_grid(*results[algo], nested, lambda_max, grid_xi)
    return found


def write_env_report(env_dir: Path, env_name: str, algos, lambda_max: float, xi_c, kappa, plots: bool = True) -> str:
    """Write summary.{md,tex,json} and (``plots``) the figures for one environment; return the
    Markdown table and the verdict."""
    bounds: dict = {}
    seeds: dict = {}
    costs: dict = {}
    folder = RunFolder(env_dir.parent)
    results, metrics, levels = folder.load_results(env_name, algos, bounds, seeds, costs)
    if not results:
        return ""
    rows = summary_rows(results, lambda_max, seeds)
    md = markdown_table(rows)
    kept = {a: r for a, r in results.items() if r is not None}
    names = report_sections.cost_names(env_name, next(iter(kept.values()))[1].shape[-1]) if kept else ()
    if not plots:  # --plots off: the tables only, and before any is written no figures of earlier results
        stale = drop_stale(env_dir, len(names) if names else None)  # no seed kept: the files say
        if stale:
            print(f"--plots off: removed the earlier report's figures ({', '.join(stale)}); "
                  "'rcmdp report RUN_DIR' draws them again")  # fmt: skip
    test_xi = _test_kernels(folder, env_name, results)
    xi_names = kernel_names(env_name, test_xi.shape[2:]) if test_xi is not None else None
    kept_text, kept_json = report_sections.constraint_section(results, names, levels, test_xi, xi_names, costs)
    text = f"# {env_name}: robustness test\n\n{md}{report_sections.legend(lambda_max)}{kept_text}"
    diverged = {a: t - u for a, (u, t) in seeds.items() if u < t}
    if diverged:
        text += (
            "\nDiverged seeds (non-finite parameters, multipliers, kernel, losses or test episodes) are "
            "left out of every statistic; their rows are never marked: "
            + ", ".join(f"{a} {n}" for a, n in diverged.items())
            + ".\n"
        )
    summary = summary_json(rows, seeds)
    for algo, entry in kept_json.items():
        summary[algo]["constraints"] = entry
    if any(np.any(b) for b in bounds.values()):
        text += (
            "\n## Test episodes that reached the state bound (%), per distortion level\n\n"
            "The kernel mean is clipped at the state bound (docs/fidelity.md, choices): these episodes' "
            "returns and costs are those of the clipped dynamics.\n\n" + state_bound_table(bounds, levels)
        )
    if kept and report_sections.rliable_available():
        figures = env_dir if plots and _has_matplotlib() else None
        agg_text, agg_json = report_sections.aggregate_section(kept, lambda_max, env_name, figures)
        text += agg_text
        write_text(env_dir / "aggregate.json", json.dumps(agg_json, indent=2))
    elif kept:
        text += "\n(rliable is not installed: no IQM / probability-of-improvement section; pip install -e '.[stats]')\n"
    found = load_worst_case(folder, env_name, results, lambda_max)
    if found:
        nominal = test_xi[0, 0] if test_xi is not None else None
        wc_text, wc_json = report_sections.worst_case_section(found, env_name, {f"C{j}": n for j, n in enumerate(names)}, nominal,
                                              xi_names)  # fmt: skip
        text += wc_text
        write_text(env_dir / "worst_case.json", json.dumps(wc_json, indent=2))
    for algo, b in bounds.items():
        summary[algo]["state_bound_fraction"] = {
            "overall": float(np.mean(b)),
            "per_level": [float(f) for f in np.asarray(b, np.float64).mean(axis=(0, 2, 3))],
        }
    write_text(env_dir / "summary.md", text)
    write_text(env_dir / "summary.tex", latex_table(rows))
    write_text(env_dir / "summary.json", json.dumps(summary, indent=2))
    if not plots:
        return md + kept_text
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed: plots skipped (pip install -e '.[plot]')")
        return md + kept_text
    if kept:
        worst = {j: {a: _where(c[n]) for a, c in kept_json.items() if n in c} for j, n in enumerate(names)}
        plot_robustness(env_dir, kept, levels, env_name, names, worst)
    if metrics:
        plot_training(env_dir, metrics, np.asarray(xi_c), np.asarray(kappa), env_name, names or None)
    return md + kept_text  # what the run's end and ``rcmdp report`` print: the table and the verdict


def _where(entry: dict) -> str:
    """A constraint's worst kernel (``report_sections.constraint_section``'s entry) in words."""
    kernel = entry.get("worst_kernel", f"direction {entry['worst_direction']}")
    return f"level {entry['worst_level']:g}, {kernel}"


def _test_kernels(folder: RunFolder, env_name: str, results: dict):
    """The test kernels ``[L, D, *xi]`` (level 0 the nominal one) every algorithm of the
    run was tested on, from the first result file that has them (None: none does)."""
    for algo, r in results.items():
        path = folder.algo_dir(env_name, algo) / "test_results.npz"
        if r is not None and path.exists():
            z = load_npz(path)
            if "test_xi" in z and np.ndim(z["test_xi"]) >= 2:
                return np.asarray(z["test_xi"], np.float64)
    return None

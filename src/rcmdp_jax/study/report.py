"""Tables and plots of a run folder (also usable on its own:
``python experiments/report.py RUN_DIR`` regenerates every table and plot)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rcmdp_jax import stats
from rcmdp_jax.study import aggregate, report_text
from rcmdp_jax.study.plots import plot_robustness, plot_training
from rcmdp_jax.study.run_folder import RunFolder, write_text
from rcmdp_jax.worst_case import beyond_grid

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
            lines.append(f"| {report_text.md_cell(label)} | diverged: no seed left | | |")
            continue
        out = []
        for m in stats.METRICS:
            s, marked = cells[m]
            out.append(f"**{_cell(s)}**" if marked else _cell(s))
        lines.append(f"| {report_text.md_cell(label)} | " + " | ".join(out) + " |")
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
        lines.append(f"| {report_text.md_cell(algo)} | " + " | ".join(f"{f:.1f}" for f in frac) + " |")
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


def write_env_report(env_dir: Path, env_name: str, algos, lambda_max: float, xi_c, kappa) -> str:
    """Write summary.{md,tex,json} and the plots for one environment; return the Markdown table."""
    bounds: dict = {}
    seeds: dict = {}
    folder = RunFolder(env_dir.parent)
    results, metrics, levels = folder.load_results(env_name, algos, bounds, seeds)
    if not results:
        return ""
    rows = summary_rows(results, lambda_max, seeds)
    md = markdown_table(rows)
    kept = {a: r for a, r in results.items() if r is not None}
    names = report_text.cost_names(env_name, next(iter(kept.values()))[1].shape[-1]) if kept else ()
    kept_text, kept_json = report_text.constraint_section(results, names, levels)
    text = f"# {env_name}: robustness test\n\n{md}{report_text.legend(lambda_max)}{kept_text}"
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
    if kept and aggregate.available():
        plots = env_dir if _has_matplotlib() else None
        agg_text, agg_json = aggregate.section(kept, lambda_max, env_name, plots)
        text += agg_text
        write_text(env_dir / "aggregate.json", json.dumps(agg_json, indent=2))
    elif kept:
        text += "\n(rliable is not installed: no IQM / probability-of-improvement section; pip install -e '.[stats]')\n"
    found = load_worst_case(folder, env_name, results, lambda_max)
    if found:
        wc_text, wc_json = worst_case_section(found, env_name, {f"C{j}": n for j, n in enumerate(names)})
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
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed: plots skipped (pip install -e '.[plot]')")
        return md
    if kept:
        plot_robustness(env_dir, kept, levels, env_name, names)
    if metrics:
        plot_training(env_dir, metrics, np.asarray(xi_c), np.asarray(kappa), env_name, names or None)
    return md


def worst_case_section(found: dict, env_name: str, labels: dict | None = None) -> tuple[str, dict]:
    """The grid-vs-search table (Markdown) and its JSON: ``found`` is
    ``{algo: worst_case.compare_with_grid(...)}`` over the seeds that did not diverge.
    Per algorithm and quantity: the mean over seeds of each seed's worst value on the
    grid and by the search, and in how many seeds the search went beyond the grid; per
    quantity, the domain's count and mean gap; ``xi`` where the search found each
    seed's lowest return, or with ``--worst-case costs`` the first constraint's highest
    (the worst seed's in the table)."""
    if not found:
        return "", {}
    metrics = list(next(iter(found.values())))
    names = labels or {}

    def label(m, default):  # a cost's name for its metric C<j>, as one Markdown cell
        return report_text.md_cell(names.get(m, default))

    head = (
        "| Algorithm | "
        + " | ".join(f"{label(m, m)}: grid | {label(m, m)}: search" for m in metrics)
        + f" | xi of the {'lowest return' if metrics[0] == 'Return' else 'highest ' + label(metrics[0], metrics[0])}"
        + " (search) |"
    )
    lines = [head, "|" + "---|" * (2 * len(metrics) + 2)]
    js: dict = {"per_algorithm": {}, "domain": {}}
    pairs = {m: [] for m in metrics}
    for algo, cmp in found.items():
        cells, entry = [], {}
        for m in metrics:
            d = cmp[m]
            g, f = np.asarray(d["grid"], np.float64), np.asarray(d["search"], np.float64)
            beyond = beyond_grid(g, f, d["lower_is_worse"])  # not float rounding
            pairs[m].append((g, f, beyond))
            cells.append(f"{g.mean():.2f} | {f.mean():.2f} ({int(beyond.sum())}/{beyond.size})")
            entry[m] = {
                "grid": g.tolist(),
                "search": f.tolist(),
                "search_beyond_grid": beyond.tolist(),
                "search_xi": np.asarray(d["search_xi"]).tolist(),
                "grid_xi": np.asarray(d["grid_xi"]).tolist(),
            }
        r = cmp[metrics[0]]  # the lowest return's, or with --worst-case costs the first constraint's highest
        worst_seed = int(np.argmin(r["search"]) if r["lower_is_worse"] else np.argmax(r["search"]))
        xi = np.round(np.asarray(r["search_xi"][worst_seed], np.float64).ravel(), 3).tolist()
        lines.append(f"| {report_text.md_cell(algo)} | " + " | ".join(cells) + f" | {xi} |")
        js["per_algorithm"][algo] = entry
    first = found[next(iter(found))]
    summary = [_domain_line(m, label(m, m), pairs[m], first[m]["lower_is_worse"], js) for m in metrics]
    text = (
        f"\n## Worst case: the grid's vs a gradient search's ({env_name})\n\n"
        "Per seed, the worst value over the test grid (11 levels x all corners) and the worst a projected-"
        "gradient search found inside the box (``--worst-case``, ``rcmdp_jax.worst_case``; values on fresh "
        "episodes, scored as the test scores them), averaged over seeds; in brackets, the seeds where the "
        "search went beyond the grid. "
        + (
            "Return and R_pen: lower is worse; C: higher is worse.\n\n"
            if "Return" in metrics
            else "Only the constraints were searched (``--worst-case costs``); C: higher is worse.\n\n"
        )
        + "\n".join(lines)
        + "\n\n"
        + "\n".join(summary)
        + "\n"
    )
    return text, js


def _domain_line(m: str, name: str, pairs: list, lower_is_worse: bool, js: dict) -> str:
    """Quantity ``m`` (shown as ``name``) over all (algorithm, seed) pairs: how often and by how
    much the search went beyond the grid (into ``js["domain"][m]``), as one Markdown bullet."""
    g = np.concatenate([p[0] for p in pairs])
    f = np.concatenate([p[1] for p in pairs])
    beyond = np.concatenate([p[2] for p in pairs])
    sign = 1.0 if pairs and lower_is_worse else -1.0
    gap = sign * (g - f)  # > 0: the search found worse than the grid
    d = js["domain"][m] = {
        "pairs": int(beyond.size),
        "search_beyond_grid": int(beyond.sum()),
        "mean_gap": float(gap.mean()),
        "mean_gap_where_beyond": float(gap[beyond].mean()) if beyond.any() else 0.0,
    }
    return (
        f"* {name}: the search went beyond the grid's worst in {d['search_beyond_grid']} of "
        f"{d['pairs']} (algorithm, seed) pairs; by {d['mean_gap_where_beyond']:.3f} on average "
        f"where it did (mean over all pairs {d['mean_gap']:+.3f}; > 0: the search found worse)."
    )

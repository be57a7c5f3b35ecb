"""The report of a run folder: its tables (Markdown, LaTeX, JSON), its plots and its
``summary.md`` (``write_env_report``; also usable on its own: ``python experiments/report.py
RUN_DIR`` regenerates every table and plot), and the summary's sections in words beside the
table: the legend, whether each constraint is kept (``constraint_section``), grid against
search (``worst_case_section``), and the rliable statistics (``aggregate_section``)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np

from rcmdp_jax import stats, verdict
from rcmdp_jax.kernel_text import kernel_names
from rcmdp_jax.study.plots import drop_stale, plot_robustness, plot_training
from rcmdp_jax.study.report_sections import constraint_section, legend, margin_of, md_cell, worst_case_section
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


def _cells(rows, esc, bold) -> list[list[str]]:
    """Each row's texts through ``esc``, its marked cells through ``bold``: ``[label]`` for an
    algorithm with no seed left, else ``[label, one cell per metric]``."""
    out = []
    for _, label, cells in rows:
        marked = [] if cells is None else [cells[m] for m in stats.METRICS]
        out.append([esc(label)] + [bold(esc(_cell(s))) if b else esc(_cell(s)) for s, b in marked])
    return out


def markdown_table(rows) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for c in _cells(rows, md_cell, lambda t: f"**{t}**"):
        lines.append(f"| {c[0]} | diverged: no seed left | | |" if len(c) == 1 else "| " + " | ".join(c) + " |")
    return "\n".join(lines) + "\n"


def latex_table(rows) -> str:
    esc = lambda x: x.replace("±", r"$\pm$").replace("_", r"\_")
    lines = [r"\begin{tabular}{lccc}", r"\toprule", " & ".join(esc(h) for h in HEADERS) + r" \\", r"\midrule"]
    for c in _cells(rows, esc, lambda t: rf"\textbf{{{t}}}"):
        rest = r"\multicolumn{3}{c}{diverged: no seed left}" if len(c) == 1 else " & ".join(c[1:])
        lines.append(f"{c[0]} & {rest}" + r" \\")
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
        lines.append(f"| {md_cell(algo)} | " + " | ".join(f"{f:.1f}" for f in frac) + " |")
    return "\n".join(lines) + "\n"


def cost_names(env_name: str, m: int) -> tuple[str, ...]:
    """The names of the ``m`` constraint costs of ``env_name`` (its ``DomainSpec``'s;
    ``C_j`` where unknown)."""
    try:
        from rcmdp_jax import envs

        names = envs.spec(env_name).cost_names
    except (ValueError, TypeError):
        names = ()
    return tuple(names) if len(names) == m else tuple(f"C_{j + 1}" for j in range(m))


def installed(module: str) -> bool:
    """Whether an optional package imports (matplotlib, rliable)."""
    try:
        importlib.import_module(module)
    except Exception:  # not installed, or its dependencies clash (e.g. rliable's arch with pandas 3)
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


def write_env_report(env_dir: Path, env_name: str, algos, lambda_max: float, xi_c, kappa, plots: bool = True,
                     env=None, configs: dict | None = None) -> str:  # fmt: skip
    """Write summary.{md,tex,json} and (``plots``) the figures for one environment; return the
    Markdown table and the verdict. ``env``: the robust environment (each constraint's kind and
    budget, ``verdict.kinds``); ``configs``: ``{algo: Config}`` (each one's margin, ``margin_of``)."""
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
    names = cost_names(env_name, next(iter(kept.values()))[1].shape[-1]) if kept else ()
    if not plots:  # --plots off: the tables only, and before any is written no figures of earlier results
        stale = drop_stale(env_dir, len(names) if names else None)  # no seed kept: the files say
        if stale:
            print(f"--plots off: removed the earlier report's figures ({', '.join(stale)}); "
                  "'rcmdp report RUN_DIR' draws them again")  # fmt: skip
    test_xi = _test_kernels(folder, env_name, results)
    xi_names = kernel_names(env_name, test_xi.shape[2:]) if test_xi is not None else None
    kinds = verdict.kinds(env) if env is not None and env.num_constraints == len(names) else None
    margins = {a: margin_of(c, metrics.get(a)) for a, c in (configs or {}).items() if c.constrained and a in kept}
    kept_text, kept_json = constraint_section(results, names, levels, test_xi, xi_names, costs, kinds, margins)
    text = f"# {env_name}: robustness test\n\n{md}{legend(lambda_max)}{kept_text}"
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
    for algo, margin in margins.items():
        summary[algo]["margin"] = margin
    if any(np.any(b) for b in bounds.values()):
        text += (
            "\n## Test episodes that reached the state bound (%), per distortion level\n\n"
            "The kernel mean is clipped at the state bound (docs/fidelity.md, choices): these episodes' "
            "returns and costs are those of the clipped dynamics.\n\n" + state_bound_table(bounds, levels)
        )
    if kept and rliable_available():
        figures = env_dir if plots and installed("matplotlib") else None
        agg_text, agg_json = aggregate_section(kept, lambda_max, env_name, figures)
        text += agg_text
        write_text(env_dir / "aggregate.json", json.dumps(agg_json, indent=2))
    elif kept:
        text += "\n(rliable is not installed: no IQM / probability-of-improvement section; pip install -e '.[stats]')\n"
    found = load_worst_case(folder, env_name, results, lambda_max)
    if found:
        nominal = test_xi[0, 0] if test_xi is not None else None
        wc_text, wc_json = worst_case_section(found, env_name, {f"C{j}": n for j, n in enumerate(names)}, nominal,
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
    if not installed("matplotlib"):
        print("matplotlib is not installed: plots skipped (pip install -e '.[plot]')")
        return md + kept_text
    if kept:
        worst = {j: {a: _where(c[n]) for a, c in kept_json.items() if n in c} for j, n in enumerate(names)}
        plot_robustness(env_dir, kept, levels, env_name, names, worst)
    if metrics:
        plot_training(env_dir, metrics, np.asarray(xi_c), np.asarray(kappa), env_name, names or None)
    return md + kept_text  # what the run's end and ``rcmdp report`` print: the table and the verdict


def _where(entry: dict) -> str:
    """A constraint's worst kernel (``constraint_section``'s entry) in words."""
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


# --- rliable: aggregate statistics across seeds and test kernels ---
# (Agarwal et al., 2021: the IQM with stratified-bootstrap intervals, the probability of
# improvement, performance profiles; their figures: ``plots.plot_aggregate``.)
# For the statistics, a *run* is a seed, a *task* a test kernel of the robustness grid (level
# x direction): each algorithm's scores are a ``[seeds, kernels]`` matrix of per-kernel means
# of a test quantity (``Return`` or ``R_pen``, as ``stats.penalised_returns`` scores each
# episode). The study's mean +/- SE / min table (``stats``) stays as it is; these sit next to
# it. ``pip install -e ".[stats]"`` installs rliable.

# bootstrap resamples of the IQM intervals (rliable's default is 50,000; rliable's
# bootstrap runs in Python: 500 keep a 14-algorithm x 176-kernel report to seconds); read
# when a report is written (the test suite lowers it: its checks read the point estimates)
REPS = 500


def rliable_available() -> bool:
    return installed("rliable.library")


def score_matrices(results: dict, lambda_max: float, metric: str) -> dict[str, np.ndarray]:
    """``{algo: [seeds, kernels]}``: the per-kernel mean of ``metric`` from the sweep's
    ``(V [S, L, D, E], C [S, L, D, E, m])``."""
    out = {}
    for algo, (V, C) in results.items():
        per_episode = stats.penalised_returns(V, C, lambda_max)[metric]  # [S, L, D, E]
        out[algo] = per_episode.mean(-1).reshape(per_episode.shape[0], -1).astype(np.float64)
    return out


def iqm_intervals(
    scores: dict[str, np.ndarray], reps: int | None = None, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """``{algo: (IQM, CI low, CI high)}``: the interquartile mean of all runs x tasks,
    with a 95% stratified-bootstrap interval (runs resampled within each task; ``reps``
    resamples, ``REPS`` unless given)."""
    from rliable import library as rly
    from rliable import metrics

    reps = REPS if reps is None else reps

    np.random.seed(seed)  # rliable draws from NumPy's global generator
    point, interval = rly.get_interval_estimates(scores, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=reps)
    return {a: (float(point[a][0]), float(interval[a][0, 0]), float(interval[a][1, 0])) for a in scores}


def probability_of_improvement(scores: dict[str, np.ndarray], pairs) -> dict:
    """``{(x, y): P(X > Y)}`` for each pair: the probability that a run of ``x`` beats a
    run of ``y`` on a task (Mann-Whitney U, ties count 1/2), averaged over tasks. Point
    estimates: rliable's bootstrap of it calls SciPy once per task and resample (about a
    second per pair and 10 resamples at 176 kernels), too slow for every report."""
    from rliable import metrics

    return {(x, y): float(metrics.probability_of_improvement(scores[x], scores[y])) for x, y in pairs}


def performance_profiles(scores: dict[str, np.ndarray], taus: np.ndarray) -> dict[str, np.ndarray]:
    """``{algo: [len(taus)]}``: the fraction of runs x tasks scoring above each ``tau``."""
    from rliable import library as rly

    profiles, _ = rly.create_performance_profile(scores, taus, reps=10)  # its intervals are not used
    return {a: np.asarray(p) for a, p in profiles.items()}


def aggregate_section(results: dict, lambda_max: float, env_name: str, out_dir=None) -> tuple[str, dict]:
    """Markdown and JSON of the rliable statistics of one domain, for ``Return`` and
    ``R_pen``: IQM with its interval per algorithm, and the probability that the
    algorithm with the highest IQM improves on each other one; with ``out_dir``, the
    interval-estimate figure ``intervals.png`` and the profiles ``profiles.png``."""
    if not results:
        return "", {}
    js: dict = {}
    lines = [
        f"\n## Aggregate statistics across seeds and test kernels ({env_name}, rliable)\n",
        "Scores: each seed's mean over a test kernel's episodes, for every kernel of the grid. IQM: the mean of "
        f"the middle 50% of all (seed, kernel) scores; [95% stratified-bootstrap interval, {REPS} resamples]. "
        "P(best > algo) (point estimate): probability that a seed of the highest-IQM algorithm beats a seed of the other on a "
        "kernel, averaged over kernels.\n",
    ]
    figures = {}
    for metric in ("Return", "R_pen"):
        scores = score_matrices(results, lambda_max, metric)
        iqm = iqm_intervals(scores)
        best = max(iqm, key=lambda a: iqm[a][0])
        others = [a for a in scores if a != best]
        poi = probability_of_improvement(scores, [(best, a) for a in others]) if others else {}
        lo = min(s.min() for s in scores.values())
        hi = max(s.max() for s in scores.values())
        taus = np.linspace(lo, hi, 41)
        profiles = performance_profiles(scores, taus)
        js[metric] = {
            "iqm": {a: list(v) for a, v in iqm.items()},
            "best": best,
            "probability_of_improvement": {f"{x} > {y}": v for (x, y), v in poi.items()},
            "profile_taus": taus.tolist(),
            "profiles": {a: p.tolist() for a, p in profiles.items()},
        }
        lines += [f"\n### {metric}\n", f"| Algorithm | IQM [95% CI] | P({best} > algo) |", "|---|---|---|"]
        for a in scores:
            p = poi.get((best, a))
            cell = "—" if p is None else f"{p:.2f}"
            lines.append(f"| {md_cell(a)} | {iqm[a][0]:.2f} [{iqm[a][1]:.2f}, {iqm[a][2]:.2f}] | {cell} |")
        figures[metric] = (iqm, taus, profiles)
    if out_dir is not None:
        from rcmdp_jax.study.plots import plot_aggregate

        plot_aggregate(out_dir, figures, env_name)
    return "\n".join(lines) + "\n", js

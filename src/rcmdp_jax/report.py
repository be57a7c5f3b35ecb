"""Tables and plots of a run folder (also usable on its own:
``python experiments/report.py RUN_DIR`` regenerates every table and plot)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from rcmdp_jax import aggregate, stats
from rcmdp_jax.divergence import nonfinite_episodes

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
            lines.append(f"| {label} | diverged: no seed left | | |")
            continue
        out = []
        for m in stats.METRICS:
            s, marked = cells[m]
            out.append(f"**{_cell(s)}**" if marked else _cell(s))
        lines.append(f"| {label} | " + " | ".join(out) + " |")
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


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["axes.prop_cycle"] = plt.cycler(color=plt.get_cmap("tab20").colors)
    return plt


def plot_robustness(out_dir: Path, results: dict, levels: np.ndarray, env_name: str) -> list[Path]:
    """Test Return and each constraint value vs distortion level, SE bands across directions."""
    plt = _pyplot()

    m = next(iter(results.values()))[1].shape[-1]
    panels = [("Return", lambda V, C: V)] + [
        (f"constraint value C_{j + 1}", (lambda j: lambda V, C: C[..., j])(j)) for j in range(m)
    ]
    paths = []
    for i, (label, fn) in enumerate(panels):
        fig, ax = plt.subplots(figsize=(6, 4))
        for algo, (V, C) in results.items():
            mean, se = stats.per_level(fn(V, C))
            ax.plot(levels, mean, marker="o", ms=3, label=algo)
            ax.fill_between(levels, mean - se, mean + se, alpha=0.2)
        ax.set_xlabel("distortion level")
        ax.set_ylabel(label)
        ax.set_title(f"{env_name}: test {label}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        path = out_dir / ("test_return.png" if i == 0 else f"test_cost_{i}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_training(out_dir: Path, metrics: dict, xi_c: np.ndarray, kappa: np.ndarray, env_name: str) -> Path:
    """Training curves (mean over seeds): evaluation return, constraint value, lam and xi distortion."""
    plt = _pyplot()

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for algo, m in metrics.items():
        steps = np.asarray(m["policy_steps"]).mean(0)
        with warnings.catch_warnings():  # iterations without an evaluation are NaN for every seed
            warnings.simplefilter("ignore", RuntimeWarning)
            ret = np.nanmean(np.asarray(m["eval_return"]), axis=0)
            cost = np.nanmean(np.asarray(m["eval_costs"])[..., 0], axis=0)
        lam = np.asarray(m["lam"])[..., 0].mean(0)
        xi = np.asarray(m["xi"])
        dist = np.abs(xi - xi_c) / np.maximum(kappa, 1e-12)
        dist = dist.reshape(dist.shape[:2] + (-1,)).max(-1).mean(0)
        ok = np.isfinite(ret)
        axes[0, 0].plot(steps[ok], ret[ok], label=algo)
        axes[0, 1].plot(steps[ok], cost[ok], label=algo)
        axes[1, 0].plot(steps, lam, label=algo)
        axes[1, 1].plot(steps, dist, label=algo)
    titles = ["evaluation return", "evaluation constraint value C_1", "lambda_1", "max_i |xi_i - xi_c,i| / kappa_i"]
    for ax, t in zip(axes.ravel(), titles):
        ax.set_title(t, fontsize=10)
        ax.set_xlabel("policy steps")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=6, ncol=2)
    fig.suptitle(f"{env_name}: training curves (mean over seeds)")
    fig.tight_layout()
    path = out_dir / "train_curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def state_bound_table(bounds: dict, levels: np.ndarray) -> str:
    """Markdown: per algorithm and distortion level, the % of test episodes whose kernel
    mean reached the environment's state bound (``envs.inventory``)."""
    head = "| Algorithm | " + " | ".join(f"{x:g}" for x in levels) + " |"
    lines = [head, "|" + "---|" * (len(levels) + 1)]
    for algo, b in bounds.items():
        frac = 100.0 * np.asarray(b, np.float64).mean(axis=(0, 2, 3))
        lines.append(f"| {algo} | " + " | ".join(f"{f:.1f}" for f in frac) + " |")
    return "\n".join(lines) + "\n"


def load_env_results(
    env_dir: Path, algos, bounds: dict | None = None, seeds: dict | None = None
) -> tuple[dict, dict, np.ndarray]:
    """``(results {algo: (V, C) of the seeds that did not diverge, or None}, training
    metrics, levels)``; fills ``bounds`` (if given) with each algorithm's per-episode
    state-bound flags and ``seeds`` with ``(seeds used, seeds trained)``."""
    results, metrics, levels = {}, {}, None
    for algo in algos:
        d = env_dir / algo
        if (d / "test_results.npz").exists():
            z = np.load(d / "test_results.npz")
            keep = ~z["diverged"] if "diverged" in z else np.ones(z["V"].shape[0], bool)
            keep &= ~nonfinite_episodes(z["V"], z["C"])  # also for results written before the flag
            results[algo] = (z["V"][keep], z["C"][keep]) if keep.any() else None
            levels = z["levels"]
            if bounds is not None and keep.any():
                bounds[algo] = (z["bound"] if "bound" in z else np.zeros_like(z["V"]))[keep]
            if seeds is not None:
                seeds[algo] = (int(keep.sum()), int(keep.size))
        if (d / "train_metrics.npz").exists():
            metrics[algo] = dict(np.load(d / "train_metrics.npz"))
    return results, metrics, levels


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def load_worst_case(env_dir: Path, env_name: str, results: dict, lambda_max: float, levels) -> dict:
    """``{algo: worst_case.compare_with_grid(...)}`` for the algorithms with a
    ``worst_case.npz`` (``run.py --worst-case``), over the seeds kept in ``results``."""
    found: dict = {}
    paths = {a: env_dir / a / "worst_case.npz" for a, r in results.items() if r is not None}
    paths = {a: p for a, p in paths.items() if p.exists()}
    if not paths:
        return found
    from rcmdp_jax import envs
    from rcmdp_jax.worst_case import compare_with_grid

    env, params = envs.make(env_name)
    grid_xi = np.asarray(env.test_kernels(levels, params).xi)  # the test kernels, once per domain
    for algo, path in paths.items():
        r = results[algo]
        z = np.load(path)
        t = np.load(env_dir / algo / "test_results.npz")
        keep = ~t["diverged"] if "diverged" in t else np.ones(t["V"].shape[0], bool)
        keep &= ~nonfinite_episodes(t["V"], t["C"])
        nested: dict = {}
        for key in z.files:
            name, field = key.split("/")
            nested.setdefault(name, {})[field] = z[key][keep]
        found[algo] = compare_with_grid(r[0], r[1], nested, lambda_max, grid_xi)
    return found


def write_env_report(env_dir: Path, env_name: str, algos, lambda_max: float, xi_c, kappa) -> str:
    """Write summary.{md,tex,json} and the plots for one environment; return the Markdown table."""
    bounds: dict = {}
    seeds: dict = {}
    results, metrics, levels = load_env_results(env_dir, algos, bounds, seeds)
    if not results:
        return ""
    rows = summary_rows(results, lambda_max, seeds)
    md = markdown_table(rows)
    text = f"# {env_name}: robustness test\n\n{md}"
    diverged = {a: t - u for a, (u, t) in seeds.items() if u < t}
    if diverged:
        text += (
            "\nDiverged seeds (non-finite parameters, multipliers, kernel, losses or test episodes) are "
            "left out of every statistic; their rows are never marked: "
            + ", ".join(f"{a} {n}" for a, n in diverged.items())
            + ".\n"
        )
    summary = summary_json(rows, seeds)
    if any(np.any(b) for b in bounds.values()):
        text += (
            "\n## Test episodes that reached the state bound (%), per distortion level\n\n"
            "The kernel mean is clipped at the state bound (docs/fidelity.md, choices): these episodes' "
            "returns and costs are those of the clipped dynamics.\n\n" + state_bound_table(bounds, levels)
        )
    kept = {a: r for a, r in results.items() if r is not None}
    if kept and aggregate.available():
        plots = env_dir if _has_matplotlib() else None
        agg_text, agg_json = aggregate.section(kept, lambda_max, env_name, plots)
        text += agg_text
        (env_dir / "aggregate.json").write_text(json.dumps(agg_json, indent=2))
    elif kept:
        text += "\n(rliable is not installed: no IQM / probability-of-improvement section; pip install -e '.[stats]')\n"
    found = load_worst_case(env_dir, env_name, results, lambda_max, levels)
    if found:
        wc_text, wc_json = worst_case_section(found, env_name)
        text += wc_text
        (env_dir / "worst_case.json").write_text(json.dumps(wc_json, indent=2))
    for algo, b in bounds.items():
        summary[algo]["state_bound_fraction"] = {
            "overall": float(np.mean(b)),
            "per_level": [float(f) for f in np.asarray(b, np.float64).mean(axis=(0, 2, 3))],
        }
    (env_dir / "summary.md").write_text(text)
    (env_dir / "summary.tex").write_text(latex_table(rows))
    (env_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed: plots skipped (pip install -e '.[plot]')")
        return md
    finite = {a: r for a, r in results.items() if r is not None}
    if finite:
        plot_robustness(env_dir, finite, levels, env_name)
    if metrics:
        plot_training(env_dir, metrics, np.asarray(xi_c), np.asarray(kappa), env_name)
    return md


def worst_case_section(found: dict, env_name: str) -> tuple[str, dict]:
    """The grid-vs-search table (Markdown) and its JSON: ``found`` is
    ``{algo: worst_case.compare_with_grid(...)}`` over the seeds that did not diverge.
    Per algorithm and quantity: the mean over seeds of each seed's worst value on the
    grid and by the search, and in how many seeds the search went beyond the grid; per
    quantity, the domain's count and mean gap; ``xi`` where the search found each
    seed's lowest return (the worst seed's in the table)."""
    if not found:
        return "", {}
    metrics = list(next(iter(found.values())))
    head = (
        "| Algorithm | "
        + " | ".join(f"{m}: grid | {m}: search" for m in metrics)
        + " | xi of the lowest return (search) |"
    )
    lines = [head, "|" + "---|" * (2 * len(metrics) + 2)]
    js: dict = {"per_algorithm": {}, "domain": {}}
    pairs = {m: [] for m in metrics}
    for algo, cmp in found.items():
        cells, entry = [], {}
        for m in metrics:
            d = cmp[m]
            g, f = np.asarray(d["grid"], np.float64), np.asarray(d["search"], np.float64)
            beyond = f < g if d["lower_is_worse"] else f > g
            pairs[m].append((g, f, beyond))
            cells.append(f"{g.mean():.2f} | {f.mean():.2f} ({int(beyond.sum())}/{beyond.size})")
            entry[m] = {
                "grid": g.tolist(),
                "search": f.tolist(),
                "search_beyond_grid": beyond.tolist(),
                "search_xi": np.asarray(d["search_xi"]).tolist(),
                "grid_xi": np.asarray(d["grid_xi"]).tolist(),
            }
        r = cmp["Return"]
        worst_seed = int(np.argmin(r["search"]))
        xi = np.round(np.asarray(r["search_xi"][worst_seed], np.float64).ravel(), 3).tolist()
        lines.append(f"| {algo} | " + " | ".join(cells) + f" | {xi} |")
        js["per_algorithm"][algo] = entry
    summary = []
    for m in metrics:
        g = np.concatenate([p[0] for p in pairs[m]])
        f = np.concatenate([p[1] for p in pairs[m]])
        beyond = np.concatenate([p[2] for p in pairs[m]])
        sign = 1.0 if pairs[m] and found[next(iter(found))][m]["lower_is_worse"] else -1.0
        gap = sign * (g - f)  # > 0: the search found worse than the grid
        js["domain"][m] = {
            "pairs": int(beyond.size),
            "search_beyond_grid": int(beyond.sum()),
            "mean_gap": float(gap.mean()),
            "mean_gap_where_beyond": float(gap[beyond].mean()) if beyond.any() else 0.0,
        }
        d = js["domain"][m]
        summary.append(
            f"* {m}: the search went beyond the grid's worst in {d['search_beyond_grid']} of "
            f"{d['pairs']} (algorithm, seed) pairs; by {d['mean_gap_where_beyond']:.3f} on average "
            f"where it did (mean over all pairs {d['mean_gap']:+.3f}; > 0: the search found worse)."
        )
    text = (
        f"\n## Worst case: the grid's vs a gradient search's ({env_name})\n\n"
        "Per seed, the worst value over the test grid (11 levels x all corners) and the worst a projected-"
        "gradient search found inside the box (``--worst-case``, ``rcmdp_jax.worst_case``; values on fresh "
        "episodes, scored as the test scores them), averaged over seeds; in brackets, the seeds where the "
        "search went beyond the grid. Return and R_pen: lower is worse; C: higher is worse.\n\n"
        + "\n".join(lines)
        + "\n\n"
        + "\n".join(summary)
        + "\n"
    )
    return text, js

"""The report of a run folder: its tables (Markdown, LaTeX, JSON), its plots and its
``summary.md`` (``write_env_report``; also usable on its own: ``python experiments/report.py
RUN_DIR`` regenerates every table and plot), and the summary's sections in words beside the
table: the legend, whether each constraint is kept (``constraint_section``), grid against
search (``worst_case_section``), and the rliable statistics (``aggregate_section``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from rcmdp_jax import stats, verdict
from rcmdp_jax.kernel_text import kernel_names
from rcmdp_jax.study.plots import drop_stale, plot_robustness, plot_training
from rcmdp_jax.study.run_folder import RunFolder, load_npz, write_text
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
            lines.append(f"| {md_cell(label)} | diverged: no seed left | | |")
            continue
        out = []
        for m in stats.METRICS:
            s, marked = cells[m]
            out.append(f"**{_cell(s)}**" if marked else _cell(s))
        lines.append(f"| {md_cell(label)} | " + " | ".join(out) + " |")
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
        lines.append(f"| {md_cell(algo)} | " + " | ".join(f"{f:.1f}" for f in frac) + " |")
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
        figures = env_dir if plots and _has_matplotlib() else None
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


# --- the summary's sections in words: the legend, the constraints (costs named: the environment's
# ``cost_names``), grid against search (``run.py --worst-case``), rliable's statistics ---
def cost_names(env_name: str, m: int) -> tuple[str, ...]:
    """The names of the ``m`` constraint costs of ``env_name`` (its ``DomainSpec``'s;
    ``C_j`` where unknown)."""
    try:
        from rcmdp_jax import envs

        names = envs.spec(env_name).cost_names
    except (ValueError, TypeError):
        names = ()
    return tuple(names) if len(names) == m else tuple(f"C_{j + 1}" for j in range(m))


def md_cell(text: str) -> str:
    """``text`` as one Markdown table cell: its ``|`` escaped (cost names such as
    ``|x_dot|-0.15`` would otherwise split the cell)."""
    return str(text).replace("|", r"\|")


def legend(lambda_max: float) -> str:
    return (
        "\nHow to read it. Return: the discounted return of the trained (deterministic) policy. "
        "C_j: the sum of constraint cost j discounted by its gamma_c (the table below); kept when C_j <= 0. "
        f"R_pen = Return - lambda_max * sum_j max(0, C_j) of each episode, then averaged: only broken constraints cost, "
        f"an episode over its limit even where the seed's mean keeps it (lambda_max = {lambda_max:g}). "
        "R_pen± = Return - lambda_max * sum_j C_j: slack under a limit earns as much as a breach costs, so its "
        "bold can go to an algorithm with a far lower Return that stays well under its limit; read it beside "
        "Return and R_pen. "
        "Each cell: mean over every test kernel (distortion level x direction), seed and episode ± the standard "
        "error across test kernels; min: the worst test kernel's mean. Bold: the best mean and every "
        "algorithm within one pooled standard error of it. The method: docs/method.md.\n"
    )


def seeds_text(entry: dict, where: str) -> str:
    """The seeds' verdicts at ``where`` (``nominal`` or ``worst``) of a ``verdict.judge`` entry, in words."""
    return verdict.counts_text(entry[f"{where}_counts"], entry[f"{where}_episodes_to_decide"])


def margin_of(cfg, metrics: dict | None = None) -> dict:
    """The safety margin an algorithm trained with, and its rule, as JSON (``cfg``: its ``Config``;
    ``metrics``: its training metrics, whose ``margin`` at the last iteration, the seeds' mean per
    constraint, is the margin its dual read: ``derived``)."""
    hp = cfg.hparams
    m, z, n = float(hp.cost_margin), float(hp.margin_z), float(hp.margin_n)
    out = {"cost_margin": m, "margin_z": z, "margin_n": n, "constraint_rule": cfg.constraint}
    if z:
        out["rule"] = (f"trained toward C_j <= -({m:g} + {z:g} sigma_j / sqrt({n:g})), sigma_j the per-episode spread "
                       "of C_j in its dual's episodes; kept is judged at the limit itself")  # fmt: skip
    else:
        out["rule"] = (f"trained toward C <= -{m:g} (the dual phase reads C^ + cost_margin); kept is judged at the "
                       "limit itself" if m else "trained toward C <= 0 (no margin)")  # fmt: skip
    if metrics is not None and "margin" in metrics:
        last = np.asarray(metrics["margin"], np.float64)[:, -1]
        out["derived"] = np.nanmean(last.reshape(last.shape[0], -1), axis=0).tolist()
    return out


def margin_text(margins: dict) -> str:
    """One sentence per margin the algorithms trained with (``margins``: ``{algo: margin_of(...)}``)."""
    by: dict = {}
    for algo, m in margins.items():
        derived = ", ".join(f"{v:.3g}" for v in m.get("derived", ())) if m.get("margin_z") else ""
        by.setdefault((m["cost_margin"], m.get("margin_z", 0.0), m.get("margin_n", 0.0), derived), []).append(algo)
    said = []
    for (m, z, n, derived), a in by.items():
        if z:
            said.append(f"{', '.join(a)}: the data margin {f'{m:g} + ' if m else ''}{z:g} sigma_j / sqrt({n:g}), "
                        f"at the last iteration {derived} (per constraint)")  # fmt: skip
        else:
            said.append(f"{', '.join(a)}: cost_margin = {m:g}, " + (f"trained toward C <= -{m:g} (the dual phase reads "
                        f"C^ + {m:g})" if m else "no margin, trained toward C <= 0"))  # fmt: skip
    return "\nThe safety margin each algorithm trained with (the verdict is at the limit, not at the margin): " + \
        "; ".join(said) + ".\n" if said else ""


def constraint_section(results: dict, names: tuple[str, ...], levels, test_xi=None, xi_names=None,
                       costs: dict | None = None, kinds=None, margins: dict | None = None) -> tuple[str, dict]:  # fmt: skip
    """Markdown (one row per algorithm and constraint) and JSON of ``verdict.judge``; with
    the test kernels ``test_xi`` ``[L, D, *xi]`` (level 0 the nominal one) and the names of
    their entries, each worst kernel as its fields' changes (``kernel_text``); ``costs``:
    ``{algo: {"EpCost", "gamma_c", "horizon"}}`` (``RunFolder.load_results``; a result file
    without them: "?", and C decides); ``kinds``: each constraint's ``verdict.Constraint``
    (``verdict.kinds(env)``; None: limits); ``margins``: ``{algo: margin_of(cfg)}``."""
    from rcmdp_jax.kernel_text import describe

    costs, margins = costs or {}, margins or {}
    horizons = sorted({c["horizon"] for c in costs.values()})
    over = f"over H = {horizons[0]} steps" if len(horizons) == 1 else "over the episode"
    lines = ["| Algorithm | constraint | kept when | gamma_c | C: nominal | C: worst | EpCost " f"{over}: nominal | "
             "EpCost: worst | seeds at the nominal kernel | seeds on the worst kernel | the worst kernel (level: its "
             "fields) |", "|" + "---|" * 11]  # fmt: skip
    js: dict = {}
    for algo, r in results.items():
        if r is None:
            continue
        for j, name in enumerate(names):
            kind = kinds[j] if kinds is not None else verdict.Constraint("limit")
            ep, gamma_c = None, None
            if algo in costs:
                ep, gamma_c = np.asarray(costs[algo]["EpCost"])[..., j], float(costs[algo]["gamma_c"][j])
            kind = dataclasses.replace(kind, gamma_c=gamma_c)
            entry = js.setdefault(algo, {})[name] = verdict.judge(np.asarray(r[1])[..., j], ep, kind)
            entry["worst_level"] = float(levels[entry["worst_level_index"]])
            if algo in costs:
                entry["horizon"] = costs[algo]["horizon"]
            if algo in margins:
                entry["margin"] = margins[algo]
                if "derived" in margins[algo] and j < len(margins[algo]["derived"]):
                    entry["margin_derived"] = margins[algo]["derived"][j]
            lvl, d = entry["worst_level_index"], entry["worst_direction"]
            where = f"{float(levels[lvl]):g}: direction {d}"
            if test_xi is not None:
                xi = np.asarray(test_xi)
                entry["worst_kernel"] = describe(xi[lvl, d], xi[0, 0], xi_names)
                entry["worst_xi"] = np.asarray(xi[lvl, d], np.float64).tolist()
                where = f"{float(levels[lvl]):g}: {entry['worst_kernel']}"
            epc = [f"{entry[k]:.3f}" if k in entry else "?" for k in ("ep_cost_nominal", "ep_cost_worst")]
            gc = "?" if gamma_c is None else f"{gamma_c:.6g}"
            lines.append(f"| {md_cell(algo)} | {md_cell(name)} | {kind.decides} | {gc} | {entry['nominal']:.3f} | "
                         f"{entry['worst']:.3f} | {epc[0]} | {epc[1]} | {seeds_text(entry, 'nominal')} | "
                         f"{seeds_text(entry, 'worst')} | {md_cell(where)} |")  # fmt: skip
    text = ("\n## Is the constraint kept?\n\nPer algorithm and constraint, at the nominal kernel and on the test "
            "kernel where it is worst: the mean C = E[sum_t gamma_c^t c_t] and the mean episode cost EpCost (the "
            "undiscounted sum; of an indicator 'at most B/episode', the count of unsafe steps), and each seed's "
            "verdict over its test episodes by the rule in 'kept when'. A budget of B unsafe steps per episode "
            "(gamma_c 1) is kept when the mean EpCost <= B, Safety-Gymnasium's cost_limit: an episode that ends early "
            "counts its unsafe steps against the whole B (C, which training reads, grants it B*T/H for its T steps); "
            "any other constraint when C <= 0. Too close: the seed's mean lies within "
            f"{verdict.Z:g} standard errors of the limit, so noise could flip it (never counted broken); beside it, "
            "the test episodes that would decide it at the same spread. The worst kernel: its distortion level and "
            "each uncertain field's change from the nominal value.\n\n" + "\n".join(lines) + "\n"
            + margin_text(margins))  # fmt: skip
    return text, js


# --- the grid-vs-search section (--worst-case) ---
def worst_case_section(found: dict, env_name: str, labels: dict | None = None, xi_c=None,
                       xi_names=None) -> tuple[str, dict]:  # fmt: skip
    """The grid-vs-search table (Markdown) and its JSON: ``found`` is
    ``{algo: worst_case.compare_with_grid(...)}`` over the seeds that did not diverge.
    Per algorithm and quantity: the mean over seeds of each seed's worst value on the
    grid and by the search, and in how many seeds the search went beyond the grid; per
    quantity, the domain's count and mean gap; ``xi`` where the search found each
    seed's lowest return, or with ``--worst-case costs`` the first constraint's highest
    (the worst seed's in the table); with the nominal kernel ``xi_c`` and the names of its
    entries, each found kernel also as its fields' changes (``search_kernel``)."""
    if not found:
        return "", {}
    from rcmdp_jax.kernel_text import describe

    def names_of(x):  # the entries' names, else xi[i]
        n = np.size(x)
        return xi_names if xi_names is not None and len(xi_names) == n else tuple(f"xi[{i}]" for i in range(n))

    metrics = list(next(iter(found.values())))
    names = labels or {}

    def label(m, default):  # a cost's name for its metric C<j>, as one Markdown cell
        return md_cell(names.get(m, default))

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
            if xi_c is not None:
                entry[m]["search_kernel"] = [describe(x, xi_c, names_of(x)) for x in np.asarray(d["search_xi"])]
        r = cmp[metrics[0]]  # the lowest return's, or with --worst-case costs the first constraint's highest
        worst_seed = int(np.argmin(r["search"]) if r["lower_is_worse"] else np.argmax(r["search"]))
        found_xi = np.asarray(r["search_xi"][worst_seed], np.float64)
        xi = np.round(found_xi.ravel(), 3).tolist()
        where = f"{describe(found_xi, xi_c, names_of(found_xi))} ({xi})" if xi_c is not None else f"{xi}"
        lines.append(f"| {md_cell(algo)} | " + " | ".join(cells) + f" | {md_cell(where)} |")
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
    try:
        import rliable.library  # noqa: F401
    except Exception:  # not installed, or its dependencies clash (e.g. arch with pandas 3)
        return False
    return True


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

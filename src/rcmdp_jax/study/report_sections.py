"""The summary's sections in words beside its table (``report.write_env_report``): the
legend, whether each constraint is kept (``constraint_section``, with the margins each
algorithm trained with), and the grid's worst against a gradient search's
(``worst_case_section``, ``run.py --worst-case``); each as Markdown and its JSON."""

from __future__ import annotations

import dataclasses

import numpy as np

from rcmdp_jax import verdict
from rcmdp_jax.kernel_text import describe
from rcmdp_jax.worst_case import beyond_grid


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

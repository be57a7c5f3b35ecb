"""The summary's sections in words, each as Markdown and JSON: the legend, whether each constraint is kept
(with the margins trained with), the grid's worst against a gradient search's (``--worst-case``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from rcmdp_jax import verdict
from rcmdp_jax.kernel_text import describe, spell
from rcmdp_jax.worst_case import beyond_grid


def md_cell(text: str) -> str:
    """``text`` as one Markdown table cell: its ``|`` escaped (``|x_dot|-0.15`` would split it)."""
    return str(text).replace("|", r"\|")


def md_table(head, rows) -> list[str]:
    """A Markdown table's lines: the header's cells and each row's (escaped by the caller)."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def legend(lambda_max: float) -> str:
    return (
        "\nHow to read it. Return: the discounted return of the trained (deterministic) policy. "
        "C_j: the sum of constraint cost j discounted by its gamma_c (the table below); kept when C_j <= 0. "
        "R_pen = Return - lambda_max * sum_j max(0, C_j) of each episode, then averaged: only broken constraints "
        f"cost, an episode over its limit even where the seed's mean keeps it (lambda_max = {lambda_max:g}). "
        "R_pen± = Return - lambda_max * sum_j C_j: slack under a limit earns as much as a breach costs, so its "
        "bold can go to an algorithm with a far lower Return that stays well under its limit; read it beside "
        "Return and R_pen. "
        "Each cell: mean over every test kernel (distortion level x direction), seed and episode ± the standard "
        "error across test kernels; min: the worst test kernel's mean. Bold: the best mean and every "
        "algorithm within one pooled standard error of it. The method: docs/method.md.\n"
    )


def margin_of(cfg, metrics: dict | None = None) -> dict:
    """The safety margin an algorithm trained with (``cfg``: its ``Config``) and its ``rule`` in words, as JSON;
    ``derived``: the margin its dual read at the last iteration (``metrics["margin"]``), the seeds' mean."""
    m, z, n = (float(getattr(cfg.hparams, k)) for k in ("cost_margin", "margin_z", "margin_n"))
    if z:
        rule = f"the data margin {f'{m:g} + ' if m else ''}{z:g} sigma_j / sqrt({n:g})"
    elif m:
        rule = f"cost_margin = {m:g}, trained toward C <= -{m:g} (the dual phase reads C^ + {m:g})"
    else:
        rule = "cost_margin = 0, no margin, trained toward C <= 0"
    out = {"cost_margin": m, "margin_z": z, "margin_n": n, "constraint_rule": cfg.constraint, "rule": rule}
    if metrics is not None and "margin" in metrics:
        last = np.asarray(metrics["margin"], np.float64)[:, -1]
        out["derived"] = np.nanmean(last.reshape(last.shape[0], -1), axis=0).tolist()
    return out


def margin_text(margins: dict) -> str:
    """One sentence: each margin the algorithms trained with (``margins``: ``{algo: margin_of(...)}``)."""
    by: dict = {}
    for algo, g in margins.items():
        derived = ", ".join(f"{v:.3g}" for v in g.get("derived", ()))
        rule = g["rule"] + (f", at the last iteration {derived} (per constraint)" if g.get("margin_z") else "")
        by.setdefault(rule, []).append(algo)
    said = "; ".join(f"{', '.join(a)}: {rule}" for rule, a in by.items())
    head = "\nThe safety margin each algorithm trained with (the verdict is at the limit, not at the margin): "
    return f"{head}{said}.\n" if by else ""


def constraint_section(results: dict, names: tuple[str, ...], levels, test_xi=None, xi_names=None,
                       costs: dict | None = None, kinds=None, margins: dict | None = None, env_name=None):  # fmt: skip
    """Markdown (a row per algorithm and constraint, then each seed too close to call) and JSON of ``verdict.judge``;
    ``test_xi`` ``[L, D, *xi]`` names each worst kernel; ``costs`` absent: "?"; ``kinds`` None: limits."""
    costs, margins, close, rows, js = costs or {}, margins or {}, [], [], {}
    horizons = sorted({c["horizon"] for c in costs.values()})
    over = f"over H = {horizons[0]} steps" if len(horizons) == 1 else "over the episode"
    for algo, r in results.items():
        for j, name in enumerate(names if r is not None else ()):
            c = costs.get(algo)
            kind = dataclasses.replace(kinds[j] if kinds is not None else verdict.Constraint("limit"),
                                       gamma_c=None if c is None else float(c["gamma_c"][j]))  # fmt: skip
            ep = None if c is None else np.asarray(c["EpCost"])[..., j]
            e = js.setdefault(algo, {})[name] = verdict.judge(np.asarray(r[1])[..., j], ep, kind)
            lvl, d = e["worst_level_index"], e["worst_direction"]
            e["worst_level"] = float(levels[lvl])
            if c is not None:
                e["horizon"] = c["horizon"]
            if algo in margins:
                e["margin"] = margins[algo]
                if j < len(margins[algo].get("derived", ())):
                    e["margin_derived"] = margins[algo]["derived"][j]
            where = f"direction {d}"
            if test_xi is not None:
                e["worst_kernel"] = where = describe(test_xi[lvl, d], test_xi[0, 0], xi_names)
                e["worst_xi"] = np.asarray(test_xi[lvl, d], np.float64).tolist()
                kernels = {"nominal": "nominal", "worst": spell(test_xi[lvl, d], test_xi[0, 0], xi_names)}
                close += verdict.close_calls(e, algo, name, kernels, env_name)
            epc = [f"{e[k]:.3f}" if k in e else "?" for k in ("ep_cost_nominal", "ep_cost_worst")]
            said = [verdict.counts_text(e[f"{w}_counts"], e[f"{w}_episodes_to_decide"]) for w in ("nominal", "worst")]
            rows.append([md_cell(algo), md_cell(name), kind.decides, "?" if c is None else f"{kind.gamma_c:.6g}",
                         f"{e['nominal']:.3f}", f"{e['worst']:.3f}", *epc, *said,
                         md_cell(f"{e['worst_level']:g}: {where}")])  # fmt: skip
    text = ("\n## Is the constraint kept?\n\nPer algorithm and constraint, at the nominal kernel and on the test "
            "kernel where it is worst: the mean C = E[sum_t gamma_c^t c_t] and the mean episode cost EpCost (the "
            "undiscounted sum; of an indicator 'at most B/episode', the count of unsafe steps), and each seed's "
            "verdict over its test episodes by the rule in 'kept when'. A budget of B unsafe steps per episode "
            "(gamma_c 1) is kept when the mean EpCost <= B, Safety-Gymnasium's cost_limit: an episode that ends early "
            "counts its unsafe steps against the whole B (C, which training reads, grants it B*T/H for its T steps); "
            "any other constraint when C <= 0. Too close: the seed's mean lies within "
            f"{verdict.Z:g} standard errors of the limit, so noise could flip it (never counted broken); beside it, "
            "the test episodes that would decide it at the same spread. The worst kernel: its distortion level x and "
            "each uncertain field's change from the nominal value (x^2 times the field's half-width).\n\n")  # fmt: skip
    head = ["Algorithm", "constraint", "kept when", "gamma_c", "C: nominal", "C: worst", f"EpCost {over}: nominal",
            "EpCost: worst", "seeds at the nominal kernel", "seeds on the worst kernel",
            "the worst kernel (level: its fields)"]  # fmt: skip
    close = ("\nThe seeds too close to call (RUN_DIR: this run's folder):\n\n" + "".join(f"- {c}\n" for c in close)
             if close else "")  # fmt: skip
    return text + "\n".join(md_table(head, rows)) + "\n" + close + margin_text(margins), js


def worst_case_section(found: dict, env_name: str, labels=None, xi_c=None, xi_names=None) -> tuple[str, dict]:
    """The grid-vs-search table and its JSON from ``{algo: worst_case.compare_with_grid(...)}`` (``labels``
    names the quantities); with the nominal ``xi_c``, each found kernel as its fields' changes."""
    first = next(iter(found.values()))
    metrics = list(first)
    label = {m: md_cell((labels or {}).get(m, m)) for m in metrics}
    js, rows = {"per_algorithm": {}, "domain": {}}, []
    for algo, cmp in found.items():
        row, entry = [md_cell(algo)], js["per_algorithm"].setdefault(algo, {})
        for m in metrics:
            g, f = np.asarray(cmp[m]["grid"], np.float64), np.asarray(cmp[m]["search"], np.float64)
            beyond = beyond_grid(g, f, cmp[m]["lower_is_worse"])  # not float rounding
            row += [f"{g.mean():.2f}", f"{f.mean():.2f} ({int(beyond.sum())}/{beyond.size})"]
            entry[m] = {"grid": g.tolist(), "search": f.tolist(), "search_beyond_grid": beyond.tolist(),
                        **{k: np.asarray(cmp[m][k]).tolist() for k in ("search_xi", "grid_xi")}}  # fmt: skip
            if xi_c is not None:
                entry[m]["search_kernel"] = [describe(x, xi_c, xi_names) for x in np.asarray(cmp[m]["search_xi"])]
        r = cmp[metrics[0]]  # the lowest return's, or with --worst-case costs the first constraint's highest
        at = int(np.argmin(r["search"]) if r["lower_is_worse"] else np.argmax(r["search"]))
        worst = np.asarray(r["search_xi"][at], np.float64)
        xi = np.round(worst.ravel(), 3).tolist()
        rows.append(row + [md_cell(f"{describe(worst, xi_c, xi_names)} ({xi})" if xi_c is not None else f"{xi}")])
    bullets = []
    for m in metrics:
        per = [e[m] for e in js["per_algorithm"].values()]  # every (algorithm, seed) pair
        g, f, beyond = (np.concatenate([e[k] for e in per]) for k in ("grid", "search", "search_beyond_grid"))
        gap = g - f if first[m]["lower_is_worse"] else f - g  # > 0: the search found worse than the grid
        d = js["domain"][m] = {"pairs": int(beyond.size), "search_beyond_grid": int(beyond.sum()),
                               "mean_gap": float(gap.mean()),
                               "mean_gap_where_beyond": float(gap[beyond].mean()) if beyond.any() else 0.0}  # fmt: skip
        bullets.append(f"* {label[m]}: the search went beyond the grid's worst in {d['search_beyond_grid']} of "
                       f"{d['pairs']} (algorithm, seed) pairs; by {d['mean_gap_where_beyond']:.3f} on average where "
                       f"it did (mean over all pairs {d['mean_gap']:+.3f}; > 0: the search found worse).")  # fmt: skip
    head = ["Algorithm", *(f"{label[m]}: {w}" for m in metrics for w in ("grid", "search"))]
    head.append(f"xi of the {'lowest return' if metrics[0] == 'Return' else 'highest ' + label[metrics[0]]} (search)")
    text = (f"\n## Worst case: the grid's vs a gradient search's ({env_name})\n\nPer seed, the worst value over the "
            "test grid (11 levels x all corners) and the worst a projected-gradient search found inside the box "
            "(``--worst-case``, ``rcmdp_jax.worst_case``; values on fresh episodes, scored as the test scores them), "
            "averaged over seeds; in brackets, the seeds where the search went beyond the grid. "
            + ("Return and R_pen: lower is worse; C: higher is worse.\n\n" if "Return" in metrics else
               "Only the constraints were searched (``--worst-case costs``); C: higher is worse.\n\n"))  # fmt: skip
    return text + "\n".join(md_table(head, rows)) + "\n\n" + "\n".join(bullets) + "\n", js

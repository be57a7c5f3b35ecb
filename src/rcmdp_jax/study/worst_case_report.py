"""The grid-vs-search section of ``summary.md`` (``run.py --worst-case``): per algorithm
and quantity, each seed's worst value on the test grid and by the gradient search, how
often the search went beyond the grid (past float rounding: ``worst_case.beyond_grid``),
and the kernel the search found, as its fields' changes (``kernel_text``)."""

from __future__ import annotations

import numpy as np

from rcmdp_jax.study import report_text
from rcmdp_jax.worst_case import beyond_grid


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
            if xi_c is not None:
                entry[m]["search_kernel"] = [describe(x, xi_c, names_of(x)) for x in np.asarray(d["search_xi"])]
        r = cmp[metrics[0]]  # the lowest return's, or with --worst-case costs the first constraint's highest
        worst_seed = int(np.argmin(r["search"]) if r["lower_is_worse"] else np.argmax(r["search"]))
        found_xi = np.asarray(r["search_xi"][worst_seed], np.float64)
        xi = np.round(found_xi.ravel(), 3).tolist()
        where = f"{describe(found_xi, xi_c, names_of(found_xi))} ({xi})" if xi_c is not None else f"{xi}"
        lines.append(f"| {report_text.md_cell(algo)} | " + " | ".join(cells) + f" | {report_text.md_cell(where)} |")
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

"""What the feasibility check (``rcmdp_jax.feasibility``) reports, from its numbers alone
(NumPy, no JAX): for each constraint, the least value ``C`` found on every test kernel,
whether one policy keeps it on the whole box, the kernels where none found does, and how
far into the box it can be kept; kernels named by their fields (``m +20 %, l -20 %``)."""

from __future__ import annotations

import numpy as np

from rcmdp_jax.kernel_text import describe


def kernel_record(labels, xi, xi_c, **extra) -> dict:
    """A kernel as JSON: its values by field, its description and ``extra`` (numbers)."""
    flat = np.ravel(np.asarray(xi, np.float64))
    return {"kernel": dict(zip(labels, flat.tolist())), "described": describe(xi, xi_c, labels),
            **{k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in extra.items()}}  # fmt: skip


def summarise(C, levels, grid_xi, xi_c, labels, name: str, margin: float = 0.0, witness=None, search=None) -> dict:
    """One constraint's verdict. ``C`` ``[S, L, D]``: each learned policy's mean ``C`` on every
    test kernel; ``grid_xi`` ``[L, D, *xi]``; ``witness`` ``[L, D]`` (a user's controller) or
    None; ``search`` ``{"C": float, "xi": array}`` (the gradient search's worst kernel for the
    best learned policy) or None. A kernel is *keepable* when its least ``C`` is ``<= -margin``.

    ``least_worst_C`` is the least, over the policies found, of a policy's worst ``C`` over the
    box (grid and search): ``keepable`` (the whole box) is ``least_worst_C <= -margin``, an
    upper bound on the truth (a learned policy), so ``False`` means no policy found keeps it."""
    C = np.asarray(C, np.float64)
    levels = np.asarray(levels, np.float64)
    per_policy_worst = C.reshape(C.shape[0], -1).max(1)  # [S]
    best = int(np.argmin(per_policy_worst))
    best_worst, best_source = float(per_policy_worst[best]), "grid"
    if search is not None and float(search["C"]) > best_worst:
        best_worst, best_source = float(search["C"]), "search"
    least = C.min(0)  # [L, D] the best policy per kernel
    candidates = {"learned": best_worst}
    if witness is not None:
        witness = np.asarray(witness, np.float64)
        least = np.minimum(least, witness)
        candidates["witness"] = float(witness.max())
    by = min(candidates, key=candidates.get)
    least_worst = candidates[by]
    flat_xi = np.asarray(grid_xi).reshape(least.size, -1)
    li, di = np.unravel_index(int(np.argmax(least)), least.shape)
    ok_level = [bool(np.all(least[: i + 1] <= -margin)) for i in range(len(levels))]
    up_to = max((float(levels[i]) for i, ok in enumerate(ok_level) if ok), default=None)

    def grid_kernel(i, d):
        x = flat_xi[i * least.shape[1] + d]
        return kernel_record(labels, x, xi_c, level=float(levels[i]), direction=int(d), least_C=float(least[i, d]))

    breaking = [grid_kernel(i, d) for i, d in zip(*np.nonzero(least > -margin))]
    if search is not None and by == "learned" and best_source == "search" and best_worst > -margin:
        breaking.append(kernel_record(labels, search["xi"], xi_c, level=None, direction=None, least_C=best_worst,
                                      found_by="gradient search (best learned policy)"))  # fmt: skip
    return {
        "constraint": name,
        "keepable": bool(least_worst <= -margin),
        "least_worst_C": least_worst,
        "least_worst_C_by": by if by == "witness" else f"learned policy (seed {best}, worst found by {best_source})",
        "margin": float(margin),
        "keepable_up_to_level": up_to,
        "box_fraction": None if up_to is None else up_to**2,
        "worst_kernel": grid_kernel(li, di),
        "not_keepable_kernels": breaking,
        "least_C_per_level": least.max(1).tolist(),
        "least_C": least.tolist(),
        "learned_worst_C_per_seed": per_policy_worst.tolist(),
        "witness_worst_C": candidates.get("witness"),
        "search": None if search is None else {"C": float(search["C"]), **kernel_record(labels, search["xi"], xi_c)},
    }


def lines(report: dict) -> list[str]:
    """The terminal summary: one verdict line per constraint, then where it breaks."""
    out = []
    for r in report["constraints"]:
        verdict = "keepable on the whole box" if r["keepable"] else "NOT keepable on the whole box"
        what = f" (C = E[sum_t {r['gamma_c']:.6g}^t c_t], H = {r['horizon']})" if "gamma_c" in r else ""
        out.append(f"{r['constraint']}{what}: {verdict}: least worst-kernel C = {r['least_worst_C']:+.4g} "
                   f"({r['least_worst_C_by']})")  # fmt: skip
        if not r["keepable"]:
            up = r["keepable_up_to_level"]
            out.append("  kept on every test kernel up to level "
                       + ("none (it breaks at the nominal kernel)" if up is None else
                          f"{up:g} ({100 * r['box_fraction']:.0f} % of the box's half-widths)"))  # fmt: skip
            w = r["worst_kernel"]
            out.append(f"  worst kernel: {w['described']} (level {w['level']:g}): least C {w['least_C']:+.4g}")
            out.append(f"  {len(r['not_keepable_kernels'])} kernel(s) where no policy found keeps it")
    out.append("An upper bound on the least value: 'not keepable' means no policy found keeps it.")
    return out


def plot(report: dict, path) -> None:
    """Least ``C`` (worst direction per level) against the distortion level, per constraint."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["constraints"]
    fig, axes = plt.subplots(1, len(rows), figsize=(max(6.5, 5 * len(rows)), 4), squeeze=False)
    for ax, r in zip(axes[0], rows):
        ax.plot(report["levels"], r["least_C_per_level"], marker="o", label="least C (worst direction)")
        ax.axhline(-r["margin"], color="k", lw=0.8, ls="--", label="limit" if not r["margin"] else "limit - margin")
        ax.set_xlabel("distortion level (kernel at level² of the box)")
        ax.set_ylabel("C (kept when <= 0)")
        ax.set_title(f"{r['constraint']}: {'keepable' if r['keepable'] else 'not keepable'}", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"{report['env']}: the least C found (an upper bound)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

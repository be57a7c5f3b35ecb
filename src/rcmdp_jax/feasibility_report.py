"""What the feasibility check (``rcmdp_jax.feasibility``) reports, from its numbers alone
(NumPy, no JAX): for each constraint, the least value ``C`` found on every test kernel,
whether one policy keeps it on the whole box, the kernels where none found does, and how
far into the box it can be kept; kernels named by their fields (``m +20 %, l -20 %``)."""

from __future__ import annotations

import numpy as np

from rcmdp_jax.kernel_text import describe
from rcmdp_jax.stats import mean_se


def kernel_record(labels, xi, xi_c, **extra) -> dict:
    """A kernel as JSON: its values by field, its description and ``extra`` (numbers)."""
    flat = np.ravel(np.asarray(xi, np.float64))
    return {"kernel": dict(zip(labels, flat.tolist())), "described": describe(xi, xi_c, labels),
            **{k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in extra.items()}}  # fmt: skip


def mean_and_se(episodes, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """The Monte-Carlo mean of ``episodes`` over ``axis`` and its standard error (``stats.mean_se``)."""
    return mean_se(episodes, axis)


def summarise(C, levels, grid_xi, xi_c, labels, name: str, margin: float = 0.0, witness=None, search=None,
              se=None, witness_se=None) -> dict:  # fmt: skip
    """One constraint's verdict. ``C`` ``[S, L, D]``: each learned policy's mean ``C`` on every
    test kernel; ``grid_xi`` ``[L, D, *xi]``; ``witness`` ``[L, D]`` (a user's controller) or
    None; ``search`` ``{"C": float, "xi": array[, "se": float]}`` (the gradient search's worst
    kernel for the best learned policy) or None; ``se`` ``[S, L, D]`` and ``witness_se``
    ``[L, D]``: the standard errors of those means over episodes (None: unknown, taken as 0).
    A kernel is *keepable* when its least ``C`` is ``<= -margin``.

    Two notions. *One policy for the whole box*: ``least_worst_C`` is the least, over the
    policies found, of a policy's worst ``C`` over the box (grid and search); ``keepable`` is
    ``least_worst_C <= -margin``, an upper bound on the truth (a learned policy), so ``False``
    means no policy found keeps it. *Kernel by kernel*: ``least_C`` takes the best policy of
    each kernel, and ``keepable_up_to_level``, ``not_keepable_kernels`` and ``worst_kernel``
    read it. ``too_close_to_call``: ``least_worst_C`` lies within two standard errors of ``-margin``."""
    C = np.asarray(C, np.float64)
    se = np.zeros_like(C) if se is None else np.asarray(se, np.float64)
    levels = np.asarray(levels, np.float64)
    flat, flat_se = C.reshape(C.shape[0], -1), se.reshape(C.shape[0], -1)
    per_policy_worst = flat.max(1)  # [S]
    best = int(np.argmin(per_policy_worst))
    at = int(np.argmax(flat[best]))
    best_worst, best_worst_se, best_source = float(per_policy_worst[best]), float(flat_se[best, at]), "grid"
    if search is not None and float(search["C"]) > best_worst:
        best_worst, best_worst_se, best_source = float(search["C"]), float(search.get("se", 0.0)), "search"
    pick = C.argmin(0)  # [L, D] the best policy per kernel
    least = np.take_along_axis(C, pick[None], 0)[0]
    least_se = np.take_along_axis(se, pick[None], 0)[0]
    candidates = {"learned": (best_worst, best_worst_se)}
    if witness is not None:
        witness = np.asarray(witness, np.float64)
        witness_se = np.zeros_like(witness) if witness_se is None else np.asarray(witness_se, np.float64)
        least_se = np.where(witness < least, witness_se, least_se)
        least = np.minimum(least, witness)
        w_at = np.unravel_index(int(np.argmax(witness)), witness.shape)
        candidates["witness"] = (float(witness[w_at]), float(witness_se[w_at]))
    by = min(candidates, key=lambda k: candidates[k][0])
    least_worst, least_worst_se = candidates[by]
    flat_xi = np.asarray(grid_xi).reshape(least.size, -1)
    li, di = np.unravel_index(int(np.argmax(least)), least.shape)
    ok_level = [bool(np.all(least[: i + 1] <= -margin)) for i in range(len(levels))]
    up_to = max((float(levels[i]) for i, ok in enumerate(ok_level) if ok), default=None)

    def grid_kernel(i, d):
        x = flat_xi[i * least.shape[1] + d]
        return kernel_record(labels, x, xi_c, level=float(levels[i]), direction=int(d), least_C=float(least[i, d]),
                             least_C_se=float(least_se[i, d]))  # fmt: skip

    breaking = [grid_kernel(i, d) for i, d in zip(*np.nonzero(least > -margin))]
    if search is not None and by == "learned" and best_source == "search" and best_worst > -margin:
        breaking.append(kernel_record(labels, search["xi"], xi_c, level=None, direction=None, least_C=best_worst,
                                      least_C_se=best_worst_se, found_by="gradient search (best learned policy)"))  # fmt: skip
    return {
        "constraint": name,
        "keepable": bool(least_worst <= -margin),
        "least_worst_C": least_worst,
        "least_worst_C_se": least_worst_se,
        "too_close_to_call": bool(abs(least_worst + margin) <= 2 * least_worst_se),
        # the episodes behind that value where the search's re-measure gives it (else n_test's)
        "least_worst_C_episodes": search.get("episodes") if by == "learned" and best_source == "search" else None,
        "least_worst_C_by": by if by == "witness" else f"learned policy (seed {best}, worst found by {best_source})",
        "margin": float(margin),
        "keepable_up_to_level": up_to,
        "box_fraction": None if up_to is None else up_to**2,
        "worst_kernel": grid_kernel(li, di),
        "not_keepable_kernels": breaking,
        "test_kernels": int(least.size),
        "close_kernels": int(np.sum(np.abs(least + margin) <= 2 * least_se)),
        "least_C_per_level": least.max(1).tolist(),
        "least_C_per_level_se": least_se[np.arange(least.shape[0]), least.argmax(1)].tolist(),
        "least_C": least.tolist(),
        "least_C_se": least_se.tolist(),
        "learned_worst_C_per_seed": per_policy_worst.tolist(),
        "learned_worst_C_se_per_seed": flat_se[np.arange(len(flat)), flat.argmax(1)].tolist(),
        "witness_worst_C": candidates["witness"][0] if "witness" in candidates else None,
        "witness_worst_C_se": candidates["witness"][1] if "witness" in candidates else None,
        "search": None if search is None else {"C": float(search["C"]), "se": float(search.get("se", 0.0)),
                                               "episodes": search.get("episodes"),
                                               **kernel_record(labels, search["xi"], xi_c)},  # fmt: skip
    }


def _limit(margin: float) -> str:
    """The bound a verdict asks for: ``C <= 0`` or ``C <= -1 (margin 1)``."""
    return "C <= 0" if not margin else f"C <= {-margin:g} (margin {margin:g})"


def _pm(value: float, se: float) -> str:
    return f"{value:+.4g} ± {se:.2g}"


def lines(report: dict) -> list[str]:
    """The terminal summary: the settings, then per constraint the verdict of each notion
    (one policy for the whole box; kernel by kernel, each kernel's best policy) with its
    standard error, and where it breaks."""
    s = report.get("settings", {})
    out = []
    if {"gamma", "horizon", "n_test"} <= set(s):
        out.append(f"settings: gamma {s['gamma']:g}, H {s['horizon']} steps, n_test {s['n_test']} episodes per "
                   f"test kernel; C is a discounted sum over an episode, ± one standard error over episodes")  # fmt: skip
    for r in report["constraints"]:
        limit = _limit(r["margin"])
        se = r.get("least_worst_C_se", 0.0)
        verdict = "keepable" if r["keepable"] else "NOT keepable"
        discount = "" if r.get("gamma_c") == 1.0 else f"{r.get('gamma_c', 0):.6g}^t "  # 1: the episode sum
        what = f", C = E[sum_t {discount}c_t], H = {r['horizon']}" if "gamma_c" in r else ""
        out.append(f"{r['constraint']} ({limit} wanted{what}):")
        out.append(f"  one policy for the whole box: {verdict}: least worst-kernel C = "
                   f"{_pm(r['least_worst_C'], se)} ({r['least_worst_C_by']})")  # fmt: skip
        if ep := r.get("learned_ep_cost"):  # a feasibility.json written before EpCost: none
            out.append(f"  one policy for the whole box: the best learned policy's EpCost (unsafe steps per episode, "
                       f"budget {r.get('budget', '?'):g}) {ep['nominal']:.4g} at the nominal kernel, "
                       f"{ep['worst_kernel']:.4g} on its worst test kernel")  # fmt: skip
        if r.get("too_close_to_call"):
            n, searched = s.get("n_test"), r.get("least_worst_C_episodes")
            over = f" (a mean over {searched} episodes on the searched kernel)" if searched else ""
            more = 10 * max(n or 0, searched or 0)  # the value's episodes: max(n_test, the search's eval_episodes)
            out.append(f"  too close to call at n_test = {n}{over}: within two standard errors of "
                       f"{limit.split(' (')[0]}" + (f"; try --n-test {more}" if more else ""))  # fmt: skip
        up = r["keepable_up_to_level"]
        if up is None:
            where = f"{limit} not met even at the nominal kernel"
        else:
            where = f"{limit} met on every test kernel up to level {up:g} ({100 * r['box_fraction']:.0f} % of the box's half-widths)"
        out.append(f"  kernel by kernel (each kernel's best policy found): {where}")
        w = r["worst_kernel"]
        out.append(f"  kernel by kernel: worst kernel {w['described']} (level {w['level']:g}): least C "
                   f"{_pm(w['least_C'], w.get('least_C_se', 0.0))}")  # fmt: skip
        n_kernels = r.get("test_kernels")
        of = f" of {n_kernels} test kernels" if n_kernels else ""
        out.append(f"  kernel by kernel: {len(r['not_keepable_kernels'])}{of} where no policy found meets {limit}"
                   + (f" ({r['close_kernels']} within two standard errors of it)" if r.get("close_kernels") else ""))  # fmt: skip
    out.append("An upper bound on the least value: 'NOT keepable' means no policy found keeps it; 'kernel by kernel' "
               "lets each kernel have its own policy, 'one policy for the whole box' does not.")  # fmt: skip
    return out


def plot(report: dict, path) -> None:
    """Least ``C`` (worst direction per level) against the distortion level, per constraint."""
    from rcmdp_jax.figures import pyplot, save

    plt = pyplot()
    rows = report["constraints"]
    fig, axes = plt.subplots(1, len(rows), figsize=(max(6.5, 5 * len(rows)), 4), squeeze=False)
    for ax, r in zip(axes[0], rows):
        se = r.get("least_C_per_level_se")  # absent in a report written before the standard errors
        ax.errorbar(report["levels"], r["least_C_per_level"], yerr=None if se is None else 2 * np.asarray(se),
                    marker="o", capsize=2, label="least C, each kernel's best policy (worst direction)" + ("" if se is None else " ± 2 SE"))  # fmt: skip
        ax.axhline(-r["margin"], color="k", lw=0.8, ls="--", label="limit" if not r["margin"] else "limit - margin")
        ax.set_xlabel("distortion level (kernel at level² of the box)")
        ax.set_ylabel("C (kept when <= 0)")
        verdict = "keepable" if r["keepable"] else "NOT keepable"
        ax.set_title(f"{r['constraint']}: {verdict} by one policy on the whole box", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(f"{report['env']}: the least C found (an upper bound)", fontsize=10)
    save(fig, path)

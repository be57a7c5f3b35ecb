"""What a person reads first in ``summary.md``: a legend of the table, and whether each
constraint is kept, at the nominal kernel and on the worst test kernel, with the
number of seeds that break it there. Costs are named (the environment's
``cost_names``; the study's domains below)."""

from __future__ import annotations

import numpy as np


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
        f"R_pen = Return - lambda_max * sum_j max(0, C_j): only broken constraints cost (lambda_max = {lambda_max:g}). "
        "R_pen± = Return - lambda_max * sum_j C_j: slack under a limit earns as much as a breach costs, so its "
        "bold can go to an algorithm with a far lower Return that stays well under its limit; read it beside "
        "Return and R_pen. "
        "Each cell: mean over every test kernel (distortion level x direction), seed and episode ± the standard "
        "error across test kernels; min: the worst test kernel's mean. Bold: the best mean and every "
        "algorithm within one pooled standard error of it. The method: docs/method.md.\n"
    )


def constraint_stats(C: np.ndarray) -> list[dict]:
    """Per constraint of ``C`` (seed, level, direction, episode, m; level 0 first, the
    nominal kernel): its mean at the nominal kernel and on the worst test kernel (the
    one with the highest mean over seeds and episodes), and how many seeds break it
    (their mean over episodes > 0) at each."""
    C = np.asarray(C, np.float64)
    out = []
    for j in range(C.shape[-1]):
        c = C[..., j]
        per_kernel = c.mean(axis=(0, 3))  # (level, direction)
        lvl, d = np.unravel_index(int(np.argmax(per_kernel)), per_kernel.shape)
        nominal_seeds = c[:, 0].mean(axis=(1, 2))
        worst_seeds = c[:, lvl, d].mean(axis=-1)
        out.append({
            "nominal": float(c[:, 0].mean()), "nominal_seeds_broken": int((nominal_seeds > 0).sum()),
            "worst": float(per_kernel[lvl, d]), "worst_seeds_broken": int((worst_seeds > 0).sum()),
            "worst_level_index": int(lvl), "worst_direction": int(d), "seeds": int(c.shape[0]),
        })  # fmt: skip
    return out


def discount_text(gamma_c) -> str:
    """A constraint's discount as the table's column says it: ``1`` (the episode sum) or ``0.99``."""
    return "?" if gamma_c is None else f"{float(gamma_c):.6g}"


def episode_cost_stats(ep: np.ndarray, j: int, lvl: int, d: int) -> dict:
    """Constraint ``j``'s mean episode cost EpCost (seed, level, direction, episode, m) at the
    nominal kernel and on the kernel ``(lvl, d)`` (C's worst)."""
    e = np.asarray(ep, np.float64)[..., j]
    return {"ep_cost_nominal": float(e[:, 0].mean()), "ep_cost_worst": float(e[:, lvl, d].mean())}


def constraint_section(results: dict, names: tuple[str, ...], levels, test_xi=None, xi_names=None,
                       costs: dict | None = None) -> tuple[str, dict]:  # fmt: skip
    """Markdown (one row per algorithm and constraint) and JSON of ``constraint_stats``;
    with the test kernels ``test_xi`` ``[L, D, *xi]`` (level 0 the nominal one) and the
    names of their entries, each worst kernel as its fields' changes (``kernel_text``);
    ``costs``: ``{algo: {"EpCost", "gamma_c", "horizon"}}`` (``RunFolder.load_results``), each
    constraint's discount and its episode cost beside C (a result file without them: "?")."""
    from rcmdp_jax.kernel_text import describe

    costs = costs or {}
    horizons = sorted({c["horizon"] for c in costs.values()})
    over = f"over H = {horizons[0]} steps" if len(horizons) == 1 else "over the episode"
    lines = ["| Algorithm | constraint | gamma_c | C at the nominal kernel (seeds > 0) | C on the worst kernel "
             f"(seeds > 0) | EpCost {over}: nominal | EpCost on C's worst kernel | the worst kernel (level: its "
             "fields) |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    js: dict = {}
    for algo, r in results.items():
        if r is None:
            continue
        for j, (name, s) in enumerate(zip(names, constraint_stats(r[1]))):
            n, lvl, d = s["seeds"], s["worst_level_index"], s["worst_direction"]
            entry = js.setdefault(algo, {})[name] = {**s, "worst_level": float(levels[lvl])}
            ep, gamma_c = ("?", "?"), None
            if algo in costs:
                entry |= episode_cost_stats(costs[algo]["EpCost"], j, lvl, d)
                entry |= {"gamma_c": float(costs[algo]["gamma_c"][j]), "horizon": costs[algo]["horizon"]}
                ep, gamma_c = (f"{entry['ep_cost_nominal']:.3f}", f"{entry['ep_cost_worst']:.3f}"), entry["gamma_c"]
            where = f"{float(levels[lvl]):g}: direction {d}"
            if test_xi is not None:
                xi = np.asarray(test_xi)
                entry["worst_kernel"] = describe(xi[lvl, d], xi[0, 0], xi_names)
                entry["worst_xi"] = np.asarray(xi[lvl, d], np.float64).tolist()
                where = f"{float(levels[lvl]):g}: {entry['worst_kernel']}"
            lines.append(f"| {md_cell(algo)} | {md_cell(name)} | {discount_text(gamma_c)} | {s['nominal']:.3f} "
                         f"({s['nominal_seeds_broken']}/{n}) | {s['worst']:.3f} ({s['worst_seeds_broken']}/{n}) | "
                         f"{ep[0]} | {ep[1]} | {md_cell(where)} |")  # fmt: skip
    text = ("\n## Is the constraint kept?\n\nPer algorithm and constraint: the mean constraint value C = "
            "E[sum_t gamma_c^t c_t] (kept when <= 0; gamma_c its discount, 1: the undiscounted episode sum) at the "
            "nominal kernel and on the test kernel where it is highest, and in brackets how many seeds break it "
            "there (their mean over episodes > 0); the mean episode cost EpCost (the undiscounted sum of the cost "
            "over the episode; of an indicator 'at most B/episode', the count of unsafe steps, to compare with B) "
            "at both; the worst kernel as its distortion level and each uncertain field's change from the nominal "
            "value.\n\n" + "\n".join(lines) + "\n")  # fmt: skip
    return text, js

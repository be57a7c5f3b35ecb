"""The reference study's claims (paraphrased), each checked against a reproduction's
summary numbers (``summary.json`` of each setting: ``{algo: {metric: {mean, se, min,
marked}}}``). A claim is a list of parts; its verdict is *holds* (every part),
*partly* (some) or *does not hold* (none), shown with the numbers that decide it."""

from __future__ import annotations

import math

Summary = dict  # {algo: {metric: {"mean", "se", "min", "marked"}}}


def _v(s: Summary, algo: str, metric: str, stat: str = "mean") -> float:
    return s[algo][metric][stat]


def _rank(s: Summary, metric: str, stat: str, algos=None) -> list[str]:
    algos = [a for a in (algos or s) if a in s]
    return sorted(algos, key=lambda a: -_v(s, a, metric, stat))


def _pooled(s: Summary, a: str, b: str, metric: str) -> float:
    return math.sqrt((s[a][metric]["se"] ** 2 + s[b][metric]["se"] ** 2) / 2.0)


def _fmt(s: Summary, algos, metric: str, stat: str = "mean") -> str:
    return ", ".join(f"{a} {_v(s, a, metric, stat):.2f}" for a in algos if a in s)


def _ties_best(s: Summary, metric: str, stat: str) -> list[str]:
    """Every algorithm whose ``stat`` equals the best one (identical policies tie exactly)."""
    best = max(_v(s, a, metric, stat) for a in s)
    return [a for a in s if _v(s, a, metric, stat) >= best - 1e-9 * max(1.0, abs(best))]


def _n_better(s: Summary, metric: str, stat: str, algo: str) -> int:
    v = _v(s, algo, metric, stat)
    return sum(_v(s, a, metric, stat) > v + 1e-9 * max(1.0, abs(v)) for a in s)


def top(metric: str, algo: str, stat: str = "mean"):
    """``algo`` is best on ``metric`` (marked: best or within one pooled SE, for the mean)."""

    def check(s):
        order = _rank(s, metric, stat)
        ok = s[algo][metric]["marked"] if stat == "mean" else algo in _ties_best(s, metric, stat)
        return (
            ok,
            f"{stat} {metric}: {algo} {_v(s, algo, metric, stat):.1f}, best {order[0]} {_v(s, order[0], metric, stat):.1f}",
        )

    return f"{algo} top on {stat} {metric}", check


def best_among(metric: str, stat: str, family: list[str], what: str):
    """The best algorithm on ``metric``/``stat`` is one of ``family``."""

    def check(s):
        best = _ties_best(s, metric, stat)
        return any(
            a in family for a in best
        ), f"{stat} {metric}: best {', '.join(best)} {_v(s, best[0], metric, stat):.1f}"

    return f"best {stat} {metric} is {what}", check


def in_top(metric: str, stat: str, algos: list[str], k: int, what: str):
    """Every one of ``algos`` is among the ``k`` best on ``metric``/``stat``."""

    def check(s):
        order = _rank(s, metric, stat)
        ok = all(_n_better(s, metric, stat, a) < k for a in algos if a in s)  # ties share a rank
        return ok, f"top {k} on {stat} {metric}: {_fmt(s, order[:k], metric, stat)}"

    return f"{what} among the {k} best on {stat} {metric}", check


def worst_of(metric: str, algo: str, among: list[str]):
    def check(s):
        others = [a for a in among if a in s and a != algo]
        ok = all(_v(s, algo, metric) < _v(s, a, metric) for a in others)
        return (
            ok,
            f"mean {metric}: {algo} {_v(s, algo, metric):.1f}, lowest of the others {min(_v(s, a, metric) for a in others):.1f}",
        )

    return f"{algo} the worst of them on mean {metric}", check


def similar(metric: str, algos: list[str], what: str, rel: float = 0.2):
    """ "Similar": the means of ``algos`` on ``metric`` lie within ``rel`` (20%) of the span
    of all algorithms' means (the evidence shows the numbers; the threshold is ours)."""

    def check(s):
        means = [_v(s, a, metric) for a in algos if a in s]
        allm = [_v(s, a, metric) for a in s]
        spread, scale = max(means) - min(means), max(allm) - min(allm)
        return spread <= rel * scale or spread <= 1e-9, (
            f"mean {metric} spread {spread:.1f} among {what} (all algorithms span {scale:.1f}): {_fmt(s, algos, metric)}"
        )

    return f"{what} converge to similar mean {metric}", check


def close(metric: str, a: str, b: str, k: float = 2.0):
    """``a`` and ``b`` within ``k`` pooled SEs on the mean of ``metric``."""

    def check(s):
        d = abs(_v(s, a, metric) - _v(s, b, metric))
        return d <= k * _pooled(s, a, b, metric), f"mean {metric}: {_fmt(s, [a, b], metric)} (|diff| {d:.1f})"

    return f"{a} and {b} similar on mean {metric}", check


def better(metric: str, stat: str, a: str, b: str):
    def check(s):
        return _v(s, a, metric, stat) > _v(s, b, metric, stat), f"{stat} {metric}: {_fmt(s, [a, b], metric, stat)}"

    return f"{a} better than {b} on {stat} {metric}", check


def far_ahead(metric: str, leaders: list[str], others: list[str], k: float = 2.0):
    """Every leader's mean exceeds every other's by more than ``k`` pooled SEs."""

    def check(s):
        ok = all(
            _v(s, a, metric) - _v(s, b, metric) > k * _pooled(s, a, b, metric)
            for a in leaders for b in others if a in s and b in s
        )  # fmt: skip
        return ok, f"mean {metric}: {_fmt(s, leaders + others, metric)}"

    return f"{', '.join(leaders)} far ahead of {', '.join(others)} on mean {metric}", check


CONSTRAINED = ["MCPMD-Lag", "PPO-Lag", "MDPO-Lag", "MDPO-Augmented-Lag", "RMCPMD-Lag", "PPO-Robust-Lag",
               "MDPO-Robust-Lag", "MDPO-Robust-Augmented-Lag"]  # fmt: skip
UNCONSTRAINED = ["MCPMD", "PPO", "MDPO", "RMCPMD", "PPO-Robust", "MDPO-Robust"]
MDPO_LAG = ["MDPO-Lag", "MDPO-Augmented-Lag", "MDPO-Robust-Lag", "MDPO-Robust-Augmented-Lag"]
ROBUST_MDPO_LAG = ["MDPO-Robust-Lag", "MDPO-Robust-Augmented-Lag"]
SCHED = [f"{a}:{k}" for a in ("MDPO-Robust-Lag", "MDPO-Robust-Augmented-Lag")
         for k in ["fixed"] + [f"{s}-{t}" for s in ("linear", "restart", "geometric") for t in ("epoch", "batch")]]  # fmt: skip

# (setting, the claim in words, parts)
CLAIMS = [
    ("cartpole-short", "CartPole, 20k steps: MDPO-Robust is top on the return; MDPO-Robust-Lag and MDPO-Lag have "
     "similar mean penalised returns, the former a better minimum; both far ahead of PPO-Lag and MCPMD-Lag.",
     [top("Return", "MDPO-Robust"), close("R_pen", "MDPO-Robust-Lag", "MDPO-Lag"),
      better("R_pen", "min", "MDPO-Robust-Lag", "MDPO-Lag"),
      far_ahead("R_pen", ["MDPO-Robust-Lag", "MDPO-Lag"], ["PPO-Lag", "MCPMD-Lag"])]),
    ("cartpole-long", "CartPole, 200k steps: MDPO-Robust-Lag (with or without augmentation) is top on mean penalised "
     "return, followed by MDPO-Lag; MCPMD-Lag and RMCPMD-Lag have the best minimum; all converge to similar levels.",
     [best_among("R_pen", "mean", ROBUST_MDPO_LAG, "a MDPO-Robust-Lag variant"),
      in_top("R_pen", "mean", ["MDPO-Lag"], 3, "MDPO-Lag"),
      in_top("R_pen", "min", ["MCPMD-Lag", "RMCPMD-Lag"], 2, "MCPMD-Lag and RMCPMD-Lag"),
      similar("R_pen", CONSTRAINED, "the constrained algorithms")]),
    ("inventory-short", "Inventory 1-D, 16k steps: MDPO-Robust top on the return; every other statistic (mean and "
     "minimum of both penalised returns) is best for an MDPO-Lag-based algorithm.",
     [top("Return", "MDPO-Robust")] + [best_among(m, st, MDPO_LAG, "an MDPO-Lag algorithm")
                                        for m in ("R_pen±", "R_pen") for st in ("mean", "min")]),
    ("inventory-long", "Inventory 1-D, 400k steps: all constrained algorithms except PPO-Robust-Lag converge to a "
     "similar optimum; the unconstrained ones too.",
     [similar("R_pen±", [a for a in CONSTRAINED if a != "PPO-Robust-Lag"], "the constrained algorithms but PPO-Robust-Lag"),
      worst_of("R_pen±", "PPO-Robust-Lag", CONSTRAINED),
      similar("Return", UNCONSTRAINED, "the unconstrained algorithms")]),
    ("inventory3d-short", "Inventory 3-D, 40k steps: MDPO-Robust has the highest mean and minimum test return; "
     "MDPO-Robust-Augmented-Lag is best on both penalised returns, MDPO-Robust-Lag close behind.",
     [top("Return", "MDPO-Robust"), top("Return", "MDPO-Robust", "min"),
      top("R_pen±", "MDPO-Robust-Augmented-Lag"), top("R_pen", "MDPO-Robust-Augmented-Lag"),
      in_top("R_pen", "mean", ["MDPO-Robust-Lag"], 3, "MDPO-Robust-Lag")]),
    ("inventory3d-long", "Inventory 3-D, 400k steps: the MDPO-Robust-Lag algorithms have by far the best minimum "
     "penalised return; the augmented variants do well on the signed one.",
     [in_top("R_pen", "min", ROBUST_MDPO_LAG, 2, "both MDPO-Robust-Lag algorithms"),
      in_top("R_pen±", "mean", ["MDPO-Augmented-Lag", "MDPO-Robust-Augmented-Lag"], 4, "the augmented variants")]),
    ("schedules-inventory-short", "Schedules: MDPO-Robust-Augmented-Lag with a per-batch linear schedule with "
     "restarts is the best robust-constrained combination; geometric does well with MDPO-Robust-Lag.",
     [best_among("R_pen", "mean", ["MDPO-Robust-Augmented-Lag:restart-batch"], "MDPO-Robust-Augmented-Lag:restart-batch"),
      in_top("R_pen", "mean", ["MDPO-Robust-Lag:geometric-epoch", "MDPO-Robust-Lag:geometric-batch"], 7,
             "MDPO-Robust-Lag with geometric alpha")]),
]  # fmt: skip


def judge(summary: Summary, parts) -> tuple[str, list[str]]:
    results = [(name, *check(summary)) for name, check in parts]
    n_ok = sum(ok for _, ok, _ in results)
    verdict = "holds" if n_ok == len(results) else ("partly" if n_ok else "does not hold")
    lines = [f"{'✓' if ok else '✗'} {name} ({why})" for name, ok, why in results]
    return verdict, lines


def verdict_table(summaries: dict[str, Summary]) -> str:
    """Markdown: one row per claim, with the verdict and the deciding numbers."""
    rows = ["| setting | claim | verdict | evidence |", "|---|---|---|---|"]
    for setting, words, parts in CLAIMS:
        if setting not in summaries:
            rows.append(f"| {setting} | {words} | not run | |")
            continue
        s = summaries[setting]
        verdict, lines = judge(s, parts)
        rows.append(f"| {setting} | {words} | **{verdict}** | {'<br>'.join(lines)} |")
    return "\n".join(rows) + "\n"

"""The Markdown and JSON of ``experiments/robustness.py`` from its per-seed evidence, and that evidence
read from a run folder (``seed_table``) with rliable's PoI against *none* (``poi_vs_none``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from launch import format_mean_se, mean_se  # experiments/launch.py


def _mean_se(x) -> str:
    return format_mean_se(x, digits=2)


def _broken(x) -> int:
    return int(np.sum(np.asarray(x) > 0))


# the calibration rule, fixed before the results and applied the same way to every setting
CALIBRATION = (
    "a setting can tell robust methods apart when (1) the feasibility check keeps its constraint on the whole "
    "box with a margin — the least worst-kernel C found is at most -10 % of the gap between *none*'s mean "
    "worst-kernel C and that bound — and (2) the non-robust learner (*none*) breaks the constraint on its worst "
    "kernel in at least half its seeds"
)


def gap_closed(c_none, c_method, c_feasible) -> float | None:
    """The share of the gap to the feasible bound a method closes on the worst kernel:
    ``(C_none - C_method) / (C_none - C_feasible)`` of the mean worst-kernel C; None when
    *none* is already at the bound within two of its seeds' standard errors (below it, or a gap
    of seed noise, whose ratio means nothing: Inventory's least-cost policy, which *none* finds)."""
    mean, se = mean_se(c_none)
    gap = mean - float(c_feasible)
    return None if gap <= 2 * se else (mean - float(np.mean(c_method))) / gap


def calibrated(c_none, feasible: dict | None) -> tuple[bool, str]:
    """Whether a setting passes ``CALIBRATION``, and why (in words)."""
    if feasible is None:
        return False, "no feasibility check"
    bound = feasible["least_worst_C"]
    c_none = np.asarray(c_none, np.float64)
    margin = 0.1 * max(float(c_none.mean()) - bound, 0.0)
    keeps = feasible["keepable"] and bound <= -margin
    broken = _broken(c_none)
    half = broken * 2 >= c_none.size
    why = (f"feasible bound {bound:+.3g} ({'keepable' if feasible['keepable'] else 'not keepable'}; margin needed "
           f"{margin:.3g}), none breaks on its worst kernel in {broken}/{c_none.size} seeds")  # fmt: skip
    return bool(keeps and half), why


def render(table: dict, meta: dict, learners, methods, algo_name, outside=(), methods_of=None,
           ranked=None) -> tuple[str, dict]:
    """The report. ``methods_of(learner)`` the methods a learner ran (default all); ``ranked`` the
    learners the calibrated summary and the default's rule read (default all)."""
    methods_of = methods_of or (lambda learner: methods)
    ranked = tuple(ranked or learners)
    seeds = meta.get("seeds", 10)
    lines = [
        "# Robust training methods: who keeps the constraint on the worst kernel",
        "",
        "Made by `python experiments/robustness.py --out DIR` "
        f"(code version `{meta.get('code_version', '?')}`, {seeds} seeds, each setting at its budget below) on "
        f"{meta.get('machine', 'the machine named below')}. Hand-written findings: "
        "[robustness_findings.md](robustness_findings.md).",
        "",
        "Each learner trains under every robust method (`ALGO+METHOD`, one family program per learner): "
        "`none` (nominal kernel), `ltma` (the study's LTMA: score function, raw step `eta_xi`), `ltma-norm` "
        "(pathwise gradient, each step moves `xi` by `xi_step` of the half-width), `dr` (a uniform kernel per "
        "training episode), `worst-of-n` (16 uniform kernels, train on the worst quarter), `corners` "
        "(train on the worst of the box's corners) and `search` (two steps of the gradient worst-case search an "
        "iteration for the return and each constraint, restarted from four random corners). Then the robustness test (every kernel of the grid) and "
        "the gradient search for each seed's worst kernel of each constraint (`--worst-case costs`).",
        "",
        "Columns: `C nom` the constraint value at the nominal kernel (mean ± SE over seeds; > 0 breaks it); "
        "`C grid` / `C search` the worst constraint value on the test grid / found by the gradient search; "
        "`V nom` the discounted return at the nominal kernel (what the goal's `return nom` reads); "
        "`broken` how many seeds break the constraint at the nominal kernel / on their worst kernel "
        "(the worse of grid and search); `R_pen nom` / `R_pen worst` the penalised return at the nominal and "
        "the grid's worst kernel (each test episode's return less `lambda_max` per unit of its own broken C, "
        "then averaged: an episode over the limit costs even where the seed's mean keeps it); `PoI` rliable's probability that a seed of the method has a lower worst-kernel "
        "C than a seed of `none`, with its 95 % bootstrap interval (**bold**: lower end above 0.5); `time` "
        "training time of the method alone (PPO-Lag, compile excluded) where timed; `gap closed` the share of the "
        "gap between *none* and the feasible bound (`rcmdp feasibility`'s least worst-kernel C) the method closes "
        "on the worst kernel, `(C_none - C_method) / (C_none - C_feasible)` of the mean worst-kernel C (the bound "
        "is the check's estimate from its own search, not a proof: a method can pass it, a gap closed above 1).",
        "",
        f"The calibration rule (fixed before the results): {CALIBRATION}.",
        "",
    ]
    js: dict = {"meta": meta, "settings": {}}
    wins: dict = {}
    for env, block in table.items():
        rows, poi = block["rows"], block["poi"]
        timing = meta.get("timing", {}).get(env, {})
        lines += [f"## `{env}`", ""]
        feasible = block.get("feasible")
        if feasible is not None:
            ok = {lr: calibrated(rows[algo_name(lr, "none")]["C_worst"], feasible) for lr in learners if lr in poi}
            js.setdefault("calibration", {})[env] = {lr: {"passes": o[0], "why": o[1]} for lr, o in ok.items()}
            lines += ["Calibration rule: " + "; ".join(f"{lr} {'passes' if o[0] else 'fails'} ({o[1]})"
                                                       for lr, o in ok.items()) + ".", ""]  # fmt: skip
        if block.get("steps"):
            lines += [f"Budget: {block['steps']:,} steps per seed ({block.get('budget_why', 'the preset')}).", ""]
        if block.get("sets"):
            lines += [f"Set for every lane (`--set`): {', '.join(f'`{kv}`' for kv in block['sets'])}.", ""]
        if env in meta.get("wall_s", {}):
            version = meta.get("code_versions", {}).get(env, meta.get("code_version", "?"))
            lines += [f"Code version `{version}`; wall time of the setting (train, test, search): "
                      f"{meta['wall_s'][env] / 60:.1f} min.", ""]  # fmt: skip
        for key in sorted(k for k in meta.get("wall_s", {}) if k.startswith(env + ".")):  # its parts
            part = key[len(env) + 1 :]
            algos = ", ".join(a for a, f in block.get("parts", {}).items() if f.endswith("." + part)) or "none kept"
            lines += [f"Part `{part}` (robustness.py --part; its rows: {algos}): code version "
                      f"`{meta.get('code_versions', {}).get(key, '?')}`; wall time {meta['wall_s'][key] / 60:.1f} min.",
                      ""]  # fmt: skip
        for note in meta.get("notes", {}).get(env, ()):  # what the folder cannot say (experiments: by hand)
            lines += [f"Note: {note}", ""]
        lines += ["| algorithm | seeds | C nom | C grid | C search | broken nom / worst | V nom | R_pen nom | R_pen worst "
                  "| PoI vs none | gap closed | time |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        js["settings"][env] = {}
        for learner in learners:
            for m in methods_of(learner):
                a = algo_name(learner, m)
                if a not in rows:  # a run of fewer methods or learners (robustness.py --methods, --learners)
                    continue
                r = rows[a]
                p = poi[learner].get(m)
                if p is None:
                    poi_s = "—"
                else:
                    poi_s = f"{p[0]:.2f} [{p[1]:.2f}, {p[2]:.2f}]"
                    if p[1] > 0.5:
                        poi_s = f"**{poi_s}**"
                        wins.setdefault(env, []).append(a)
                # the gap to the bound only where the bound keeps the constraint (a bound above 0
                # leaves a gap of float noise, whose ratio means nothing)
                g = None if feasible is None or not feasible["keepable"] else gap_closed(
                    rows[algo_name(learner, "none")]["C_worst"], r["C_worst"], feasible["least_worst_C"]
                )
                g_s = "—" if g is None else f"{g:.2f}"
                t = timing.get(m) if learner == "PPO-Lag" else None
                t_s = "" if t is None else f"{t:.1f} s ({t / timing['none']:.2f}×)"
                lines.append(
                    f"| {a} | {r['seeds']}/{r['trained']} | {_mean_se(r['C_nominal'])} | {_mean_se(r['C_grid'])} | "
                    f"{_mean_se(r['C_search'])} | {_broken(r['C_nominal'])} / {_broken(r['C_worst'])} | "
                    f"{_mean_se(r['V_nominal']) if 'V_nominal' in r else '—'} | "
                    f"{_mean_se(r['R_pen_nominal'])} | {_mean_se(r['R_pen_worst'])} | {poi_s} | {g_s} | {t_s} |"
                )
                js["settings"][env][a] = {k: (np.asarray(v).tolist() if not isinstance(v, int) else v)
                                          for k, v in r.items()} | {"poi_vs_none": p, "gap_closed": g}  # fmt: skip
        lines.append("")
    lines += ["## Where a robust method beats *none*", ""]
    lines += [f"* `{env}`: {', '.join(wins.get(env, [])) or 'no method'} (PoI's lower end > 0.5)" for env in table]
    lines.append("")
    if meta.get("wall_s"):
        settings = meta.get("settings_wall_s", sum(meta["wall_s"].values()))
        total = settings + meta.get("timing_wall_s", 0.0)
        jobs = meta.get("jobs", 1)
        pool = "the settings and the timing programs' compiles" if meta.get("timing_compile_s") else "settings"
        lines += [f"Whole benchmark: {total / 60:.1f} min on a {meta.get('machine', '?')} ({pool} "
                  f"{settings / 60:.1f} min, {jobs} at a time, longest first; timing pass "
                  f"{meta.get('timing_wall_s', 0.0) / 60:.1f} min).", ""]  # fmt: skip
    js["wins"] = wins
    js["on_calibrated"] = on_cal = calibrated_summary(js, ranked, methods, algo_name)
    if on_cal["pairs"]:
        pairs = ", ".join(f"`{e}` {lr}" for e, lr in on_cal["pairs"])
        lines += ["## On the calibrated settings", "",
                  f"The (setting, learner) pairs that pass the calibration rule: {pairs}. Per method, over those "
                  "pairs: in how many its PoI's lower end is above 0.5, and the mean share of the gap to the "
                  "feasible bound it closes on the worst kernel.", "",
                  "| method | PoI lower end > 0.5 | mean gap closed |", "|---|---|---|"]  # fmt: skip
        lines += [f"| {m} | {v['wins']}/{len(on_cal['pairs'])} | {v['gap']:.2f} |" for m, v in on_cal["methods"].items()]
        lines.append("")
    js["goal"] = goal = goal_check(table, js, ranked, methods_of, algo_name)
    if goal["rows"]:
        lines += ["## The goal", "", GOAL, "",
                  "| setting | learner | default method | kept on its worst kernel | gap closed | return nom: "
                  "none → default | lanes breaking at the nominal kernel in > 1 seed | calibrated | met |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for g in goal["rows"]:
            bad = ", ".join(f"{a} {n}/{t}" for a, n, t in g["nominal_breakers"]) or "none"
            gap = "—" if g["gap"] is None else f"{g['gap']:.2f}"
            sets = table[g["env"]].get("sets", ())
            method = g["method"] + (f" ({', '.join(f'`{kv}`' for kv in sets)})" if sets else "")
            lines.append(f"| `{g['env']}` | {g['learner']} | {method} | {g['kept']}/{g['seeds']} | {gap} | "
                         f"{g['r_none']:.2f} → {g['r_default']:.2f} | {bad} | {'yes' if g['calibrated'] else 'no'} | "
                         f"{'**yes**' if g['met'] else 'no'} |")
        lines += ["", f"Met on {goal['met']}/{len(goal['rows'])} (setting, learner) pairs"
                  + (f" ({goal['calibrated_met']}/{goal['calibrated']} of the calibrated ones)." if goal['calibrated']
                     else "."), ""]
    js["default_rule"] = ranking = default_ranking(table, outside, ranked, methods, algo_name)
    if ranking:
        lines += ["## The default by this evidence", "",
                  "The rule, fixed before the gymnax runs: over the environments outside the study "
                  f"({', '.join(f'`{e}`' for e in outside if e in table)}) and both learners, the method with the "
                  "highest mean probability of improvement over *none* (ties: fewer seeds breaking the constraint on "
                  "their worst kernel).", "",
                  "| method | mean PoI vs none | seeds broken on the worst kernel / seeds (the settings it ran on) |",
                  "|---|---|---|"]  # fmt: skip
        lines += [f"| {m} | {poi:.2f} | {broken}/{seeds} |" for m, poi, broken, seeds in ranking]
        lines += ["", f"Seeds broken under *none*: {none_broken(table, outside, ranked, algo_name)}.", ""]
    return "\n".join(lines), js


GOAL = ("The goal, written before the run (issue 52): on every calibrated (setting, learner) pair the default "
        "robust method keeps the constraint on its worst test kernel (the worse of grid and search) in at least 8 "
        "of 10 seeds and closes at least 75 % of the gap to the feasible bound; no lane breaks it at the nominal "
        "kernel in more than 1 of 10 seeds; the return the default costs is stated (`return nom`: the mean "
        "discounted return at the nominal kernel, none → default).")


def _return(row) -> float:
    """The seeds' mean return at the nominal kernel (``V_nominal``; ``R_pen_nominal`` for rows
    made before it was kept)."""
    return float(np.mean(row.get("V_nominal", row["R_pen_nominal"])))


def goal_check(table: dict, js: dict, learners, methods_of, algo_name) -> dict:
    """Per (setting, learner) with a ``default`` method (the block's ``default``): the seeds the
    default keeps on its worst kernel, its gap closed, the return it costs at the nominal kernel,
    and the learner's lanes that break the constraint at the nominal kernel in more than one seed
    (scaled: more than a tenth of the seeds)."""
    rows_out, met, cal, cal_met = [], 0, 0, 0
    for env, block in table.items():
        m = block.get("default")
        for lr in learners:
            if m is None or m not in methods_of(lr) or algo_name(lr, m) not in block["rows"]:
                continue
            rows, a = block["rows"], algo_name(lr, m)
            r, none = rows[a], rows[algo_name(lr, "none")]
            seeds = len(r["C_worst"])
            kept = seeds - _broken(r["C_worst"])
            gap = js["settings"][env][a]["gap_closed"]
            breakers = [(algo_name(lr, x), _broken(rows[algo_name(lr, x)]["C_nominal"]),
                         len(rows[algo_name(lr, x)]["C_nominal"])) for x in methods_of(lr) if algo_name(lr, x) in rows]
            breakers = [b for b in breakers if b[1] * 10 > b[2]]
            ok = kept * 10 >= 8 * seeds and gap is not None and gap >= 0.75 and not breakers
            passes = js.get("calibration", {}).get(env, {}).get(lr, {}).get("passes", False)
            met += ok
            cal += passes
            cal_met += ok and passes
            rows_out.append({"env": env, "learner": lr, "method": m, "kept": kept, "seeds": seeds, "gap": gap,
                             "r_none": _return(none), "r_default": _return(r),
                             "nominal_breakers": breakers, "met": bool(ok), "calibrated": bool(passes)})
    return {"rows": rows_out, "met": met, "calibrated": cal, "calibrated_met": cal_met}


def calibrated_summary(js: dict, learners, methods, algo_name) -> dict:
    """Over the (setting, learner) pairs that pass ``CALIBRATION``: per method, the pairs where
    its PoI's lower end is above 0.5 and its mean share of the gap closed."""
    pairs = [(e, lr) for e, by in js.get("calibration", {}).items() for lr in learners
             if by.get(lr, {}).get("passes")]  # fmt: skip
    out = {}
    for m in methods[1:]:
        rows = [js["settings"][e][algo_name(lr, m)] for e, lr in pairs if algo_name(lr, m) in js["settings"][e]]
        gaps = [r["gap_closed"] for r in rows if r["gap_closed"] is not None]
        out[m] = {"wins": sum(r["poi_vs_none"] is not None and r["poi_vs_none"][1] > 0.5 for r in rows),
                  "gap": float(np.mean(gaps)) if gaps else float("nan")}  # fmt: skip
    return {"pairs": pairs, "methods": out}


def default_ranking(table: dict, outside, learners, methods, algo_name) -> list:
    """``[(method, mean PoI vs none, seeds broken on the worst kernel, seeds)]``, best first."""
    envs_ = [e for e in outside if e in table]
    out = []
    for m in methods[1:]:
        have = [(e, lr) for e in envs_ for lr in learners if m in table[e]["poi"].get(lr, {})]
        pois = [table[e]["poi"][lr][m][0] for e, lr in have]
        broken = sum(_broken(table[e]["rows"][algo_name(lr, m)]["C_worst"]) for e, lr in have)
        seeds = sum(len(table[e]["rows"][algo_name(lr, m)]["C_worst"]) for e, lr in have)
        if pois:
            out.append((m, float(np.mean(pois)), broken, seeds))
    return sorted(out, key=lambda r: (-r[1], r[2]))


def none_broken(table: dict, outside, learners, algo_name) -> int:
    return sum(_broken(table[e]["rows"][algo_name(lr, "none")]["C_worst"]) for e in outside if e in table
               for lr in learners if algo_name(lr, "none") in table[e]["rows"])  # fmt: skip


# --- the rows: each seed's readings from a run folder, and rliable's PoI against none ---


def seed_table(run_dir: Path, env: str, algo: str) -> dict:
    """Per kept seed: C at the nominal kernel, the worst C on the grid and from the search
    (the worst of the constraints), and R_pen at the nominal and the grid's worst kernel."""
    from rcmdp_jax import envs, stats
    from rcmdp_jax.study.run_folder import RunFolder, kept_seeds, load_npz
    from rcmdp_jax.worst_case import compare_with_grid

    folder = RunFolder(run_dir)
    z = load_npz(folder.algo_dir(env, algo) / "test_results.npz")
    keep = kept_seeds(z)
    V, C = z["V"][keep], z["C"][keep]
    lmax = envs.spec(env).lambda_max
    found, grid_xi = folder.load_worst_case(env, algo)
    cmp = compare_with_grid(V, C, found, lmax, grid_xi)
    m = C.shape[-1]
    grid = np.max([cmp[f"C{j}"]["grid"] for j in range(m)], axis=0)
    search = np.max([cmp[f"C{j}"]["search"] for j in range(m)], axis=0)
    r_pen = stats.penalised_returns(V, C, lmax)["R_pen"].mean(-1)  # [S, L, D]
    return {
        "seeds": int(keep.sum()),
        "trained": int(keep.size),
        "C_nominal": C[:, 0, 0].mean(-2).max(-1),  # level 0: every direction is the nominal kernel
        "C_grid": grid,
        "C_search": search,
        "C_worst": np.maximum(grid, search),
        "V_nominal": V[:, 0, 0].mean(-1),  # the (discounted) return at the nominal kernel
        "R_pen_nominal": r_pen[:, 0, 0],
        "R_pen_worst": r_pen.reshape(r_pen.shape[0], -1).min(1),
    }


def poi_vs_none(rows: dict, learner: str, methods: tuple[str, ...], algo_name, reps: int = 2000) -> dict:
    """rliable's probability that a seed of each of ``methods`` (after *none*) keeps a lower worst-kernel C than a
    seed of *none* (scores ``-C_worst``), with its 95 % stratified-bootstrap interval."""
    from rliable import library as rly
    from rliable import metrics

    base = -rows[algo_name(learner, "none")]["C_worst"][:, None]
    pairs = {m: (-rows[algo_name(learner, m)]["C_worst"][:, None], base) for m in methods[1:]
             if algo_name(learner, m) in rows}  # fmt: skip
    # rliable draws its bootstrap from NumPy's global generator (its random_state goes unused):
    # a fixed seed, restored after, gives the same report each time
    saved = np.random.get_state()
    np.random.seed(0)
    try:
        point, interval = rly.get_interval_estimates(pairs, metrics.probability_of_improvement, reps=reps)
    finally:
        np.random.set_state(saved)
    return {m: tuple(float(x) for x in np.ravel([point[m], *np.ravel(interval[m])])) for m in pairs}

"""``--budget auto``: the budget rule (``rcmdp_jax.convergence``, docs/budgets.md) applied while
training, so that a setting nobody measured trains where its learner has converged.

The non-robust learner (``LEARNER-Lag`` at the nominal kernel; its own hyperparameters) trains
in chunks up to a cap; whenever its curves reach twice a budget ``N`` of the doubling grid, the
rule reads them: ``N`` has converged when doubling it moved the seeds' mean of every curve (the
deterministic policy's return and each constraint's value) by less than that mean's standard
error over the seeds at ``2 N``. The search stops at the first such ``N`` (or at the cap, saying
it is unconverged); the run then trains every algorithm at ``N``.

``search`` needs no run folder: ``search(config, keys, cap)`` -> ``Found``. ``stop_at`` is the
decision alone, on curves of any origin (tests give it hand-made ones).
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np

from rcmdp_jax.config import BudgetRounded
from rcmdp_jax.convergence import converged_budget, row_passes

GRID = tuple(25_000 * 2**i for i in range(16))  # 25k, 50k, ... (the rule's doubling grid)
DEFAULT_CAP = 1_600_000  # the grid's top in docs/budgets.md: every budget measured there converged below it
MIN_SEEDS = 3  # the rule reads the spread over seeds


@dataclasses.dataclass(frozen=True)
class Found:
    """What the search found: ``converged`` the budget ``N`` (policy steps; None: none up to
    ``reached``), ``reached`` the policy steps trained, ``cap``, and the rule's table ``{N:
    {curve: (moved, standard error)}}``."""

    converged: int | None
    reached: int
    cap: int
    table: dict
    seconds: float = 0.0

    @property
    def budget(self) -> int:
        """The budget the run trains at: the converged one, else the cap."""
        return self.converged or self.cap

    def why(self) -> str:
        """One line: which budget, and the rule's reading that decided it."""
        if self.converged is None:
            return (f"not converged within the cap of {self.cap:,} policy steps (the budget rule moved some curve by "
                    f"its standard error at every doubling measured); the run trains at the cap, unconverged")  # fmt: skip
        row = self.table[self.converged]
        moved = ", ".join(f"{k} by {v[0]:.3g} " + (f"< SE {v[1]:.3g}" if len(v) == 2 else "(not binding: its multiplier "
                          "0 in every seed; it does not decide)") for k, v in row.items())  # fmt: skip
        said = f"converged at {self.converged:,} policy steps: doubling it to {2 * self.converged:,} moved {moved}"
        if self.converged == GRID[0]:  # the first budget: a flat start, which training may still leave
            said += (" (the grid's first budget: a plateau the learners may leave, as on the study's Inventory and "
                     "CartPole, docs/budgets.md; a higher --steps does not change where it stops)")  # fmt: skip
        return said


def stop_at(curves: dict[str, np.ndarray], steps: np.ndarray, grid=GRID, multipliers=None) -> tuple[int | None, dict]:
    """The rule on the curves so far (``name -> [seeds, iterations]``, ``steps [iterations]`` the
    cumulative policy steps; ``multipliers``: each constraint curve's multiplier, as ``curves_of``
    gives them): ``(N, table)``, ``N`` the converged budget once one is (its doubling within the
    curves), else None."""
    return converged_budget(curves, np.asarray(steps, float), grid, multipliers=multipliers)


def curves_of(metrics: dict, cost_names=None) -> tuple[dict[str, np.ndarray], np.ndarray, dict]:
    """The rule's curves from training metrics (leading axes seeds, iterations): the return and
    each constraint's value ``C[name]`` at the nominal kernel (``cost_names`` None: none, an
    unconstrained learner's), the cumulative policy steps, and each constraint curve's
    multiplier ``lam`` (where the metrics hold it)."""
    out, mult = {"return": np.asarray(metrics["eval_return"], float)}, {}
    costs = np.asarray(metrics["eval_costs"], float)
    for j, name in enumerate(cost_names or ()):
        out[f"C[{name}]"] = costs[..., j]
        if "lam" in metrics:
            mult[f"C[{name}]"] = np.asarray(metrics["lam"], float)[..., j]
    return out, np.asarray(metrics["policy_steps"], float)[0], mult


def check(seeds: int, cap: int) -> None:
    """``ValueError`` naming the option when the search cannot read the rule."""
    if seeds < MIN_SEEDS:
        raise ValueError(f"--budget auto reads the spread over seeds: give --seeds {MIN_SEEDS} or more (the rule was "
                         f"written for 10), got {seeds}")  # fmt: skip
    if cap < 2 * GRID[0]:
        raise ValueError(f"--budget auto: the cap (--steps) must be at least {2 * GRID[0]:,} policy steps, the first "
                         f"budget of the rule's grid doubled; got {cap:,}")  # fmt: skip


def search(config, keys, cap: int = DEFAULT_CAP, chunk: int | None = None, report=None) -> Found:
    """Train ``config`` (the non-robust learner; its ``total_timesteps`` replaced by ``cap``) on
    the seeds ``keys`` chunk by chunk (``chunked``), reading the rule after each chunk; stop at the
    first converged budget. ``report(line)``: progress (None: silent)."""
    from rcmdp_jax import envs
    from rcmdp_jax.chunked import Prepared, train_prepared

    check(int(keys.shape[0]), cap)
    names = envs.spec(config.env).cost_names if config.constrained else None  # no constraint: the return alone
    cfg = config.replace(total_timesteps=int(cap)).validate()
    chunk = chunk or max(1, min(cfg.num_iterations, -(-GRID[0] // max(1, config.batch_size))))
    parts, found, table, steps, t0 = [], None, {}, [0], time.perf_counter()

    def read(_member, metrics, *_) -> bool:
        nonlocal found, table, steps
        parts.append({k: metrics[k] for k in ("eval_return", "eval_costs", "policy_steps", "lam") if k in metrics})
        curves, steps, mult = curves_of({k: np.concatenate([p[k] for p in parts], axis=1) for k in parts[0]}, names)
        before = len(table)
        found, table = stop_at(curves, steps, GRID, mult)
        if report is not None and len(table) > before:
            n = max(table)
            verdict = "passes" if row_passes(table[n]) else "moved"
            report(f"{int(steps[-1]):,} policy steps: budget {n:,} {verdict} ({time.perf_counter() - t0:.0f} s)")
        return found is not None

    train_prepared(Prepared([cfg], keys, True, chunk=chunk), on_chunk=read)
    return Found(found, int(steps[-1]), int(cap), table, time.perf_counter() - t0)


def plain_config(cfgs):
    """The budget rule's learner for algorithms of one learner: its plain ``-Lag`` at the nominal
    kernel (a non-robust constrained one of ``cfgs`` as it is, else the first made so)."""
    plain = [c for c in cfgs if not c.robust and c.constrained] or [c for c in cfgs if not c.robust]
    if plain:
        return plain[0]
    from rcmdp_jax.config import Config, fields_of

    c, base = cfgs[0], Config()
    plain = {f: getattr(base, f) for f in fields_of("choice")}  # no robust method, the fixed alpha, ...
    plain["constraint"] = "lagrangian" if c.constrained else c.constraint
    suffix = "-Lag" if c.constrained else ""
    return c.replace(**plain).replace(name=f"{c.learner.upper()}{suffix} (budget rule)")


def search_envs(configs: dict, keys, report=print) -> tuple[dict[str, int], dict]:
    """``--budget auto`` over a run's ``configs`` (``{env: {algo: Config}}``, each at the cap): per
    environment, each learner's ``plain_config`` searched (``search``); every algorithm then trains
    at the largest budget its environment's learners found. ``({env: steps}, {env: {learner: Found}})``."""
    found, budgets = {}, {}
    for env, cfgs in configs.items():
        by_learner = {}
        for c in cfgs.values():
            by_learner.setdefault(c.learner, []).append(c)
        found[env] = {}
        for learner, group in by_learner.items():
            cfg = plain_config(group)
            report(f"rcmdp_jax: --budget auto on {env}: training {cfg.name} ({keys.shape[0]} seeds) up to "
                   f"{cfg.total_timesteps:,} policy steps, reading the budget rule as it goes")  # fmt: skip
            line = lambda text, env=env, name=cfg.name: report(f"[{env} budget] {name}: {text}")  # noqa: E731
            with warnings.catch_warnings():  # the cap's rounding to whole batches: the plan said it
                warnings.simplefilter("ignore", BudgetRounded)
                f = found[env][learner] = search(cfg, keys, cfg.total_timesteps, report=line)
            report(f"rcmdp_jax: --budget auto on {env}: {cfg.name} {f.why()} ({f.seconds:.0f} s)")
        budgets[env] = max(f.budget for f in found[env].values())
        report(f"rcmdp_jax: --budget auto on {env}: every algorithm trains at {budgets[env]:,} policy steps")
    return budgets, found

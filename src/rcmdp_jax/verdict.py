"""Whether a constraint is kept, per seed, with the test's confidence (plain NumPy).

A constraint is of one of two kinds (``kinds``):

* a **budget**: an indicator, 1 per unsafe step with a budget of ``B`` unsafe steps per
  episode (``envs.indicator``, ``--costs 'FIELD>LIMIT:B'``). With the cost discount
  ``gamma_c = 1`` it is judged in Safety-Gymnasium's and OmniSafe's terms: kept when the mean
  episode cost (the count of unsafe steps, EpCost) is at most ``B``. An episode that ends
  before the time limit ``H`` counts its unsafe steps against the whole budget ``B``; the
  training's ``C`` grants it only ``B*T/H`` for its ``T`` steps, a stricter reading shown
  beside it. With another ``gamma_c`` it was declared in discounted terms, and ``C <= 0``
  decides;
* a **limit**: any other cost, kept when its discounted sum ``C`` is at most 0.

``decides`` names the reading; ``episode_values`` gives, per episode, the number whose mean
must be ``<= 0`` (EpCost - B, or C); ``seed_verdicts`` judges each seed's mean over its test
episodes: *too close to call* when it lies within ``Z`` standard errors of 0 (the
feasibility check's notion), else *kept* (at most 0) or *broken* (above it), and how many
test episodes would decide a close one at the same spread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rcmdp_jax.stats import mean_se

KEPT, BROKEN, CLOSE = "kept", "broken", "too close to call"
VERDICTS = (KEPT, BROKEN, CLOSE)
Z = 2.0  # standard errors: the band around 0 where a seed's verdict is too close to call


@dataclass(frozen=True)
class Constraint:
    """What a constraint is, for its verdict: ``kind`` ``"budget"`` (an indicator with
    ``budget`` unsafe steps per episode) or ``"limit"`` (``budget`` None), its discount
    ``gamma_c`` (None: unknown, a result file written before it was kept)."""

    kind: str
    gamma_c: float | None = None
    budget: float | None = None

    @property
    def by_ep_cost(self) -> bool:
        return self.kind == "budget" and self.gamma_c == 1.0

    @property
    def decides(self) -> str:
        """The rule in words: ``EpCost <= B`` (with ``B`` written out) or ``C <= 0``."""
        return f"EpCost <= {self.budget:g}" if self.by_ep_cost else "C <= 0"

    def as_json(self) -> dict:
        return {"kind": self.kind, "budget": self.budget, "gamma_c": self.gamma_c, "decides": self.decides}


def kinds(env) -> list[Constraint]:
    """Each constraint of a robust environment as a ``Constraint`` (``gamma_c`` left to the
    caller, which knows the training discount): a cost function with an indicator's per-step
    share (``offset``, set by ``envs.indicator``) or a share ``B/H > 0`` in ``env.cost_offsets``
    is a budget ``B = share * H``."""
    m, horizon = int(env.num_constraints), int(env.episode_length)
    offsets = tuple(getattr(env, "cost_offsets", None) or (0.0,) * m)
    fns = tuple(getattr(env, "cost_fns", ()))
    flagged = [hasattr(fn, "offset") for fn in fns] if len(fns) == m else [False] * m
    out = []
    for j in range(m):
        if flagged[j] or offsets[j] > 0:
            out.append(Constraint("budget", budget=round(float(offsets[j]) * horizon, 6)))
        else:
            out.append(Constraint("limit"))
    return out


def episode_values(constraint: Constraint, C, ep_cost=None) -> np.ndarray:
    """Per episode, the value whose mean is kept when ``<= 0``: ``EpCost - B`` for a budget
    judged by its episode cost, else ``C`` (arrays of one shape)."""
    if constraint.by_ep_cost and ep_cost is not None:
        return np.asarray(ep_cost, np.float64) - constraint.budget
    return np.asarray(C, np.float64)


@dataclass(frozen=True)
class SeedVerdicts:
    """Per seed: ``verdict`` (``KEPT``, ``BROKEN`` or ``CLOSE``), the ``mean`` over its test
    episodes, its standard error ``se``, and ``needed``: the fewest test episodes that would put
    the mean more than ``Z`` standard errors from 0 at the same mean and spread (None where
    decided, or where the mean is exactly 0)."""

    verdict: tuple[str, ...]
    mean: np.ndarray
    se: np.ndarray
    needed: tuple[int | None, ...]

    def counts(self) -> dict[str, int]:
        return {v: self.verdict.count(v) for v in VERDICTS}

    def most_needed(self) -> int | None:
        """The test episodes that would decide every close seed (None: none is close, or a
        close seed's mean is exactly 0, which no number decides)."""
        close = [n for v, n in zip(self.verdict, self.needed) if v == CLOSE]
        return None if not close or None in close else max(close)


def seed_verdicts(x, z: float = Z) -> SeedVerdicts:
    """``x`` ``[seeds, episodes]``: each seed's per-episode values (``episode_values``). A seed
    is too close to call when ``|mean| <= z * se`` with ``se`` its standard error over the
    episodes (sample standard deviation / sqrt(n)); with one episode, or episodes all alike
    (``se = 0``), the sign of the mean decides."""
    n = np.shape(x)[1]
    mean, se = mean_se(x, axis=1)
    verdict, needed = [], []
    for m, s in zip(mean.tolist(), se.tolist()):
        close = s > 0 and abs(m) <= z * s
        verdict.append(CLOSE if close else KEPT if m <= 0 else BROKEN)
        needed.append(math.floor(n * (z * s / m) ** 2) + 1 if close and m != 0 else None)
    return SeedVerdicts(tuple(verdict), mean, se, tuple(needed))


def judge(C, ep_cost, constraint: Constraint) -> dict:
    """One constraint's verdict on a robustness test, as JSON: ``C`` and ``ep_cost`` (None:
    unknown) ``[seed, level, direction, episode]`` (level 0 the nominal kernel). The worst test
    kernel is the one whose mean of the deciding value (``episode_values``) over seeds and
    episodes is highest; at it and at the nominal kernel (level 0, direction 0): the mean C
    (``nominal``, ``worst``) and EpCost, each seed's verdict (``seed_verdicts``), their counts,
    ``*_kept`` (``overall``) and the test episodes that would decide the close seeds."""
    C = np.asarray(C, np.float64)
    x = episode_values(constraint, C, ep_cost)
    per_kernel = x.mean(axis=(0, 3))  # (level, direction)
    lvl, d = np.unravel_index(int(np.argmax(per_kernel)), per_kernel.shape)
    entry = {**constraint.as_json(), "seeds": int(C.shape[0]), "worst_level_index": int(lvl), "worst_direction": int(d)}
    # level 0's directions are one kernel, the nominal, tested on the same episodes (common random
    # numbers): its first direction holds them once, so the standard error is over n_test episodes
    at = {"nominal": lambda a: a[:, 0, 0], "worst": lambda a: a[:, lvl, d]}
    for where, pick in at.items():
        v = seed_verdicts(pick(x))
        counts = v.counts()
        entry[where] = float(pick(C).mean())
        if ep_cost is not None:
            entry[f"ep_cost_{where}"] = float(pick(np.asarray(ep_cost, np.float64)).mean())
        entry |= {f"{where}_kept": overall(counts), f"{where}_verdicts": list(v.verdict), f"{where}_counts": counts,
                  f"{where}_seeds_broken": counts[BROKEN], f"{where}_episodes_to_decide": v.most_needed(),
                  f"{where}_seed_means": v.mean.tolist(), f"{where}_seed_ses": v.se.tolist(),
                  f"{where}_seed_needed": list(v.needed)}  # fmt: skip
    return entry


ON_THE_LIMIT = 10_000  # test episodes: a close seed that needs more than these sits on the limit


def deciding(needed: int) -> str:
    """How many test episodes decide a close seed, in words: ``24 episodes decide``, or beyond
    ``ON_THE_LIMIT`` (a mean on the limit within float noise) that no practical test does."""
    if needed <= ON_THE_LIMIT:
        return f"{needed} episodes decide"
    return f"on the limit: over {ON_THE_LIMIT:,} episodes decide"


def close_calls(entry: dict, algo: str, name: str, kernels: dict, env: str | None = None) -> list[str]:
    """One line per seed too close to call in ``judge``'s ``entry`` (``algo``'s constraint ``name``):
    where, the seed, its mean ± standard error against the limit, and the command that decides it
    with more test episodes; ``kernels``: ``{"nominal": ..., "worst": ...}`` as ``rcmdp eval --kernel``
    reads them; ``env``: the run's environment, for a folder of several."""
    kind = Constraint(entry["kind"], entry["gamma_c"], entry["budget"])
    what, shift = ("EpCost", kind.budget) if kind.by_ep_cost else ("C", 0.0)  # the limit the means are against
    out = []
    for where in ("nominal", "worst") if entry.get("worst_level_index") else ("nominal",):  # level 0: nominal
        for seed, v in enumerate(entry.get(f"{where}_verdicts", ())):
            if v != CLOSE:
                continue
            mean, se = entry[f"{where}_seed_means"][seed], entry[f"{where}_seed_ses"][seed]
            needed = entry[f"{where}_seed_needed"][seed]
            side = "above" if mean > 0 else "under" if mean < 0 else "at"
            line = (f"{algo}, {name}, {'at the nominal kernel' if where == 'nominal' else 'on its worst kernel'}: seed "
                    f"{seed} {what} {mean + shift:.4g} ± {se:.2g}, {side} {shift:g}")  # fmt: skip
            if needed is not None and needed > ON_THE_LIMIT:
                line += f"; on the limit: {needed:,} episodes would decide it at this mean and spread"
            elif needed is not None:
                where_env = f" --env '{env}'" if env else ""
                cmd = f"rcmdp eval RUN_DIR{where_env} --algo '{algo}' --seed {seed}"
                line += f"; {needed} episodes decide it: {cmd} --kernel '{kernels[where]}' --n-episodes {needed}"
            out.append(line)
    return out


def said_of(kinds_: list[Constraint], gamma_c, names, episodes: dict) -> dict[str, str]:
    """Per constraint ``names[j]``, one seed's verdict over its episodes (``episodes["C"]`` and, where
    kept, ``episodes["EpCost"]``, ``[E, m]``) in words: ``too close to call (kept when EpCost <= 5; 24
    episodes decide)``; ``kinds_`` from ``kinds``, ``gamma_c`` each constraint's discount."""
    gamma_c, out = np.broadcast_to(np.asarray(gamma_c, np.float64), (len(names),)), {}
    for j, (name, kind) in enumerate(zip(names, kinds_)):
        kind = Constraint(kind.kind, float(gamma_c[j]), kind.budget)
        ep = episodes["EpCost"][:, j] if "EpCost" in episodes else None
        v = seed_verdicts(episode_values(kind, episodes["C"][:, j], ep)[None])
        needed = f"; {deciding(v.needed[0])}" if v.needed[0] is not None else ""
        out[name] = f"{v.verdict[0]} (kept when {kind.decides}{needed})"
    return out


def overall(counts: dict) -> bool | None:
    """Whether every seed keeps it (True), some seed breaks it (False), or neither is sure
    (None: no seed broken, some too close to call)."""
    return False if counts[BROKEN] else None if counts[CLOSE] else True


def counts_text(counts: dict, needed: int | None) -> str:
    """``1 kept, 1 broken, 1 too close (80 episodes decide)`` from ``SeedVerdicts.counts()``
    and ``most_needed()`` (the close count always said)."""
    text = f"{counts[KEPT]} kept, {counts[BROKEN]} broken, {counts[CLOSE]} too close"
    if counts[CLOSE]:
        text += f" ({deciding(needed)})" if needed is not None else " (a mean of exactly 0)"
    return text

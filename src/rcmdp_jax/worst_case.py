"""Worst-case search: projected gradient steps on the kernel parameters ``xi`` inside
the uncertainty box, for a trained deterministic policy (beyond the study's grid).

The robustness test (``evaluate``) looks at a grid: distortion levels x the ``2^n``
corner directions. Our kernels are differentiable, so the box can be *searched*:
starting from some points (the corners the grid found worst, the centre), each
search takes projected gradient steps of a Monte-Carlo objective over a batch of
episodes with common random numbers (the same keys at every step). Objectives:

* ``"return"``: minimise the discounted return ``V``;
* ``"cost<j>"``: maximise the discounted constraint value ``C_j``;
* ``"r_pen"``: minimise ``R_pen = V - lambda_max sum_j max(0, C_j)`` (docs/method.md §4).

Two gradient estimators of ``d[V, C]/d xi``, both from the kernel's distrax
distribution (no hand-written gradient):

* ``"score"``: the score function, as LTMA uses it,
  ``mean_e sum_t gamma^t (G^k_t - b_t) grad log p_xi(s_{t+1} | s_t, a_t)`` with ``G^k`` the
  reward-to-go of quantity ``k`` (reward or a constraint-cost) and ``b_t`` the mean of
  the other episodes' (a leave-one-out baseline: no bias, far less variance);
* ``"pathwise"``: reparameterised next states ``s' = mean(xi, s, a) + std * eps``
  (distrax's ``sample`` is that), differentiated through the whole episode
  (forward mode, ``jax.jacfwd``: ``xi`` has at most 6 entries, and no tape is kept). Through a long chaotic episode these gradients can explode:
  ``truncate = k`` lets them flow through at most ``k`` consecutive transitions
  (the state is a constant every ``k`` steps); the score function is the
  fallback. Terminations and discrete actions are not differentiable: pathwise
  gradients ignore how ``xi`` moves them (a bias; the score function has none).

The step is scale-free: ``xi <- Proj_U(xi -/+ eta_k kappa * g / max|kappa * g|)``
with ``g = kappa * grad`` and ``eta_k`` decaying from ``eta0`` to ``eta0 / 20``;
the best point seen (by its Monte-Carlo value) is kept, then re-evaluated on fresh
episodes, so the reported value is not biased by the search's own noise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax import box, stats
from rcmdp_jax.kernel_gradients import episode_quantities, has_density, mean_quantities, score_gradient
from rcmdp_jax.plugin import INT32_MAX, Number, check_choice, check_count, check_kind, refusal
from rcmdp_jax.rollout import Policy, reward_and_costs, value_discounts

ESTIMATORS = ("score", "pathwise")


OBJECTIVE_SETS = ("all", "costs")  # ``run.py --worst-case [all|costs]``


def objective_names(m: int, which: str = "all") -> tuple[str, ...]:
    """The objectives of an environment with ``m`` constraints: ``"all"``, or only the
    constraints' (``"costs"``: a search that asks only where each constraint is worst,
    at ``m / (m + 2)`` of the cost)."""
    if which not in OBJECTIVE_SETS:
        raise ValueError(f"objectives: {which!r} is not one of {', '.join(OBJECTIVE_SETS)}")
    costs = tuple(f"cost{j}" for j in range(m))
    return costs if which == "costs" else ("return", "r_pen") + costs


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """How each search runs (defaults: what ``run.py --worst-case`` uses)."""

    steps: int = 20  # projected gradient steps per start
    episodes: int = 16  # episodes per gradient (common random numbers)
    eval_episodes: int = 100  # fresh episodes that value the point found
    eta0: float = 0.5  # first step, as a fraction of the box half-width
    estimator: str = "score"
    truncate: int = 0  # pathwise: gradient window in transitions (0 = the whole episode)

    def validate(self) -> SearchConfig:
        check_choice("estimator", self.estimator, ESTIMATORS)
        for name in ("steps", "episodes", "eval_episodes"):
            check_count(name, getattr(self, name))
        if isinstance(self.truncate, bool) or not isinstance(self.truncate, int) or not 0 <= self.truncate <= INT32_MAX:
            raise refusal("truncate", "an integer in [0, 2**31 - 1] (0: the whole episode)", self.truncate)
        check_kind("eta0", self.eta0, Number(0.5, 0.0, open_low=True))
        return self


def value_and_jacobian(xi, env, env_params, policy, keys, gamma, horizon: int, estimator: str, truncate: int = 0):
    """Monte-Carlo ``[V, C_1..C_m]`` (mean over the episodes of ``keys``) at ``xi`` and
    its Jacobian ``[1 + m, *xi.shape]`` by ``estimator``."""
    run = lambda x: mean_quantities(x, env, env_params, policy, keys, gamma, horizon, truncate)
    if estimator == "pathwise":

        def mean_values(x):
            values = run(x)[0]
            return values, values  # differentiated, and passed through

        jac, values = jax.jacfwd(mean_values, has_aux=True)(xi)
        return values, jac
    values, traj = run(jax.lax.stop_gradient(xi))
    # every quantity's reward-to-go, masked after termination ([E, H, 1 + m]), less the
    # leave-one-out baseline per step: unbiased (it does not depend on the episode's own
    # transitions) and it removes the large common level of the returns-to-go. Forward
    # mode: with jacrev, XLA CPU (jaxlib 0.10.2) returned the reward's row for the cost's at
    # 20,000 episodes (docs/known_issues.md; tests/test_worst_case.py)
    per_step = reward_and_costs(traj) * traj.alive[..., None]
    gammas = value_discounts(env, gamma)  # each C_j by its gamma_c
    return values, score_gradient(env, env_params, xi, traj, per_step, gammas, jax.jacfwd, leave_one_out=True)


def objective(values: jax.Array, jac: jax.Array, name: str, lambda_max: float):
    """``(value to minimise, its gradient)`` of objective ``name`` from ``[V, C]`` and their Jacobian;
    ``name`` may be an index, traced (0: the return, ``1 + j``: ``cost<j>``), so that one search
    serves every objective (``adversary.search``)."""
    if not isinstance(name, str):
        sign = jnp.where(name == 0, 1.0, -1.0)  # the return minimised, a C_j maximised
        return sign * values[name], sign * jac[name]
    if name == "return":
        return values[0], jac[0]
    if name == "r_pen":
        violated = (values[1:] > 0).astype(jnp.float32)
        value = stats.r_pen(values[0], values[1:], lambda_max, jnp)
        grad = jac[0] - lambda_max * jnp.tensordot(violated, jac[1:], axes=1)
        return value, grad
    j = int(name.removeprefix("cost"))
    return -values[1 + j], -jac[1 + j]  # maximise C_j


def search(
    key, xi0, env, env_params, policy, name: str, cfg: SearchConfig, gamma, lambda_max, fresh_episodes: bool = True
):
    """One search from ``xi0`` for ``policy(obs, key) -> action`` (e.g. a deterministic
    ``rollout.Policy``): ``(xi found, [V, C] there on fresh episodes [1 + m], the
    objective along the way [steps])``; the objective is minimised (``-C_j`` for ``cost<j>``).
    The fresh episodes' ``[V, C]`` come per episode (``[eval_episodes, 1 + m]``), so the
    caller can score them as the robustness test does (e.g. ``R_pen`` per episode);
    ``fresh_episodes=False``: none are run (None in their place), for a caller that reads only
    the point (its program then holds no rollout for them)."""
    horizon = env.episode_length
    k_search, k_eval = jax.random.split(key)
    keys = jax.random.split(k_search, cfg.episodes)  # common random numbers: the same at every step
    xi_c, kappa = env_params.xi_c, env_params.kappa
    etas = cfg.eta0 * (1.0 / 20.0) ** (jnp.arange(cfg.steps, dtype=jnp.float32) / max(cfg.steps - 1, 1))

    def step(carry, eta):
        xi, best_xi, best = carry
        values, jac = value_and_jacobian(xi, env, env_params, policy, keys, gamma, horizon, cfg.estimator, cfg.truncate)
        value, grad = objective(values, jac, name, lambda_max)
        better = value < best
        best_xi = jnp.where(better, xi, best_xi)
        best = jnp.where(better, value, best)
        g = jnp.where(jnp.isfinite(grad), grad, 0.0) * kappa
        scale = jnp.max(jnp.abs(g))
        move = jnp.where(scale > 0, eta * kappa * g / jnp.where(scale > 0, scale, 1.0), 0.0)
        return (box.project(xi - move, xi_c, kappa), best_xi, best), value

    xi0 = box.project(jnp.where(jnp.isnan(xi0), xi_c, xi0), xi_c, kappa)  # a NaN entry: the centre's
    # one step more than ``steps``: the last point is judged too (by the same episodes; its
    # gradient and move are not used), one rollout in the program for every point judged
    (_, best_xi, _), history = jax.lax.scan(step, (xi0, xi0, jnp.float32(jnp.inf)), jnp.append(etas, 0.0))
    history = history[: cfg.steps]
    if not fresh_episodes:
        return best_xi, None, history
    fresh = jax.random.split(k_eval, cfg.eval_episodes)
    params = env_params.replace(xi=best_xi)
    totals = jax.vmap(lambda k: episode_quantities(k, env, params, policy, gamma, horizon)[0])(fresh)
    return best_xi, totals, history


@dataclasses.dataclass(frozen=True, eq=False)
class WorstCase:
    """``finder(actor_params, starts, rng) -> {name: {"xi": [S, K, *xi], "episodes": [S, K, E, 1 + m],
    "history": [S, K, steps]}}``: every objective searched from ``starts`` (``[S, K, *xi]``,
    per seed) for every seed's deterministic policy, vmapped over seeds x starts, in
    one program (``jax.jit(finder)``); ``episodes``: ``[V, C]`` of ``E`` fresh episodes
    at the point found."""

    env: Any
    env_params: Any
    actor: Any
    cfg: SearchConfig
    gamma: float
    lambda_max: float
    objectives: tuple[str, ...]

    def __call__(self, actor_params, starts, rng, gamma=None):
        """``gamma``: the discount (None: the config's; given, an argument of the program)."""
        gamma = self.gamma if gamma is None else gamma
        out = {}
        every = objective_names(self.env.num_constraints)
        for name in self.objectives:
            i = every.index(name)  # an objective's keys do not depend on which others are searched
            one = lambda ap, x0, k, name=name: search(
                k, x0, self.env, self.env_params, Policy(self.actor, ap, deterministic=True), name, self.cfg,
                gamma, self.lambda_max,
            )  # fmt: skip
            per_start = jax.vmap(one, in_axes=(None, 0, 0))
            n_seeds, n_starts = starts.shape[:2]
            keys = jax.random.split(jax.random.fold_in(rng, i), n_seeds * n_starts).reshape(n_seeds, n_starts, -1)
            xi, episodes, history = jax.vmap(per_start)(actor_params, starts, keys)
            out[name] = {"xi": xi, "episodes": episodes, "history": history}
        return out


def make_worst_case(config, search: SearchConfig | None = None, env_params=None, objectives: str = "all") -> WorstCase:
    """The ``WorstCase`` finder of ``config``'s deterministic policies (``objectives``:
    ``"all"`` or ``"costs"``, see ``objective_names``)."""
    from rcmdp_jax import envs
    from rcmdp_jax.networks import build_networks

    cfg = config.validate()
    chosen = search is not None
    search = (search or SearchConfig()).validate()
    objective_names(0, objectives)  # a clear error before anything is built
    env, default_params = envs.make(cfg.env)
    if not chosen and not has_density(env):  # no search given, a kernel without a density (brax's
        search = dataclasses.replace(search, estimator="pathwise")  # physics): its pathwise gradient
    actor, _ = build_networks(cfg, env)
    params = default_params if env_params is None else env_params
    env.check_estimator(params, search.estimator)
    return WorstCase(env, params, actor, search, cfg.hparams.gamma, env.lambda_max,
                     objective_names(env.num_constraints, objectives))  # fmt: skip


def corner_starts(env, env_params, grid_values: np.ndarray | None = None, max_corners: int = 4) -> np.ndarray:
    """Start points ``[S, K, *xi]``: the centre and the box corners; with more than
    ``max_corners`` corners, the ``max_corners`` the grid found worst for each seed
    (``grid_values`` ``[S, D]``: each seed's value at level 1 per direction, lower = worse)."""
    xi_c, kappa = np.asarray(env_params.xi_c, np.float32), np.asarray(env_params.kappa, np.float32)
    corners = box.corners(xi_c, kappa)
    n_seeds = 1 if grid_values is None else grid_values.shape[0]
    if len(corners) <= max_corners or grid_values is None:
        chosen = np.broadcast_to(corners[None], (n_seeds,) + corners.shape)
    else:
        worst = np.argsort(grid_values, axis=1)[:, :max_corners]
        chosen = corners[worst]
    centre = np.broadcast_to(xi_c, (n_seeds, 1) + xi_c.shape)
    return np.concatenate([centre, chosen], axis=1).astype(np.float32)


def compare_with_grid(V: np.ndarray, C: np.ndarray, found: dict, lambda_max: float, grid_xi: np.ndarray) -> dict:
    """Per seed, the worst value the grid found and the worst the search found, for the
    robustness test's quantities scored as the test scores them (per episode, then the
    mean over a kernel's episodes): ``Return`` (lowest ``V``), ``R_pen`` (lowest
    ``V - lambda_max sum_j max(0, C_j)``) and each ``C<j>`` (highest); those whose
    objective was searched (all, or only the ``C<j>`` after ``objectives="costs"``).

    ``V`` ``[S, L, D, E]``, ``C`` ``[S, L, D, E, m]`` (the sweep), ``found`` a
    ``WorstCase`` result (NumPy), ``grid_xi`` ``[L, D, *xi]`` the test kernels.
    Returns ``{metric: {"grid": [S], "search": [S], "grid_xi": [S, *xi], "search_xi": [S, *xi],
    "lower_is_worse": bool, "beyond": [S] (``beyond_grid``)}}``."""
    m = C.shape[-1]
    flat_xi = grid_xi.reshape((-1,) + grid_xi.shape[2:])

    def r_pen(v, c):
        return stats.penalised_returns(v, c, lambda_max)["R_pen"].mean(-1)

    def worst(values, lower):  # values [S, N] -> index of each seed's worst
        return np.argmin(values, 1) if lower else np.argmax(values, 1)

    s = V.shape[0]
    metrics = {
        "Return": ("return", lambda v, c: v.mean(-1), True),
        "R_pen": ("r_pen", r_pen, True),
        **{f"C{j}": (f"cost{j}", lambda v, c, j=j: c[..., j].mean(-1), False) for j in range(m)},
    }
    out = {}
    for metric, (objective, score, lower) in metrics.items():
        if objective not in found:
            continue
        grid_values = score(V, C).reshape(s, -1)  # [S, L * D]
        gi = worst(grid_values, lower)
        ep = found[objective]["episodes"]  # [S, K, E, 1 + m]
        search_values = score(ep[..., 0], ep[..., 1:])  # [S, K]
        si = worst(search_values, lower)
        rows = np.arange(s)
        out[metric] = {
            "grid": grid_values[rows, gi],
            "search": search_values[rows, si],
            "grid_xi": flat_xi[gi],
            "search_xi": np.asarray(found[objective]["xi"])[rows, si],
            "lower_is_worse": lower,
        }
        out[metric]["beyond"] = beyond_grid(out[metric]["grid"], out[metric]["search"], lower)
    return out


BEYOND_RTOL = 1e-5  # float32 episode means in another summation order differ by ~1e-7 of their size


def beyond_grid(grid, search, lower_is_worse: bool) -> np.ndarray:
    """Per seed, whether the search found a worse value than the grid by more than float
    rounding: beyond ``BEYOND_RTOL`` of the larger magnitude (and 1e-6 near zero)."""
    g, f = np.asarray(grid, np.float64), np.asarray(search, np.float64)
    worse = f < g if lower_is_worse else f > g
    return worse & (np.abs(f - g) > BEYOND_RTOL * np.maximum(np.abs(f), np.abs(g)) + 1e-6)

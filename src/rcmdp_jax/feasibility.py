"""The feasibility check: can the constraints be kept on the uncertainty box at all?

For each constraint ``j`` of an environment: train *cost-minimising* policies (the reward
replaced by ``-c_j``: ``envs.cost_minimising``; no constraint rule) robust against the box
(``corners`` where the box has at most 8 parameters, else ``worst-of-n``), a few seeds; run
each on every test kernel of the robustness test (docs/method.md §4) and keep, per kernel,
the least ``C_j``; search the box by gradient steps (``rcmdp_jax.worst_case``) for the best
policy's worst kernel; optionally add a controller of the user's own as a second witness.
``feasibility_report.summarise`` turns the numbers into the verdict.

The result is an upper bound on the least value a policy can reach: "not keepable" means
no policy found keeps it. ``check_feasibility(name)`` returns the report as a dict (what
``rcmdp feasibility`` writes to ``feasibility.json``).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax import cost_check, envs
from rcmdp_jax.adversary.corners import MAX_PARAMS
from rcmdp_jax.config import BudgetRounded
from rcmdp_jax.envs.domain import budget_steps
from rcmdp_jax.evaluate import DISTORTION_LEVELS, make_eval, policy_sweep
from rcmdp_jax.feasibility_report import mean_and_se, summarise
from rcmdp_jax.kernel_text import kernel_names
from rcmdp_jax.plugin import INT32_MAX, Number, check_choice, check_count, check_kind, check_seed
from rcmdp_jax.rollout import cost_discounts
from rcmdp_jax.verdict import kinds
from rcmdp_jax.worst_case import SearchConfig, corner_starts, make_worst_case

LEARNERS = ("ppo", "mdpo")
BUDGET_FACTOR = 3  # a cost-minimising policy's default budget: 3 x the environment's quick one
PREFIX = "min-cost"  # the cost-minimising environments' names: "min-cost<j>:<env>"


@dataclasses.dataclass(frozen=True)
class FeasibilityConfig:
    """How the check runs (defaults: what ``rcmdp feasibility`` uses)."""

    seeds: int = 3
    steps: int | None = None  # policy steps per policy (None: default_steps, 3 x the short budget)
    learner: str = "ppo"
    method: str | None = None  # robust method (None: corners if the box has <= 8 parameters, else worst-of-n)
    n_test: int | None = None  # episodes per test kernel (None: the environment's own)
    margin: float = 0.0  # keepable: least C <= -margin
    search: SearchConfig | None = dataclasses.field(default_factory=SearchConfig)  # None: grid only
    seed: int = 0

    def validate(self) -> FeasibilityConfig:
        for field in ("seeds", "steps", "n_test"):
            v = getattr(self, field)
            if v is None and field != "seeds":
                continue
            v = int(v) if isinstance(v, np.integer) else v
            if field == "steps" or not isinstance(v, int) or v <= INT32_MAX:  # more seeds or episodes: the memory
                check_count(f"feasibility: {field}", v)  # check names them; the train step counts steps in int32
        check_choice("feasibility: learner", self.learner, LEARNERS)
        from rcmdp_jax import adversary

        if self.method is not None:
            check_choice("feasibility: method", self.method, adversary.names())
        check_kind("feasibility: margin", self.margin, Number(0.0, 0.0))
        check_seed("feasibility: seed", self.seed)
        if self.search is not None and not isinstance(self.search, SearchConfig):
            raise TypeError(f"feasibility: search must be a rcmdp_jax.worst_case.SearchConfig or None (grid only), "
                            f"got {type(self.search).__name__}")  # fmt: skip
        if self.search is not None:
            self.search.validate()
        return self


def has_costs(name: str) -> bool:
    """Whether environment ``name`` has constraint costs (a gymnax id named without costs
    carries a placeholder constraint that is always 0)."""
    if name.startswith(envs.GYMNAX_PREFIX) and not envs.gymnax_has_costs(name):
        return False
    return envs.spec(name).build().num_constraints >= 1


def cost_env(name: str, j: int) -> str:
    """Register (in this process) and return the name of ``name``'s environment whose reward
    is ``-c_j``: the same spec, learner settings and test episodes."""
    spec = envs.spec(name)
    own = f"{PREFIX}{j}:{name}"
    envs.register(own, dataclasses.replace(spec, factory=lambda: envs.cost_minimising(spec.build(), j)))
    return own


def default_method(env) -> str:
    """``corners`` (training against the box's worst corner) where the box has at most
    ``MAX_PARAMS`` parameters, else ``worst-of-n``."""
    return "corners" if env.num_kernel_params <= MAX_PARAMS else "worst-of-n"


def default_steps(spec) -> int:
    """The policy steps of a cost-minimising policy when none are given: ``BUDGET_FACTOR``
    times the environment's quick budget (its short one where it has none; docs/feasibility.md,
    "Measured")."""
    return BUDGET_FACTOR * budget_steps(spec.learner.budgets, "quick")


def check_controller(controller, env) -> None:
    """A controller must be a function of one observation returning an action of the
    environment's shape (``jax.eval_shape``: nothing runs); else one line."""
    if controller is None:
        return
    if not callable(controller):
        raise TypeError(
            f"feasibility: controller must be a function of the observation, got {type(controller).__name__}"
        )
    obs = jnp.zeros((env.obs_dim,), jnp.float32)
    try:
        shape = jax.eval_shape(controller, obs).shape
    except Exception as err:  # a user's function: any error it raises on an observation
        raise ValueError(f"feasibility: controller(obs) failed on an observation of shape {obs.shape}: {err}") from None
    want = () if env.discrete else (env.action_dim,)
    if tuple(shape) != want:
        raise ValueError(f"feasibility: controller(obs) must return an action of shape {want}, got {tuple(shape)}")


def train_config(name: str, j: int, cfg: FeasibilityConfig):
    """The config that trains constraint ``j``'s cost-minimising policies."""
    from rcmdp_jax import preset

    own = cost_env(name, j)
    env, _ = envs.make(own)
    method = cfg.method or default_method(env)
    overrides = {} if cfg.steps is None else {"total_timesteps": int(cfg.steps)}
    with warnings.catch_warnings():  # the budget in whole iterations: settings["steps"] says what ran
        warnings.simplefilter("ignore", BudgetRounded)
        return preset(own, f"{cfg.learner.upper()}+{method}", **overrides)


def check_sizes(name: str, cfg: FeasibilityConfig) -> None:
    """The runner's checks of a plan's sizes (``sizes``: int32 counts, this machine's memory)
    on each constraint's training and test, before anything is trained."""
    from rcmdp_jax.sizes import PlanError, check_counts, check_memory

    configs = {}
    for j in range(int(envs.make(name)[0].num_constraints)):
        config = train_config(name, j, cfg)
        try:
            check_counts(config, f"feasibility on {name}")
        except PlanError as err:  # the runner's words; the check's option is --steps
            raise ValueError(str(err).replace("--set total_timesteps:", "--steps:")) from None
        configs[config.env] = {config.name: config}
    try:
        check_memory(configs, cfg.seeds, cfg.n_test)
    except PlanError as err:  # said in the check's options: --seeds and --n-test (the sizes are the preset's)
        need = str(err).partition(" need about ")[2].partition(", mostly for")[0]
        raise ValueError(f"feasibility on {name}: {cfg.seeds} seed(s) per constraint need about {need}; use fewer "
                         "seeds (--seeds) or fewer test episodes (--n-test)") from None  # fmt: skip
    check_method_env(name, config)  # the constraints' configs differ in their reward only


def check_method_env(name: str, config) -> None:
    """The robust method's own checks of the environment (``presets.check_plugins_env``: LTMA's score
    gradient on brax's deterministic physics, corners beyond 8 parameters), before anything
    is trained, as the runner makes them."""
    from rcmdp_jax import adversary
    from rcmdp_jax.presets import check_plugins_env

    try:
        check_plugins_env(config)
    except ValueError as err:
        raise ValueError(f"feasibility: method={adversary.method_of(config)!r} on {name}: {err}") from None


def learned(name: str, j: int, cfg: FeasibilityConfig, key):
    """Train ``cfg.seeds`` cost-minimising policies for constraint ``j``: ``(config, actor
    params with a seed axis, which seeds trained to finite values)``."""
    from rcmdp_jax import make_train

    config = train_config(name, j, cfg)
    result = jax.jit(jax.vmap(make_train(config)))(jax.random.split(key, cfg.seeds))
    leaves = [np.asarray(x).reshape(cfg.seeds, -1) for x in jax.tree.leaves(result.state.params)]
    ok = np.all([np.isfinite(x).all(1) for x in leaves], axis=0)  # a diverged seed is left out
    return config, result.state.params["actor"], ok


def check_feasibility(name: str, config: FeasibilityConfig | None = None, controller: Callable | None = None,
                      progress: Callable[[str], None] | None = None, done: tuple = (),
                      on_row: Callable[[int, dict], None] | None = None) -> dict:  # fmt: skip
    """The feasibility report of environment ``name`` (any name ``envs.make`` takes) with
    its box and costs: ``{"env", "levels", "constraints": [one ``summarise`` dict each],
    "settings"}``. ``controller(obs) -> action`` (jit-able) is a second witness. ``done``:
    the first constraints' rows of an interrupted check (skipped; ``rcmdp feasibility
    --resume``); ``on_row(j, row)`` is called as each constraint's row is found."""
    if not isinstance(name, str):
        raise TypeError(f"feasibility: name must be an environment name (str), got {type(name).__name__}")
    if config is not None and not isinstance(config, FeasibilityConfig):
        raise TypeError(f"feasibility: config must be a FeasibilityConfig or None, got {type(config).__name__}")
    for what, fn in (("progress", progress), ("on_row", on_row)):
        if fn is not None and not callable(fn):
            raise TypeError(f"feasibility: {what} must be a function of one message (str) or None, got "
                            f"{type(fn).__name__}")  # fmt: skip
    cfg = (config or FeasibilityConfig()).validate()
    say = progress or (lambda _: None)
    envs.check_name(name)
    if not has_costs(name):
        raise ValueError(f"feasibility: {name} has no constraint costs to check (name them, e.g. --costs FIELD:LIMIT)")
    env, params = envs.make(name)
    m = int(env.num_constraints)
    check_controller(controller, env)
    spec = envs.spec(name)
    quiet = cfg.steps is None  # the default budget: its rounding to whole iterations goes unsaid
    cfg = dataclasses.replace(cfg, steps=cfg.steps or default_steps(spec))
    check_sizes(name, cfg)
    cost_check.warn(name, progress)  # a cost no policy changes: said before anything trains
    n_test = int(cfg.n_test or spec.n_test)
    names = envs.cost_names(name, m)
    levels = np.asarray(DISTORTION_LEVELS, np.float64)
    grid = env.test_kernels(levels, params)
    labels, xi_c = kernel_names(name, np.shape(params.xi_c)), np.asarray(params.xi_c)
    key = jax.random.PRNGKey(cfg.seed)
    witness = witness_se = None
    if controller is not None:
        say("the controller on every test kernel")
        policy = lambda obs, _key: controller(obs)
        out = jax.jit(lambda k: policy_sweep(env, grid, policy, n_test, env.gamma, k))(jax.random.fold_in(key, 7))
        witness, witness_se = mean_and_se(np.asarray(out["C"]), axis=2)  # [L, D, m] each
        if not np.isfinite(witness).all():  # NaN actions, or episodes that diverge: no witness of anything
            say("the controller's episodes are not finite (NaN or inf) on some test kernels: it is not used as a "
                "witness")  # fmt: skip
            witness = witness_se = None
    rows = []
    for j in range(m):
        if j < len(done):  # found before an interruption: each constraint has keys of its own
            rows.append(done[j])
            continue
        k_train, k_test, k_search = jax.random.split(jax.random.fold_in(key, j), 3)
        say(f"{names[j]}: training {cfg.seeds} cost-minimising {cfg.learner.upper()} policies")
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter("ignore", BudgetRounded)
            config, actors, ok = learned(name, j, cfg, k_train)
        if not ok.any():
            raise FloatingPointError(f"feasibility: every seed's training diverged on {names[j]} (NaN)")
        sweep = make_eval(config, n_test=n_test, env_params=params)
        out = jax.jit(sweep)(actors, k_test)
        C, se = (x[ok] for x in mean_and_se(np.asarray(out["C"])[..., j]))  # [S', L, D]
        ep_cost = np.asarray(out["EpCost"])[..., j].mean(-1)[ok]  # [S', L, D]: the undiscounted episode cost
        actors = jax.tree.map(lambda x: x[np.flatnonzero(ok)], actors)
        found = None
        if cfg.search is not None:
            say(f"{names[j]}: gradient search of the box for the best policy's worst kernel")
            found = search_worst(config, env, params, actors, C, j, cfg.search, k_search, n_test)
        w, w_se = (None, None) if witness is None else (witness[..., j], witness_se[..., j])
        rows.append(summarise(C, levels, np.asarray(grid.xi), xi_c, labels, names[j], cfg.margin, w, found, se, w_se))
        gamma_c = np.broadcast_to(np.asarray(cost_discounts(env, env.gamma), np.float64), (m,))[j]
        kind = kinds(env)[j]  # what C is; EpCost only where it is read, a budget of unsafe steps
        rows[-1] |= {"gamma_c": float(gamma_c), "horizon": int(env.episode_length), "kind": kind.kind}
        if kind.kind == "budget":
            rows[-1] |= {"budget": kind.budget, "learned_ep_cost": best_policy_ep_cost(C, ep_cost)}
        if on_row is not None:
            on_row(j, rows[-1])
    ran = train_config(name, 0, cfg)  # what ran: the budget in whole iterations (as run.json's will_run)
    settings = dataclasses.asdict(cfg) | {"n_test": n_test, "method": cfg.method or default_method(env),
                                          "steps": ran.num_iterations * ran.batch_size}  # fmt: skip
    settings |= {"gamma": float(env.gamma), "horizon": int(env.episode_length)}
    return {"env": name, "levels": levels.tolist(), "constraints": rows, "settings": settings,
            "controller": controller is not None}  # fmt: skip


def best_policy_ep_cost(C: np.ndarray, ep_cost: np.ndarray) -> dict:
    """The episode cost (EpCost) of the learned policy whose worst ``C`` on the grid is least
    (``C``, ``ep_cost`` ``[S, L, D]``): at the nominal kernel and at that policy's worst test kernel."""
    flat = C.reshape(C.shape[0], -1)
    best = int(np.argmin(flat.max(1)))
    at = int(np.argmax(flat[best]))
    return {"nominal": float(ep_cost[best, 0, 0]), "worst_kernel": float(ep_cost[best].reshape(-1)[at])}


def search_worst(config, env, params, actors, C, j: int, search: SearchConfig, key, n_test: int | None = None
                 ) -> dict | None:  # fmt: skip
    """The gradient search's highest ``C_j`` for the policy whose grid worst is least,
    started from the centre and the corners the grid found worst; None where the kernel
    allows no search (e.g. a kernel without a density for the score estimator). The kernel
    is chosen by the search's own episodes; with ``n_test``, its ``C`` and standard error are
    then measured afresh on ``max(n_test, search.eval_episodes)`` episodes (``episodes``), so
    that more test episodes narrow the one-policy value, whichever of grid and search gives it."""
    best = int(np.argmin(C.reshape(C.shape[0], -1).max(1)))
    from rcmdp_jax.kernel_gradients import has_density

    if search.estimator == "score" and not has_density(env):
        search = dataclasses.replace(search, estimator="pathwise")  # a kernel without a density (brax)
    try:
        finder = make_worst_case(config, search, env_params=params, objectives="costs")
    except ValueError:
        return None
    finder = dataclasses.replace(finder, objectives=(f"cost{j}",))
    starts = corner_starts(finder.env, params, -C[best : best + 1, -1].reshape(1, -1))
    one = jax.tree.map(lambda x: x[best : best + 1], actors)
    found = jax.jit(finder)(one, starts, key)[f"cost{j}"]
    values, se = mean_and_se(np.asarray(found["episodes"])[0, :, :, 1 + j])  # [K] each
    k = int(np.argmax(values))
    xi = np.asarray(found["xi"])[0, k]
    if n_test is None:
        return {"C": float(values[k]), "se": float(se[k]), "xi": xi}
    n = max(int(n_test), int(search.eval_episodes))  # never fewer episodes than the search's own
    C_k, se_k = measure_kernel(config, params, jax.tree.map(lambda x: x[0], one), xi, j, n, jax.random.fold_in(key, 1))
    return {"C": C_k, "se": se_k, "xi": xi, "episodes": n}


def measure_kernel(config, params, actor_params, xi, j: int, n_test: int, key) -> tuple[float, float]:
    """Constraint ``j``'s value of one deterministic policy on the kernel ``xi``: the mean and
    standard error over ``n_test`` fresh episodes."""
    from rcmdp_jax.rollout import Policy

    sweep = make_eval(config, n_test=n_test, env_params=params)
    kernel = jax.tree.map(lambda x: jnp.asarray(x)[None, None], params.replace(xi=jnp.asarray(xi)))

    def run(actor_params, k):
        policy = Policy(sweep.actor, actor_params, deterministic=True)
        return policy_sweep(sweep.env, kernel, policy, n_test, sweep.gamma, k)["C"][0, 0, :, j]

    mean, se = mean_and_se(np.asarray(jax.jit(run)(actor_params, key)))
    return float(mean), float(se)

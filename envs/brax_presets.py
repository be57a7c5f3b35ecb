"""``brax:`` environment names: any brax environment made robust-constrained, and presets.

A name is ``brax:NAME`` (a preset's box, costs and backend), optionally followed by
``@uncertain=FIELD:WIDTH,...`` (``pole_mass:0.3`` ±30 %, ``friction:abs:0.1``),
``@costs=ITEM,...`` and ``@backend=PIPELINE``. A cost item is a preset's named cost,
``speed:LIMIT`` (``speed - LIMIT``, the root body's speed; smooth) or ``velocity:LIMIT`` /
``velocity:LIMIT:BUDGET`` (Safety-Gymnasium's ``1[speed > LIMIT]`` with ``BUDGET`` such steps
per episode allowed: ``envs.indicator``). A brax env without a preset needs ``@uncertain``; without costs it carries one zero
cost (unconstrained algorithms only). Nothing here imports brax until an env is built.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from rcmdp_jax.envs.domain import DomainSpec, LearnerSpec, learner_spec
from rcmdp_jax.envs.gymnax_inputs import name_option

from rcmdp_jax.plugin import closest

PREFIX = "brax:"
PLANAR = ("inverted_pendulum", "inverted_double_pendulum", "hopper", "halfcheetah", "walker2d", "swimmer")
BACKENDS = ("positional", "generalized", "spring", "mjx")


@dataclasses.dataclass(frozen=True)
class BraxPreset:
    env_name: str
    backend: str
    uncertain: dict[str, Any]  # field -> relative half-width
    costs: dict[str, str]  # name -> cost item (speed:L, velocity:L[:B])
    default_costs: tuple[str, ...]
    episode_length: int
    gamma: float = 0.99
    lambda_max: float = 50.0
    learner: LearnerSpec = dataclasses.field(default_factory=LearnerSpec)
    n_test: int = 10
    min_episode_length: int | None = None


def _learner(short: int, lr: float, **extra) -> LearnerSpec:
    """A preset's learner settings (docs/brax_envs.md: the sweep that chose them)."""
    return learner_spec(dict(budgets={"short": short, "long": 10 * short}, hp=dict(lr=lr, eta_xi=1e-3), **extra))


PRESETS: dict[str, BraxPreset] = {
    # learning rate and limit: the sweeps of docs/brax_envs.md, one per pendulum (the learning
    # rate that loses least over PPO-Lag and MDPO-Lag; the limit from unconstrained PPO's speeds)
    "inverted_pendulum": BraxPreset(
        "inverted_pendulum", "positional", {"pole_mass": 0.5, "gear": 0.2},
        {"speed": "speed:0.1"}, ("speed",), episode_length=100, min_episode_length=2,
        learner=_learner(30_000, 3e-4),
    ),
    "inverted_double_pendulum": BraxPreset(
        "inverted_double_pendulum", "positional", {"pole_mass": 0.3, "pole2_mass": 0.3},
        {"speed": "speed:0.15"}, ("speed",), episode_length=100, min_episode_length=2,
        learner=_learner(30_000, 1e-3),
    ),
    # GPU workloads (experiments/brax_gpu.sh): Safety-Gymnasium's v1 velocity limits, OmniSafe's
    # budget of 25 cost per 1000-step episode
    "hopper": BraxPreset(
        "hopper", "positional", {"torso_mass": 0.3, "friction": 0.3},
        {"velocity": "velocity:0.7402:25"}, ("velocity",), episode_length=1000, min_episode_length=10,
        learner=_learner(5_000_000, 3e-4),
    ),
    "halfcheetah": BraxPreset(
        "halfcheetah", "positional", {"torso_mass": 0.3, "friction": 0.3},
        {"velocity": "velocity:3.2096:25"}, ("velocity",), episode_length=1000,
        learner=_learner(5_000_000, 3e-4),
    ),
}  # fmt: skip


def known_envs() -> tuple[str, ...]:
    """brax's registered environment names (imports brax)."""
    from rcmdp_jax.envs.brax_adapter import import_brax

    return tuple(sorted(import_brax()[1]._envs))


def _cost_item(item: str, name: str) -> tuple[str, float, ...]:
    """``(kind, LIMIT[, BUDGET])`` of a ``speed:LIMIT`` / ``velocity:LIMIT[:BUDGET]`` item:
    finite numbers >= 0 (a speed is never below 0: a negative limit can never be kept)."""
    import math

    from rcmdp_jax.envs.gymnax_inputs import QUOTE_HINT

    kind, colon, rest = item.partition(":")
    parts = rest.split(":")
    ok = colon and kind in ("speed", "velocity") and len(parts) <= (2 if kind == "velocity" else 1)
    try:
        nums = [float(x) for x in parts] if ok else []
    except ValueError:
        ok = False
    if not ok or not all(math.isfinite(x) and abs(x) <= 3.4028235e38 for x in nums):
        raise ValueError(f"costs: {item!r} — choose {', '.join(PRESETS[name].costs) + ', ' if name in PRESETS else ''}"
                         "speed:LIMIT (speed - LIMIT) or velocity:LIMIT[:BUDGET] (1 when speed > LIMIT, BUDGET "
                         f"such steps per episode allowed), finite numbers; {QUOTE_HINT}")  # fmt: skip
    if min(nums) < 0:
        raise ValueError(f"costs: {item!r} — the limit and the budget must be >= 0 (a speed is never below 0)")
    return (kind, *nums)


@functools.cache
def parse_brax_name(name: str) -> tuple[BraxPreset, dict[str, Any], tuple[str, ...], str]:
    """``(preset, uncertain, cost items, backend)`` of a ``brax:`` name (module docstring)."""
    from rcmdp_jax.envs.gymnax_inputs import check_cost_items, parse_width, repeated_cost

    if not isinstance(name, str) or not name.startswith(PREFIX):
        raise ValueError(f"{name!r} is not a brax name (brax:NAME)")
    base, *options = name[len(PREFIX) :].split("@")
    if base in PRESETS:
        pre = PRESETS[base]
    else:
        if base not in known_envs():
            raise ValueError(f"unknown brax environment {base!r}{closest(base, known_envs())}; presets: {', '.join(PREFIX + k for k in PRESETS)}; "
                             f"other brax envs (with --uncertain): {', '.join(sorted(set(known_envs()) - set(PRESETS)))}")  # fmt: skip
        pre = BraxPreset(base, "positional", {}, {}, (), episode_length=1000, min_episode_length=1)
    uncertain, costs, backend, seen = dict(pre.uncertain), pre.default_costs, pre.backend, set()
    for opt in options:
        key, value = name_option(name, opt, ("uncertain", "costs", "backend"), seen,
                                 "@uncertain=FIELD:WIDTH,..., @costs=ITEM,... and @backend=PIPELINE")  # fmt: skip
        items = [v.strip() for v in value.split(",")]
        if key == "backend":
            if value not in BACKENDS:
                raise ValueError(f"backend: {value!r} — choose one of {', '.join(BACKENDS)}")
            backend = value
        elif key == "costs":
            check_cost_items(items, pre.costs, "speed:0.1")
            # the value each names: speed:1 and speed:1.0 (or a preset's name and its item) are one constraint
            if why := repeated_cost(items, lambda c: _cost_item(pre.costs.get(c, c), base)):
                raise ValueError(why)
            costs = tuple(items)
        else:
            uncertain = {}
            for item in items:
                field, colon, raw = item.partition(":")
                if not colon or not field or field in uncertain:
                    raise ValueError(f"uncertain: {item!r} — write FIELD:WIDTH once per field, e.g. pole_mass:0.3")
                uncertain[field] = parse_width(field, raw)
    if not uncertain:
        raise ValueError(f"{PREFIX}{base} has no preset box: name its uncertain fields with --uncertain FIELD=WIDTH,... "
                         "(LINK_mass, friction, damping, gear)")  # fmt: skip
    return pre, uncertain, costs, backend


def cost_fn(pre: BraxPreset, item: str):
    """The cost function of a name's cost item."""
    from rcmdp_jax.envs.brax_wrapper import speed_cost, velocity_cost

    kind, _, rest = pre.costs.get(item, item).partition(":")
    nums = [float(x) for x in rest.split(":")]
    planar = pre.env_name in PLANAR
    return speed_cost(nums[0], planar) if kind == "speed" else velocity_cost(*nums, planar=planar)


def cost_names(costs: tuple[str, ...]) -> tuple[str, ...]:
    from rcmdp_jax.envs.gymnax_any import NO_COSTS

    return costs or (NO_COSTS,)


def has_costs(name: str) -> bool:
    return bool(parse_brax_name(name)[2])


def domain_spec(name: str) -> DomainSpec:
    """The ``DomainSpec`` of a ``brax:`` name (imports nothing of brax for a preset)."""
    pre, uncertain, costs, _ = parse_brax_name(name)
    length = pre.episode_length
    return DomainSpec(factory=functools.partial(make_brax, name), gamma=pre.gamma, lambda_max=pre.lambda_max,
                      episode_length=length, min_episode_length=pre.min_episode_length or length,
                      learner=pre.learner, n_test=pre.n_test, cost_names=cost_names(costs),
                      kernel_size=len(uncertain))  # fmt: skip


def build(name: str):
    from rcmdp_jax.envs.brax_adapter import import_brax
    from rcmdp_jax.envs.brax_wrapper import robustify_brax
    from rcmdp_jax.envs.gymnax_any import NO_COSTS, zero_cost

    pre, uncertain, costs, backend = parse_brax_name(name)
    env = import_brax()[1].get_environment(pre.env_name, backend=backend)
    fns = {c: cost_fn(pre, c) for c in costs} or {NO_COSTS: zero_cost}
    return robustify_brax(env, uncertain, fns, episode_length=pre.episode_length, gamma=pre.gamma,
                          lambda_max=pre.lambda_max, min_episode_length=pre.min_episode_length,
                          name=f"Robust-brax-{pre.env_name}")  # fmt: skip


_CACHE: dict[str, Any] = {}


def make_brax(name: str):
    """The ``RobustBrax`` of a ``brax:`` name (one instance per name), built in a thread of its
    own, where JAX's trace starts clean: asked for inside a trace (``make_train`` under jit), its
    arrays are concrete still, and its shape checks (``jax.eval_shape`` of brax's reset) are
    traced as in any jit. Built under ``jax.ensure_compile_time_eval`` instead, those ran op by
    op on the system's constant arrays, each op a small compiled program: ~400 for an mjx env."""
    if name not in _CACHE:
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            _CACHE[name] = pool.submit(build, name).result()
    return _CACHE[name]


def check(name: str) -> None:
    """Parse ``name`` and build its environment (fields and costs checked; imports brax)."""
    make_brax(name)


def brax_name(env: str, uncertain: str | None = None, costs: str | None = None, backend: str | None = None) -> str:
    """The canonical name of ``brax:NAME`` with the CLI's ``--uncertain FIELD=WIDTH,...`` and ``--costs``."""
    from rcmdp_jax.envs.gymnax_inputs import with_options

    name = with_options(env, "pole_mass=0.3", uncertain, costs)
    if backend:
        name += f"@backend={backend}"
    check(name)
    return name

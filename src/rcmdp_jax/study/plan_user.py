"""The plan's part for environments outside the study: ``--env PACKAGE.MODULE:NAME`` /
``FILE.py:NAME`` loaded (``rcmdp_jax.study.user_env``), and the algorithms an environment
without constraint costs can run."""

from __future__ import annotations

import sys

from rcmdp_jax.study.errors import PlanError


def load_user_env(args) -> str:
    """``--env PACKAGE.MODULE:NAME`` / ``FILE.py:NAME``: the user's environment, loaded and
    registered (its source goes into run.json)."""
    from rcmdp_jax.study import user_env

    if any(getattr(args, k, None) is not None for k in ("uncertain", "costs", "noise")):
        raise PlanError(f"--uncertain, --costs and --noise apply to a gymnax environment (--env gymnax:ID); "
                         f"{args.env} brings its own box, costs and noise")  # fmt: skip
    try:
        return user_env.load_spec(args.env)[0]
    except ValueError as err:
        raise PlanError(f"--env {args.env}: {err}") from None


def keep_constrained(args, envs_: list[str], algos: list[str]) -> list[str]:
    """An environment without constraint costs (a gymnax id named without --costs) runs
    the unconstrained algorithms only: ``--algos all`` is cut to them, a named
    constrained algorithm is refused."""
    from rcmdp_jax import envs
    from rcmdp_jax.presets import parse_algorithm, split_variant

    bare = [e for e in envs_ if e.startswith((envs.GYMNAX_PREFIX, envs.BRAX_PREFIX)) and not envs.gymnax_has_costs(e)]
    if not bare:
        return algos
    constrained = [a for a in algos if parse_algorithm(split_variant(a)[0])[1] != "none"]
    if constrained and args.algos != "all":
        raise PlanError(f"--env {args.env} has no constraint costs, so {', '.join(constrained)} cannot run; give "
                         "--costs FIELD:LIMIT,... or choose unconstrained algorithms (MCPMD, PPO, MDPO, RMCPMD, "
                         "PPO-Robust, MDPO-Robust)")  # fmt: skip
    if constrained:
        print(f"note: --env {args.env} has no constraint costs (--costs): the {len(algos) - len(constrained)} "
              "unconstrained algorithms run", file=sys.stderr)  # fmt: skip
    return [a for a in algos if a not in constrained]

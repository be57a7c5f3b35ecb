"""Constraints that cannot bind: a cost that does not vary over a random policy's episodes
on the nominal kernel (a fixed body's speed, a field that never moves) is a constant no
policy changes, so its multiplier, its verdict and the feasibility check say nothing about
behaviour. ``cannot_bind(name)`` names such costs; the runner and ``rcmdp feasibility`` print
them as warnings before anything trains (a warning, not an error: a constant cost may be meant)."""

from __future__ import annotations

import warnings

import numpy as np

EPISODES = 8  # random-policy episodes on the nominal kernel
RTOL, ATOL = 1e-6, 1e-9  # "does not vary": every step's cost within this of the first


class CannotBindWarning(UserWarning):
    """A constraint whose cost is the same on every step of a random policy's episodes."""


def step_costs(name: str, episodes: int = EPISODES, seed: int = 0) -> np.ndarray:
    """Every step's costs of ``episodes`` random-policy episodes of environment ``name`` on its
    nominal kernel (one episode length each, episodes that end restart): ``[episodes, T, m]``."""
    import jax

    from rcmdp_jax import envs
    from rcmdp_jax.envs.numbers import program_key
    from rcmdp_jax.program_store import Stored

    env, params = envs.make(name)
    keys = jax.random.split(jax.random.PRNGKey(seed), episodes)
    # kept in the program store under the name with its numbers blanked: at another limit, loaded
    key, registered = program_key(name), [name] if envs.registered_spec(name) else []
    program = Stored(jax.jit(episodes_program(env)), f"cannot-bind check {key}", {"env": key}, registered)
    return np.asarray(program(keys, params), np.float64)


def episodes_program(env):
    """``(keys [E], params) -> costs [E, T, m]``: a random policy's episodes on ``env`` (one
    episode length each), the parameters an argument, so that the environment at another limit,
    width or noise is the same program (``step_costs`` keeps it in the program store once)."""
    import jax

    def episode(key, params):
        space = env.action_space(params)
        k_reset, k_run = jax.random.split(key)
        _, state = env.reset(k_reset, params)

        def step(state, k):
            k_act, k_step = jax.random.split(k)
            out = env.step(k_step, state, space.sample(k_act), params)  # (obs, state, ..., info)
            return out[1], out[-1]["costs"]

        return jax.lax.scan(step, state, jax.random.split(k_run, int(env.episode_length)))[1]

    return jax.vmap(episode, in_axes=(0, None))


def constant(costs: np.ndarray) -> list[tuple[int, float]]:
    """``(j, value)`` of each constraint whose finite costs ``[..., m]`` never leave their first value."""
    flat = np.asarray(costs, np.float64).reshape(-1, np.shape(costs)[-1])
    out = []
    for j in range(flat.shape[1]):
        c = flat[:, j][np.isfinite(flat[:, j])]
        if c.size and np.all(np.abs(c - c[0]) <= ATOL + RTOL * abs(c[0])):
            out.append((j, float(c[0])))
    return out


def cannot_bind(name: str, episodes: int = EPISODES, seed: int = 0) -> list[str]:
    """One warning line per constraint of ``name`` whose cost does not vary over ``episodes``
    random-policy episodes on the nominal kernel; [] where every cost varies (or none exists,
    or the environment has no action space to sample: a check, never a refusal)."""
    from rcmdp_jax import envs

    if name.startswith(envs.GYMNAX_PREFIX) and not envs.gymnax_has_costs(name):
        return []  # a gymnax id named without costs: its placeholder constraint is 0 by design
    try:
        costs = step_costs(name, episodes, seed)
    except (NotImplementedError, AttributeError):  # a space without ``sample``: training says what it needs
        return []
    m = costs.shape[-1]
    names = envs.cost_names(name, m)
    return [f"{name}: constraint {names[j]!r} cannot bind: its cost is {value:+.4g} on every step of {episodes} "
            f"random-policy episodes on the nominal kernel, and a cost no policy changes constrains nothing "
            f"(does its field move? is its limit within reach?)" for j, value in constant(costs)]  # fmt: skip


def warn(name: str, say=None) -> list[str]:
    """``cannot_bind(name)``, each line given to ``say`` (a printer), else raised as a
    ``CannotBindWarning``; the lines."""
    found = cannot_bind(name)
    for line in found:
        if say is not None:
            say(f"warning: {line}")
        else:
            warnings.warn(line, CannotBindWarning, stacklevel=2)
    return found

"""Compiled programs kept for the life of the process.

A second study in the same process with the same configurations, shapes and devices
(a notebook that runs the command's ``main`` again, a ``--resume`` after a failure, the
test suite) takes the compiled family, sweep, search and checkpoint layout from here
instead of tracing, lowering and compiling them again (JAX's persistent cache saves
only the last of the three). A key holds everything the program is built from: the
configurations (frozen dataclasses; for a family its structure, ``family.structure``, as its
numbers and budget are the program's arguments), the shapes, the devices, each environment's
identity (``envs.register`` may give a name another environment) and, for a family, the
registered learners, constraint rules, alpha schedules and robust methods (its program
switches over them). Registered objects count by identity: one changed in place between two
studies (a class attribute edited) is not seen; register a new one, or call ``clear()``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

MAX_PROGRAMS = 32  # the oldest are dropped beyond this (a compiled family is a few MB)

_programs: OrderedDict = OrderedDict()
_lock = threading.Lock()  # families are compiled in a background thread
counts = {"built": 0, "reused": 0}  # for tests and curious users
_specs: dict[int, Any] = {}  # registered specs that keys name by id, kept alive so no id is reused


def env_identity(name: str) -> Any:
    """What an environment name stands for now: the registered spec itself (by identity)
    for ``envs.register``'s names, the name for the others (built from it alone)."""
    from rcmdp_jax import envs

    registered = envs.registered_spec(name)
    if registered is None:
        return name
    _specs[id(registered)] = registered
    return name, id(registered)


def policy_key(env: str, cfg) -> tuple:
    """What a program that runs ``cfg``'s trained policy is built from (the sweep, the
    search): the environment, the actor and the discount, not the training."""
    return env_identity(env), cfg.policy_hidden, cfg.dropout, cfg.dropout_rng, cfg.init, cfg.hparams.gamma


def plugins() -> tuple:
    """The registered learners, constraint rules, alpha schedules and robust methods, themselves (a key
    that holds them keeps them alive, so no identity is reused)."""
    from rcmdp_jax import adversary, constraints, learners, schedules

    return tuple(r.items() for r in (learners, constraints, schedules, adversary))


def cached(key: tuple, build: Callable[[], Any]) -> Any:
    """``build()``'s value under ``key``, built once per process (``MAX_PROGRAMS`` kept)."""
    with _lock:
        if key in _programs:
            _programs.move_to_end(key)
            counts["reused"] += 1
            return _programs[key]
    value = build()  # outside the lock: compiling takes seconds to minutes
    with _lock:
        counts["built"] += 1
        _programs[key] = value
        while len(_programs) > MAX_PROGRAMS:
            _programs.popitem(last=False)
    return value


def clear() -> None:
    with _lock:
        _programs.clear()
        _specs.clear()

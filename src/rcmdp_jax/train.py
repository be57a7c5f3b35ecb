"""``make_train``: one whole training run (docs/method.md §2a) as a pure, jit-able function.

The iteration is ``rcmdp_jax.step.Step``; ``Program`` is what one algorithm (``Trainer``) and a
family of them (``rcmdp_jax.family.Family``) share: ``init``, ``run`` and the whole run
``__call__`` of one lane, whose hyperparameters and ``Variant`` each of them resolves.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rcmdp_jax import options
from rcmdp_jax.config import Config
from rcmdp_jax.hparams import HParams, check_one_run, validate_hparams
from rcmdp_jax.rollout import check_key
from rcmdp_jax.step import Step, TrainState, Variant


@struct.dataclass
class TrainResult:
    state: TrainState
    metrics: dict  # per-iteration metrics, leading axis = iteration


def resolve_hparams(cfg: Config, hparams: HParams | None, numbers=None) -> HParams:
    """The program's hyperparameters: ``hparams`` (None: ``cfg``'s) checked, as float32, holding the
    plug-in numbers ``numbers`` (None: those ``cfg``'s plug-ins read; a family: its members')."""
    hp = cfg.hparams if hparams is None else hparams
    if not isinstance(hp, HParams):
        raise ValueError(f"hparams must be an rcmdp_jax.HParams, got {type(hp).__name__}")
    validate_hparams(hp)  # concrete values only; traced ones are checked where they are made
    check_one_run(hp)
    numbers = options.numbers_read(cfg) if numbers is None else numbers
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), hp.for_program(numbers))


class Program:
    """A training program's entry points, shared by ``Trainer`` and ``Family``: ``lane`` says
    which hyperparameters and ``Variant`` to train (a subclass's ``inputs``), ``env_params``
    the starting kernel (None: the environment's nominal one). All are pure and jit-able."""

    step: Step
    env: Any

    def inputs(self, lane) -> tuple[HParams, Variant]:
        raise NotImplementedError

    def num_iterations(self) -> int:
        return self.step.cfg.num_iterations

    def start_kernel(self, env_params):
        """``env_params`` checked (the nominal kernel when None)."""
        env_params = self.step.default_env_params if env_params is None else env_params
        expected = type(self.step.default_env_params)
        if not isinstance(env_params, expected):
            raise TypeError(f"env_params must be the environment's {expected.__name__} (e.g. envs.make(name)[1] "
                            f"or its .replace(xi=...)), got {type(env_params).__name__}")  # fmt: skip
        self.env.validate_params(env_params)
        self.env.validate_kernel(env_params)
        return env_params

    def init(self, rng: jax.Array, lane=None, env_params=None) -> TrainState:
        """The state before the first iteration."""
        check_key(rng)
        hp, variant = self.inputs(lane)
        return self.step.init(rng, hp, self.start_kernel(env_params), variant)

    def init_at(self, rng: jax.Array, lane, numbers: dict) -> TrainState:
        """``init`` from the nominal kernel with the environment's ``numbers`` (``{field: value}`` of
        its parameters, ``envs.numbers.program_numbers``: traced, arguments of a compiled program)."""
        return self.init(rng, lane, self.step.default_env_params.replace(**numbers))

    def run(self, state: TrainState, lane=None, start=0, n: int | None = None, total=None):
        """Iterations ``start .. start + n - 1`` (``n`` static, default all): ``(state, metrics)``;
        ``run(init(rng), lane, start, n)`` over consecutive chunks gives the numbers of one call.
        ``total`` (the run's iterations, may be traced): a chunk may run past the run's end,
        its slots from ``total`` on doing nothing (``step.until``), so one program of chunk
        ``n`` serves every budget (``rcmdp_jax.chunked``); its metrics' rows past the end are to be cut."""
        n = self.num_iterations() if n is None else n
        if total is None:
            check_chunk(start, n, self.num_iterations())
        else:
            check_chunk(start, n, start + n)
        return self.step.run(state, *self.inputs(lane), start, n, total)

    def __call__(self, rng: jax.Array, lane=None, env_params=None) -> TrainResult:
        state, metrics = self.run(self.init(rng, lane, env_params), lane)
        return TrainResult(state=state, metrics=metrics)


def check_chunk(start, n: int, total: int) -> None:
    """``n``: a whole number of iterations (static); ``start``: one integer iteration index
    (traced or not; a concrete one with its chunk inside the program's ``total`` iterations)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"run: n must be a whole number of iterations >= 1 (static, not traced), got {n!r}")
    try:
        integer = np.ndim(start) == 0 and jnp.issubdtype(jnp.result_type(start), jnp.integer)
    except TypeError:
        integer = False
    if isinstance(start, (bool, np.bool_)) or not integer:
        raise ValueError(f"run: start must be one integer iteration index, got {start!r}")
    if not isinstance(start, jax.core.Tracer) and not 0 <= int(start) <= total - n:
        raise ValueError(
            f"run: iterations {int(start)}..{int(start) + n - 1} are outside this program's 0..{total - 1}"
        )


@dataclasses.dataclass(frozen=True, eq=False)
class Trainer(Program):
    """One algorithm's training run: ``trainer(rng, hparams, env_params)`` (both optional), its
    lane the hyperparameters (None: the config's). Vmap ``rng`` for seeds, ``hparams`` (array
    leaves) for a sweep, ``env_params`` for a batch of kernels; ``config`` and ``env`` are
    the validated config and its environment."""

    config: Config
    env: Any
    step: Step

    def inputs(self, hparams: HParams | None) -> tuple[HParams, Variant]:
        return resolve_hparams(self.config, hparams), Variant.of(self.config)


def make_train(config: Config) -> Trainer:
    """Validate ``config`` and return its ``Trainer``: ``train(rng, hparams, env_params) ->
    TrainResult`` (both optional).

    ``train`` is pure: ``jax.jit(jax.vmap(train))(jax.random.split(key, n))`` trains
    ``n`` seeds in one compiled call; vmapping ``hparams`` sweeps hyperparameters
    and vmapping ``env_params`` trains on a batch of kernels.
    """
    if not isinstance(config, Config):
        raise TypeError(f"make_train needs an rcmdp_jax.Config (e.g. preset('cartpole', 'PPO')), got "
                        f"{type(config).__name__}")  # fmt: skip
    cfg = config.validate()
    step = Step(cfg)
    return Trainer(config=cfg, env=step.env, step=step)


def __getattr__(name):
    if name == "build_networks":  # its one import path: rcmdp_jax.networks
        raise AttributeError("rcmdp_jax.train.build_networks moved: from rcmdp_jax.networks import build_networks")
    raise AttributeError(f"module 'rcmdp_jax.train' has no attribute {name!r}")

"""Typed, frozen configuration: static choices (``Config``) and numeric,
vmappable hyperparameters (``HParams``), plus the SPEC §3 presets.

``Config`` decides shapes and code paths and is hashable (safe as a static
argument); ``HParams`` is a pytree of floats, so ``jax.vmap`` over an
``HParams`` with array leaves is a hyperparameter sweep.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from flax import struct

LEARNERS = ("ppo", "mdpo", "mcpmd")
CONSTRAINTS = ("none", "lagrangian", "augmented")
ALPHA_SCHEDULES = ("fixed", "linear", "restart", "geometric")
ALPHA_TICKS = ("epoch", "batch")
KL_ESTIMATORS = ("reference", "exact")
OPTIMIZERS = ("adam", "sgd")
DROPOUT_RNGS = ("hash", "threefry")
ENV_NAMES = ("cartpole", "inventory", "inventory3d")
BUDGETS = ("short", "long")

# The reference grid of SPEC §2, in its order.
ALGORITHMS = (
    "MCPMD", "PPO", "MDPO",
    "RMCPMD", "PPO-Robust", "MDPO-Robust",
    "MCPMD-Lag", "PPO-Lag", "MDPO-Lag",
    "MDPO-Augmented-Lag",
    "RMCPMD-Lag", "PPO-Robust-Lag", "MDPO-Robust-Lag",
    "MDPO-Robust-Augmented-Lag",
)  # fmt: skip

_NAME_RE = re.compile(r"^(R?)(MCPMD|PPO|MDPO)(-Robust)?(-Augmented)?(-Lag)?$")


@struct.dataclass
class HParams:
    """Numeric hyperparameters; every leaf may be an array (vmap = sweep)."""

    lr: float = 3e-4
    alpha: float = 2.0  # MDPO KL penalty alpha_0
    alpha_decay: float = 0.99  # geometric schedule factor
    eta_lam: float = 1e-3  # dual step size
    lam_init: float = 5.0
    lam_clip: float = 50.0  # upper clip of lam in lagrangian mode
    eta_xi: float = 1e-7  # LTMA step size
    clip_eps: float = 0.2  # PPO clip
    gae_lambda: float = 0.95
    gamma: float = 0.99
    target_kl: float = math.inf  # PPO early stop at 1.5 * target_kl; inf = off
    vf_coef: float = 0.5
    ent_coef: float = 0.0


@dataclasses.dataclass(frozen=True)
class Config:
    """Static configuration of one algorithm on one environment."""

    env: str = "cartpole"
    learner: str = "mdpo"
    constraint: str = "none"
    robust: bool = False
    name: str = ""
    total_timesteps: int = 20_000
    n_envs: int = 4
    n_steps: int = 400
    minibatch_size: int = 32
    epochs: int = 5
    policy_hidden: tuple[int, ...] = (128,)
    critic_hidden: tuple[int, ...] = (128,)
    dropout: float = 0.6
    dropout_rng: str = "hash"  # mask bits: "hash" (fast, counter-based) or "threefry" (flax nn.Dropout)
    optimizer: str = "adam"
    alpha_schedule: str = "fixed"
    alpha_tick: str = "epoch"
    kl_estimator: str = "reference"
    normalize_advantages: bool = True
    n_dual_episodes: int = 4
    dual_epochs: int = 5
    ltma_iterations: int = 160
    ltma_episodes: int = 1
    ltma_horizon: int = 10
    eval_every: int = 1
    eval_episodes: int = 20
    hparams: HParams = dataclasses.field(default_factory=HParams)

    # ------------------------------------------------------------ derived
    @property
    def batch_size(self) -> int:
        return self.n_envs * self.n_steps

    @property
    def num_iterations(self) -> int:
        return max(1, math.ceil(self.total_timesteps / self.batch_size))

    @property
    def num_minibatches(self) -> int:
        return self.batch_size // self.minibatch_size

    @property
    def alpha_ticks_total(self) -> int:
        per = self.epochs if self.alpha_tick == "epoch" else 1
        return self.num_iterations * per

    @property
    def constrained(self) -> bool:
        return self.constraint != "none"

    def replace(self, **changes: Any) -> Config:
        """A new config with ``changes`` (fields of Config or of HParams) applied."""
        hp_fields = {f.name for f in dataclasses.fields(HParams)}
        cfg_fields = {f.name for f in dataclasses.fields(Config)}
        hp_changes = {k: v for k, v in changes.items() if k in hp_fields}
        unknown = set(changes) - hp_fields - cfg_fields
        if unknown:
            allowed = sorted((cfg_fields - {"hparams"}) | hp_fields)
            raise ValueError(
                f"unknown config field(s) {sorted(unknown)}; allowed fields: {', '.join(allowed)}"
            )
        cfg_changes = {k: v for k, v in changes.items() if k not in hp_fields}
        out = dataclasses.replace(self, **cfg_changes)
        if hp_changes:
            out = dataclasses.replace(out, hparams=out.hparams.replace(**hp_changes))
        return out

    def validate(self) -> Config:
        """Raise ``ValueError`` naming the field and what is allowed; return self."""
        _choice("env", self.env, ENV_NAMES)
        _choice("learner", self.learner, LEARNERS)
        _choice("constraint", self.constraint, CONSTRAINTS)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("alpha_schedule", self.alpha_schedule, ALPHA_SCHEDULES)
        _choice("alpha_tick", self.alpha_tick, ALPHA_TICKS)
        _choice("kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        _choice("dropout_rng", self.dropout_rng, DROPOUT_RNGS)
        if not isinstance(self.robust, bool):
            raise ValueError(f"robust must be True or False, got {self.robust!r}")
        for f in (
            "total_timesteps", "n_envs", "n_steps", "minibatch_size", "epochs",
            "n_dual_episodes", "dual_epochs", "ltma_iterations", "ltma_episodes",
            "ltma_horizon", "eval_every", "eval_episodes",
        ):  # fmt: skip
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{f} must be a positive integer, got {v!r}")
        if self.batch_size % self.minibatch_size:
            raise ValueError(
                f"minibatch_size={self.minibatch_size} must divide the batch "
                f"n_envs*n_steps={self.batch_size}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not self.policy_hidden or any(int(h) < 1 for h in self.policy_hidden):
            raise ValueError(f"policy_hidden must be positive layer widths, got {self.policy_hidden!r}")
        if not self.critic_hidden or any(int(h) < 1 for h in self.critic_hidden):
            raise ValueError(f"critic_hidden must be positive layer widths, got {self.critic_hidden!r}")
        if not isinstance(self.hparams, HParams):
            raise ValueError(f"hparams must be an rcmdp_jax.HParams, got {type(self.hparams).__name__}")
        validate_hparams(self.hparams)
        return self


def _choice(field: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{field}={value!r} is not allowed; choose one of: {', '.join(allowed)}")


def validate_hparams(hp: HParams) -> None:
    """Range checks on concrete hyperparameters (arrays are checked element-wise)."""
    import numpy as np

    def check(field, ok, what):
        v = getattr(hp, field)
        try:
            arr = np.asarray(v, dtype=float)
        except Exception:  # traced values: nothing to check here
            return
        if not np.all(ok(arr)):
            raise ValueError(f"{field} must be {what}, got {v!r}")

    check("lr", lambda x: x > 0, "> 0")
    check("alpha", lambda x: x >= 0, ">= 0")
    check("alpha_decay", lambda x: x > 0, "> 0")
    check("eta_lam", lambda x: x >= 0, ">= 0")
    check("lam_init", lambda x: x >= 0, ">= 0")
    check("lam_clip", lambda x: x >= 0, ">= 0")
    check("eta_xi", lambda x: x >= 0, ">= 0")
    check("clip_eps", lambda x: x > 0, "> 0")
    check("gae_lambda", lambda x: (x >= 0) & (x <= 1), "in [0, 1]")
    check("gamma", lambda x: (x >= 0) & (x <= 1), "in [0, 1]")
    check("target_kl", lambda x: x > 0, "> 0 (inf disables early stopping)")


def parse_algorithm(name: str) -> tuple[str, str, bool]:
    """``"MDPO-Robust-Augmented-Lag"`` -> ``("mdpo", "augmented", True)``."""
    m = _NAME_RE.match(name)
    valid = m is not None
    if valid:
        r_prefix, learner, robust_suffix, augmented, lag = m.groups()
        # RMCPMD is the robust Monte-Carlo learner's name; the others use "-Robust"
        valid = (learner == "MCPMD" and not robust_suffix) or (learner != "MCPMD" and not r_prefix)
        valid = valid and not (augmented and not lag)
    if not valid:
        raise ValueError(
            f"unknown algorithm {name!r}; valid names: {', '.join(ALGORITHMS)} "
            "(and the -Augmented-Lag variant of any learner)"
        )
    robust = bool(r_prefix or robust_suffix)
    constraint = "augmented" if augmented else ("lagrangian" if lag else "none")
    return learner.lower(), constraint, robust


# SPEC §3, per environment.
_ENV_PRESETS: dict[str, dict[str, Any]] = {
    "cartpole": dict(
        policy_hidden=(128,), critic_hidden=(128,), optimizer="adam", episode=100,
        ppo_epochs=50, ppo_target_kl=0.01, ltma_per_100=10.0, ltma_horizon=10,
        budgets={"short": 20_000, "long": 200_000},
        hp=dict(lr=3e-4, gae_lambda=0.95, gamma=0.99, eta_lam=1e-3, lam_clip=50.0, eta_xi=1e-7),
    ),
    "inventory": dict(
        policy_hidden=(64,), critic_hidden=(128,), optimizer="adam", episode=80,
        ppo_epochs=5, ppo_target_kl=math.inf, ltma_per_100=25.0, ltma_horizon=40,
        budgets={"short": 16_000, "long": 400_000},
        hp=dict(lr=1e-3, gae_lambda=0.5, gamma=0.95, eta_lam=1e-2, lam_clip=500.0, eta_xi=1e-1),
    ),
    "inventory3d": dict(
        policy_hidden=(128, 128), critic_hidden=(128,), optimizer="sgd", episode=100,
        ppo_epochs=5, ppo_target_kl=math.inf, ltma_per_100=20.0, ltma_horizon=40,
        budgets={"short": 40_000, "long": 400_000},
        hp=dict(lr=1e-3, gae_lambda=0.5, gamma=0.95, eta_lam=1e-2, lam_clip=500.0, eta_xi=1e-1),
    ),
}  # fmt: skip


def preset(env: str, algorithm: str, budget: str = "short", **overrides: Any) -> Config:
    """The SPEC §3 configuration of ``algorithm`` on ``env`` at ``budget``.

    ``overrides`` are any Config or HParams fields (validated).
    """
    _choice("env", env, ENV_NAMES)
    _choice("budget", budget, BUDGETS)
    learner, constraint, robust = parse_algorithm(algorithm)
    p = _ENV_PRESETS[env]
    n_envs = 4
    if learner == "mcpmd":
        n_steps, epochs, minibatch = p["episode"], 1, n_envs * p["episode"]
    else:
        n_steps, epochs, minibatch = 400, (p["ppo_epochs"] if learner == "ppo" else 5), 32
    ltma_iterations = max(1, round(n_envs * n_steps * p["ltma_per_100"] / 100))
    hp = HParams(
        target_kl=p["ppo_target_kl"] if learner == "ppo" else math.inf,
        lam_init=5.0,
        alpha=2.0,
        **p["hp"],
    )
    cfg = Config(
        env=env,
        learner=learner,
        constraint=constraint,
        robust=robust,
        name=algorithm,
        total_timesteps=p["budgets"][budget],
        n_envs=n_envs,
        n_steps=n_steps,
        minibatch_size=minibatch,
        epochs=epochs,
        policy_hidden=p["policy_hidden"],
        critic_hidden=p["critic_hidden"],
        optimizer=p["optimizer"],
        ltma_iterations=ltma_iterations,
        ltma_horizon=p["ltma_horizon"],
        hparams=hp,
    )
    if overrides.get("alpha_schedule") == "geometric" and "alpha" not in overrides:
        # SPEC §2d: alpha_0 = 5 when ticking per epoch, 2 per batch
        overrides = {**overrides, "alpha": 5.0 if overrides.get("alpha_tick", "epoch") == "epoch" else 2.0}
    return cfg.replace(**overrides).validate()


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """A JSON-ready dict of ``cfg`` (``hparams`` nested)."""
    out = dataclasses.asdict(cfg)
    out["hparams"] = {f.name: float(getattr(cfg.hparams, f.name)) for f in dataclasses.fields(HParams)}
    return out


def config_from_dict(d: dict[str, Any]) -> Config:
    """Inverse of ``config_to_dict``."""
    d = dict(d)
    hp = HParams(**{k: float(v) for k, v in d.pop("hparams", {}).items()})
    for key in ("policy_hidden", "critic_hidden"):
        if key in d:
            d[key] = tuple(int(h) for h in d[key])
    return Config(**d, hparams=hp).validate()

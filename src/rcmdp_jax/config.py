"""``Config``: the static choices of one algorithm on one environment (frozen and hashable:
it decides shapes and code paths), grouped by concern (``Config.groups``) and each field of one
nature (``NATURES``: structure, choice, budget, number, label; the lists of fields the command
line, the saved run's check and the families read are derived from them: ``fields_of``), its checks
(``validate``) and its JSON form. The registries' plug-ins (learners, constraint rules,
robust methods) are its choices; their own options live in ``Config.options``
(``rcmdp_jax.options``). The numeric, vmappable hyperparameters are ``HParams``
(``rcmdp_jax.hparams``), a config's own in ``hparams``. Presets: ``rcmdp_jax.presets``.
"""

from __future__ import annotations

import dataclasses
import math
import types
from typing import Any, Literal, get_args, get_origin, get_type_hints

import jax

from rcmdp_jax import adversary, constraints, learners, options, schedules
from rcmdp_jax.adversary import ADVERSARY_NAMES, NONE
from rcmdp_jax.constraints import CONSTRAINT_NAMES
from rcmdp_jax.dual import DUAL_ESTIMATORS
from rcmdp_jax.envs import check_name
from rcmdp_jax.envs import spec as env_spec
from rcmdp_jax.envs.domain import STUDY_CHOICES
from rcmdp_jax.hparams import HPARAM_FIELDS, HParams, check_one_run, validate_hparams
from rcmdp_jax.learners import LEARNER_NAMES
from rcmdp_jax.plugin import INT32_MAX, check_choice, check_count, check_kind, refusal, unknown_names
from rcmdp_jax.schedules import SCHEDULE_NAMES, TICKS

# The string choices of ``Config``, as ``Literal`` types (the field annotations) and tuples;
# the learners, constraint rules, alpha schedules and robust methods are their registries'.
Learner = Literal[LEARNER_NAMES]
Constraint = Literal[CONSTRAINT_NAMES]
AlphaSchedule = Literal[SCHEDULE_NAMES]
AlphaTick = Literal[TICKS]
KlEstimator = Literal["reference", "exact"]
# the robust training methods (``rcmdp_jax.adversary``, one file each); "none": not robust
Adversary = Literal[(NONE, *ADVERSARY_NAMES)]
KlCheck = Literal["sb3", "dropout_off"]
Init = Literal["orthogonal", "torch", "lecun"]
Optimizer = Literal["adam", "sgd"]
DropoutRng = Literal["hash", "threefry"]
DualEstimator = Literal[DUAL_ESTIMATORS]  # rcmdp_jax.dual's readings of C^
ALPHA_SCHEDULES, ALPHA_TICKS = get_args(AlphaSchedule), get_args(AlphaTick)

# What a field of ``Config`` is, declared once on the field (``dataclasses.field`` metadata) and
# read by every list of fields (``fields_of``, ``chosen_by``):
# * "structure": static; the program is built from it (shapes, counts, code paths): a family's
#   members share it (``family.family_key``);
# * "choice": a registry's name the program selects by a traced code (``step.Variant``: the
#   constraint rule, the robust method, the alpha schedule): a family's members may differ in it;
# * "budget": ``total_timesteps``, traced (``Variant.budget``) but the iterations a family shares;
# * "number": the traced hyperparameters (``hparams``): a family's members may differ in them;
# * "label": the algorithm's name, which nothing that trains reads.
# ``by`` names what chooses a field other than ``--set``: "algorithm" (the algorithm's name,
# ``presets.preset``; ``ALGORITHM_FIELDS``), "algos" (the name itself, ``--algos``), "env" (``--env``).
NATURES = ("structure", "choice", "budget", "number", "label")
BY = ("algorithm", "algos", "env")


def _declared(nature: str, default: Any, by: str | None = None) -> Any:
    if by not in (None, *BY):
        raise ValueError(f"by={by!r}: choose one of {', '.join(BY)} or None")
    return dataclasses.field(default=default, metadata={"nature": nature, "by": by})


def structure(default: Any, by: str | None = None) -> Any:
    """A static field of the program: its shapes, counts and code paths."""
    return _declared("structure", default, by)


def choice(default: Any, by: str | None = None) -> Any:
    """A registry's name that the program selects by a traced code (``step.Variant``)."""
    return _declared("choice", default, by)


def budget(default: Any) -> Any:
    """The policy step budget: traced, but the iterations a family shares."""
    return _declared("budget", default)


def label(default: Any, by: str | None = None) -> Any:
    """A name nothing that trains reads."""
    return _declared("label", default, by)


@dataclasses.dataclass(frozen=True)
class Config:
    """Static configuration of one algorithm on one environment, its fields grouped by concern
    (``Config.groups()``, a section each below) yet flat: ``Config(n_envs=8)``, ``replace``,
    ``--set n_envs=8`` and saved ``config.json`` / ``run.json`` files read as they always have.
    The plug-ins' options (the robust methods' ``ltma_iterations``, ``adversary_candidates``,
    ...) are set like fields through ``replace``, ``preset`` and ``--set``, not ``Config(...)``."""

    # ---- algorithm: what trains, on what (the preset's name says it)
    env: str = structure("cartpole", by="env")
    learner: Learner = structure("mdpo", by="algorithm")
    constraint: Constraint = choice("none", by="algorithm")
    # how the algorithm picks its training kernels (``rcmdp_jax.adversary``): "none", the nominal
    # kernel (a non-robust algorithm), or a robust method: the reference study's LTMA, LTMA with
    # the scale-free pathwise step, domain randomisation, worst-of-N, corners, the search
    adversary: Adversary = choice(NONE, by="algorithm")
    name: str = label("", by="algos")
    # ---- rollout: the policy's experience
    total_timesteps: int = budget(20_000)
    n_envs: int = structure(4)
    n_steps: int = structure(400)
    # dropout active while acting (MCPMD, as the reference keeps training mode)
    act_dropout: bool = structure(False)
    # ---- networks
    policy_hidden: tuple[int, ...] = structure((128,))
    critic_hidden: tuple[int, ...] = structure((128,))
    # dropout's mask bits (its rate is a number, ``HParams.dropout``): "hash" (fast, counter-based)
    # or "threefry" (flax nn.Dropout's)
    dropout_rng: DropoutRng = structure("hash")
    # SB3 orthogonal; "torch" (nn.Linear default, MCPMD); "lecun" (flax default)
    init: Init = structure("orthogonal")
    # ---- optimiser: the policy and critic update
    minibatch_size: int = structure(32)
    epochs: int = structure(5)
    optimizer: Optimizer = structure("adam")  # its eps and gradient clip are numbers (``HParams``)
    normalize_advantages: bool = structure(True)
    # PPO's early stop: the KL of the dropout-on loss pass ("sb3") or of a dropout-off pass
    kl_check: KlCheck = structure("sb3")
    kl_estimator: KlEstimator = structure("reference")
    alpha_schedule: AlphaSchedule = choice("fixed", by="algorithm")
    alpha_tick: AlphaTick = choice("epoch", by="algorithm")
    # ---- dual: the multipliers' phase (``rcmdp_jax.dual``)
    n_dual_episodes: int = structure(4)  # fresh episodes for the Monte-Carlo estimate C^
    dual_epochs: int = structure(5)  # passes over the multiplier batch (docs/method.md §2a.4)
    dual_batch: int = structure(400)  # the multiplier batch, in steps (100 steps x 4 envs)
    dual_minibatch: int = structure(32)  # one ascent step per minibatch of the multiplier batch
    # PPO on CartPole: the dual epochs are the policy epochs run before the KL stop
    dual_epochs_from_policy: bool = structure(False)
    # what each ascent step reads as C^: a shuffled minibatch's mean discounted cost-to-go
    # of the multiplier batch (default; why: docs/sensitivity.md), per-step cost, GAE cost
    # return, or the start state's value from fresh episodes (``rcmdp_jax.dual.DUAL_ESTIMATORS``)
    dual_estimator: DualEstimator = structure(STUDY_CHOICES["dual_estimator"])
    # collect the dual phase's episodes with dropout on (always on with act_dropout)
    dual_dropout: bool = structure(False)
    # read C^ of the deterministic policy (the distribution's mode), the one the robustness test
    # runs, instead of the sampling policy the learner acts with (docs/method.md §2a.4)
    dual_deterministic: bool = structure(False)
    # ---- evaluation: the training curves
    eval_every: int = structure(1)
    eval_episodes: int = structure(20)
    # ---- method: the plug-ins' own options, the robust methods' sizes among them, each declared
    # by its plug-in (e.g. ``ltma_iterations`` in ``rcmdp_jax.adversary.ltma``). Set them as
    # fields (``replace(name=value)``, ``--set name=value``), read them with ``option(name)``;
    # ``((name, value), ...)`` in name order, those at their default left out (``rcmdp_jax.options``)
    options: tuple[tuple[str, Any], ...] = structure(())
    # ---- hyperparameters: numeric, vmappable (``rcmdp_jax.hparams``)
    hparams: HParams = dataclasses.field(default_factory=HParams, metadata={"nature": "number", "by": None})

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", options.canonical(self.options))  # one form: equal configs are equal

    @classmethod
    def groups(cls) -> types.MappingProxyType:
        """The fields by concern, read-only: ``{"algorithm": ("env", ...), "rollout": ..., ...}``."""
        return GROUPS

    # ------------------------------------------------------------ derived
    @property
    def batch_size(self) -> int:
        return self.n_envs * self.n_steps

    @property
    def num_iterations(self) -> int:
        """Iterations of the train scan. PPO/MDPO: ``ceil(total_timesteps / batch_size)``.
        MCPMD (one whole episode an iteration, docs/method.md §2b): enough iteration slots for the
        shortest possible episodes; the slots past the step budget do nothing."""
        if self.episodic:
            slots = math.ceil(self.total_timesteps / env_spec(self.env).min_episode_length)
            return slots if slots <= 100 else 100 * math.ceil(slots / 100)  # chunks evenly for the runner
        return max(1, math.ceil(self.total_timesteps / self.batch_size))

    @property
    def num_minibatches(self) -> int:
        return self.batch_size // self.minibatch_size

    @property
    def dual_steps_per_epoch(self) -> int:
        """Ascent steps on ``lam`` per dual epoch: ``ceil(dual_batch / dual_minibatch)``."""
        return math.ceil(self.dual_batch / self.dual_minibatch)

    @property
    def dual_steps(self) -> int:
        """``K = dual_epochs * ceil(dual_batch / dual_minibatch)`` (PPO with
        ``dual_epochs_from_policy``: ``dual_epochs`` is the upper bound)."""
        return self.dual_epochs * self.dual_steps_per_epoch

    @property
    def episodic(self) -> bool:
        """An iteration is one whole episode of one environment (MCPMD, docs/method.md §2b)."""
        return learners.episodic(self.learner)

    @property
    def robust(self) -> bool:
        """A robust algorithm: one that trains with a robust method (``adversary`` not "none")."""
        return self.adversary != NONE

    @property
    def constrained(self) -> bool:
        return self.constraint != "none"

    def option(self, name: str) -> Any:
        """Plug-in option ``name``: this config's value, else its plug-in's default."""
        return options.value(self, name)

    def replace(self, **changes: Any) -> Config:
        """A new config with ``changes`` (fields of Config or of HParams, registered plug-ins'
        options, or their traced numbers ``"NAME.number"``) applied."""
        hp_fields = set(HPARAM_FIELDS)
        cfg_fields = {f.name for f in dataclasses.fields(Config)}
        hp_changes = {k: v for k, v in changes.items() if k in hp_fields}
        plugin_options = set(options.declared()) - cfg_fields - hp_fields
        declared = options.declared_numbers()
        numbers = {k: v for k, v in changes.items() if k in declared}
        unknown = set(changes) - hp_fields - cfg_fields - plugin_options - set(numbers)
        if unknown:
            raise unknown_names(unknown, setting_names(), where=options.moved(unknown))
        own = {k: options.plain(v) for k, v in changes.items() if k in plugin_options}
        cfg_changes = {k: options.plain(v) for k, v in changes.items() if k in cfg_fields}
        if own:
            cfg_changes["options"] = options.merged(cfg_changes.get("options", self.options), own)
        out = dataclasses.replace(self, **cfg_changes)
        if hp_changes:
            out = dataclasses.replace(out, hparams=out.hparams.replace(**hp_changes))
        if numbers:
            out = dataclasses.replace(out, hparams=out.hparams.with_numbers(**numbers))
        if "total_timesteps" in changes:
            _say_rounding(out)
        return out

    def validate(self) -> Config:
        """Raise ``ValueError`` naming the field and what is allowed; return self."""
        if jax.config.jax_enable_x64:  # the programs carry float32 state: x64 fails deep in tracing
            raise ValueError("jax_enable_x64 is on (JAX_ENABLE_X64=1, or jax.config.update('jax_enable_x64', True)): "
                             "rcmdp_jax trains in float32; turn it off (unset JAX_ENABLE_X64) to train")  # fmt: skip
        _check_env(self.env)
        for field, allowed in CHOICES.items():
            check_choice(field, getattr(self, field), REGISTERED[field]() if field in REGISTERED else allowed)
        check_kind("name", self.name, "")
        for f in _OF_TYPE["bool"]:
            check_kind(f, getattr(self, f), False)
        for f in _OF_TYPE["int"]:  # every count and size
            check_count(f, getattr(self, f))
        if self.batch_size > INT32_MAX:
            raise ValueError(f"n_envs*n_steps={self.batch_size} (the batch) is beyond int32 (at most {INT32_MAX})")
        if self.dual_estimator != "start_value" and self.dual_batch % self.n_dual_episodes:
            raise ValueError(f"dual_estimator={self.dual_estimator!r} reads a multiplier batch of n_dual_episodes envs "
                             f"x dual_batch/n_dual_episodes steps: n_dual_episodes={self.n_dual_episodes} must divide "
                             f"dual_batch={self.dual_batch}")  # fmt: skip
        learner = learners.get(self.learner)
        if self.dual_estimator == "gae" and not learner.trains_critic:
            raise ValueError(f"dual_estimator='gae' reads the critic's cost heads, which {learner.__name__} does not "
                             "train; choose one of: start_value, step_cost, cost_to_go")  # fmt: skip
        if self.batch_size % self.minibatch_size:
            raise ValueError(
                f"minibatch_size={self.minibatch_size} must divide the batch n_envs*n_steps={self.batch_size}"
            )
        for f in ("policy_hidden", "critic_hidden"):
            v = getattr(self, f)
            if (not isinstance(v, tuple) or not v
                    or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in v)):  # fmt: skip
                raise refusal(f, "a tuple of positive integer layer widths, e.g. (128,)", v)
            for i, h in enumerate(v):  # and each within int32 (the memory check names the one that is too big)
                check_count(f"{f}[{i}]", h)
        if not isinstance(self.hparams, HParams):
            raise ValueError(f"hparams must be an rcmdp_jax.HParams, got {type(self.hparams).__name__}")
        validate_hparams(self.hparams)
        check_one_run(self.hparams)
        options.check(self, {f.name for cls in (Config, HParams) for f in dataclasses.fields(cls)})
        return self


def fields_of(*natures: str, cls: type = Config) -> tuple[str, ...]:
    """The fields of ``cls`` (``Config``) of the given natures (``NATURES``), in class order."""
    if unknown := [n for n in natures if n not in NATURES]:
        raise ValueError(f"unknown nature(s) {unknown}; choose among {', '.join(NATURES)}")
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("nature") in natures)


def chosen_by(cls: type = Config) -> dict[str, str]:
    """``{field: what chooses it}`` for the fields that ``--set`` does not set (``BY``)."""
    return {f.name: f.metadata["by"] for f in dataclasses.fields(cls) if f.metadata.get("by")}


def setting_names(chosen: bool = True) -> set[str]:
    """What ``Config.replace`` takes (fields, plug-ins' options and numbers); without those ``chosen_by``
    names unless ``chosen``: what ``--set`` takes."""
    names = {f.name for f in dataclasses.fields(Config)} - {"hparams", "options"}
    names |= {*HPARAM_FIELDS, *options.declared(), *options.declared_numbers()}
    return names if chosen else names - set(chosen_by())


# the fields an algorithm's name decides (``presets.split_variant``: ``MDPO-Robust-Lag:linear-epoch``):
# the one list the command line (never by ``--set``) and a saved run's check (``study.run_plan``) read
ALGORITHM_FIELDS = tuple(f for f, by in chosen_by().items() if by == "algorithm")
# the fields a family's members may differ in (``family.family_key``), and those its program's
# compiled form does not depend on either (``family.structure``: the budget too)
MEMBER_FIELDS = fields_of("choice", "number", "label")


class BudgetRounded(UserWarning):
    """A ``total_timesteps`` that whole batches round up (the CLI says it as a note)."""


def _say_rounding(cfg: Config) -> None:
    """Warn when PPO/MDPO's whole batches run more policy steps than ``total_timesteps``."""
    import warnings

    ints = all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (cfg.total_timesteps, cfg.n_envs, cfg.n_steps)
    )
    if not ints or cfg.episodic or cfg.num_iterations * cfg.batch_size == cfg.total_timesteps:
        return
    warnings.warn(f"total_timesteps={cfg.total_timesteps}: {cfg.name or cfg.learner} runs {cfg.num_iterations} "
                  f"iteration(s) of {cfg.batch_size} policy steps (n_envs*n_steps) = "
                  f"{cfg.num_iterations * cfg.batch_size} steps", BudgetRounded, stacklevel=4)  # fmt: skip


# ``Config``'s concerns by their first field (its class body's sections): ``Config.groups``
_STARTS = dict(algorithm="env", rollout="total_timesteps", networks="policy_hidden", optimiser="minibatch_size",
               dual="n_dual_episodes", evaluation="eval_every", method="options",
               hyperparameters="hparams")  # fmt: skip
_NAMES = [f.name for f in dataclasses.fields(Config)]
_CUTS = [_NAMES.index(f) for f in _STARTS.values()] + [len(_NAMES)]
GROUPS = types.MappingProxyType({g: tuple(_NAMES[a:b]) for g, a, b in zip(_STARTS, _CUTS, _CUTS[1:])})
# the fields of each plain type (``validate`` checks every bool and every int, a positive count)
_OF_TYPE = {t: tuple(f.name for f in dataclasses.fields(Config) if f.type == t) for t in ("bool", "int")}
# Every ``Literal`` field of ``Config`` and what it may be: the one table ``validate`` checks.
CHOICES: dict[str, tuple[str, ...]] = {
    n: get_args(t) for n, t in get_type_hints(Config).items() if get_origin(t) is Literal
}
# The choices that registries hold (plug-ins included): read when a config is checked.
REGISTERED = {"learner": learners.names, "constraint": constraints.names, "alpha_schedule": schedules.names,
              "adversary": lambda: (NONE, *adversary.names())}  # fmt: skip


def _check_env(env: str) -> None:
    try:
        check_name(env)
    except ValueError as err:
        raise ValueError(f"env={env!r}: {err}") from None


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """A JSON-ready dict of ``cfg`` (``hparams`` nested; ``options`` with the defaults of the
    plug-ins it trains with spelled out, ``options.explicit``)."""
    out = dataclasses.asdict(cfg)
    out["hparams"] = {f: float(getattr(cfg.hparams, f)) for f in HPARAM_FIELDS}
    out["hparams"] |= {k: float(v) for k, v in cfg.hparams.numbers().items()}  # plug-ins' numbers it sets
    out["options"] = options.explicit(cfg)
    return out


def legacy_fields(d: dict[str, Any]) -> dict[str, Any]:
    """A config dict of an older version with ``robust`` beside ``adversary`` (the method it
    named whether robust or not, ``"ltma"`` when absent) in the one field: ``adversary``, "none"
    when not robust. A ``robust`` that is not a bool is left for the checks to refuse."""
    if not isinstance(d.get("robust"), bool):
        return d
    out = {k: v for k, v in d.items() if k != "robust"}
    out["adversary"] = d.get("adversary", STUDY_CHOICES["adversary"]) if d["robust"] else NONE
    return out


def config_from_dict(d: dict[str, Any]) -> Config:
    """Inverse of ``config_to_dict``, converting nothing: a value of the wrong JSON type is refused
    by ``validate``'s wording. An older version's dict with plug-ins' options as flat fields
    (``ltma_iterations``, ...) reads into ``options``, one with ``robust`` and ``adversary`` into
    ``adversary`` (``legacy_fields``)."""
    fields = {f.name for f in dataclasses.fields(Config)}
    d = options.lifted(legacy_fields(dict(d)), fields)
    hp_dict = d.pop("hparams", {})
    if not isinstance(hp_dict, dict):
        raise refusal("hparams", "an object", hp_dict)
    numbers = {*HPARAM_FIELDS, *options.declared_numbers()}
    if unknown := (set(d) - fields) | {f"hparams.{k}" for k in set(hp_dict) - numbers}:
        raise unknown_names(unknown, fields | {f"hparams.{k}" for k in numbers})
    # JSON's 1 for 1.0 (an int beyond every float as it is: its range refuses it)
    hp_dict = {k: float(v) if type(v) is int and v.bit_length() < 1024 else v for k, v in hp_dict.items()}
    hp = HParams(**{k: v for k, v in hp_dict.items() if "." not in k})
    hp = hp.with_numbers(**{k: v for k, v in hp_dict.items() if "." in k})  # plug-ins' numbers
    d |= {k: tuple(d[k]) for k in ("policy_hidden", "critic_hidden") if isinstance(d.get(k), list)}
    pairs = d.get("options", [])
    named = {p[0] for p in pairs} if options.json_pairs(pairs) else set()
    if "options" in d:
        d["options"] = options.from_json(pairs)
    cfg = Config(**d, hparams=hp)
    # an option added since the dict was written: what the code then did (``Plugin.legacy_options``)
    legacy = {
        o: v for cls in options.used(cfg) for o, v in getattr(cls, "legacy_options", {}).items() if o not in named
    }
    return (cfg.replace(**legacy) if legacy else cfg).validate()

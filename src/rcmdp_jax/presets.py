"""The reference study's presets (docs/method.md §3): the 14 algorithm names and what they mean, the
schedules study's variants, ``ALGO@FIELD=VALUE`` hyperparameter lanes, and ``preset`` (a
validated ``Config`` of one algorithm on one environment, from the environment's
``DomainSpec``: ``envs.spec``)."""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from typing import Any

from rcmdp_jax import adversary, constraints, env_settings, envs, learners, options
from rcmdp_jax.adversary import NONE
from rcmdp_jax.config import ALPHA_SCHEDULES, ALPHA_TICKS, Config, _check_env, setting_names
from rcmdp_jax.envs.domain import BUDGETS, budget_steps
from rcmdp_jax.hparams import HPARAM_FIELDS, HParams
from rcmdp_jax.learners.base import BATCH_ENVS
from rcmdp_jax.plugin import check_choice as _choice
from rcmdp_jax.plugin import closest, unknown_names

# The reference grid of docs/method.md §2, in its order.
ALGORITHMS = (
    "MCPMD", "PPO", "MDPO",
    "RMCPMD", "PPO-Robust", "MDPO-Robust",
    "MCPMD-Lag", "PPO-Lag", "MDPO-Lag",
    "MDPO-Augmented-Lag",
    "RMCPMD-Lag", "PPO-Robust-Lag", "MDPO-Robust-Lag",
    "MDPO-Robust-Augmented-Lag",
)  # fmt: skip


def rule_suffixes() -> dict[str, str]:
    """The constraint rules' name parts, ``{"": "lagrangian", "Augmented": "augmented", "PID":
    "pid", ...}``, from the registry (``Rule.suffix``; a rule with none is not named by one)."""
    return {cls.suffix: name for name, cls in constraints.items() if cls.suffix is not None}


def parse_algorithm(name: str) -> tuple[str, str, bool]:
    """``"MDPO-Robust-Augmented-Lag"`` -> ``("mdpo", "augmented", True)``: ``LEARNER[-Robust][-RULE]-Lag``
    with the learner and the rule's name part (``Rule.suffix``) from their registries (``RMCPMD``
    is the robust Monte-Carlo learner's name)."""
    learner_names = {n.upper(): n for n in learners.names()}
    suffixes = rule_suffixes()
    pattern = (rf"^(R?)({'|'.join(map(re.escape, learner_names))})(-Robust)?"
               rf"(?:-({'|'.join(re.escape(s) for s in suffixes if s)}))?(-Lag)?$")  # fmt: skip
    m = re.match(pattern, name) if isinstance(name, str) else None
    valid = m is not None
    if valid:
        r_prefix, learner, robust_suffix, rule, lag = m.groups()
        # RMCPMD is the robust Monte-Carlo learner's name; the others use "-Robust"
        valid = (learner == "MCPMD" and not robust_suffix) or (learner != "MCPMD" and not r_prefix)
        valid = valid and not (rule and not lag) and not (r_prefix and learner != "MCPMD")
    if not valid:
        rules = [f"-{s}-Lag" for s in suffixes if s]
        plain = [a for a in ALGORITHMS if a.endswith("-Lag") and not any(a.endswith(r) for r in rules)]
        spelled = [*ALGORITHMS, *(a[: -len("-Lag")] + r for a in plain for r in rules)]
        raise ValueError(f"unknown algorithm {name!r}{closest(name, spelled)}; valid names: {', '.join(ALGORITHMS)} "
                         f"(and, for any learner, the rule variants {', '.join(rules)})")  # fmt: skip
    robust = bool(r_prefix or robust_suffix)
    constraint = suffixes[rule or ""] if lag else "none"
    return learner_names[learner], constraint, robust


# The schedules study (the reference study's appendix): MDPO's robust algorithms under
# every alpha schedule, ticking per epoch and per batch (fixed alpha does not tick).
SCHEDULE_STUDY_ALGORITHMS = ("MDPO-Robust", "MDPO-Robust-Lag", "MDPO-Robust-Augmented-Lag")


def schedule_variants(algorithms=SCHEDULE_STUDY_ALGORITHMS) -> tuple[str, ...]:
    """Names ``ALGO:SCHEDULE-TICK`` (``ALGO:fixed`` once) of the schedules study."""
    kinds = ["fixed"] + [f"{s}-{t}" for s in ALPHA_SCHEDULES if s != "fixed" for t in ALPHA_TICKS]
    return tuple(f"{a}:{k}" for a in algorithms for k in kinds)


def parse_setting(item: str) -> tuple[str, Any] | None:
    """``"KEY=VALUE"`` (``--set`` and ``ALGO@FIELD=VALUE`` alike) -> ``(KEY, VALUE)``: a Python literal
    (``8``, ``1e-3``, ``(64, 64)``, ``True``), ``inf`` and ``nan`` floats, else the text; None without ``KEY=``."""
    key, eq, raw = (x.strip() for x in item.partition("="))
    if not (eq and key):
        return None
    try:
        return key, ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return key, float(raw) if raw.lower().lstrip("+-") in ("inf", "infinity", "nan") else raw


def check_sets(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` (``--set``'s) if each names a setting ``--set`` takes (``config.setting_names``:
    none an algorithm's name, ``--algos`` or ``--env`` chooses), else ``PlanError`` naming them."""
    from rcmdp_jax.sizes import PlanError

    if unknown := set(settings) - (allowed := setting_names(chosen=False)):
        raise PlanError(f"--set: {unknown_names(unknown, allowed, where=options.moved(unknown))}")
    return settings


def split_variant(name: str) -> tuple[str, dict[str, Any]]:
    """An algorithm name with variants -> ``(algorithm, Config/HParams overrides)``:
    ``"MDPO-Robust-Lag:restart-batch"`` -> ``("MDPO-Robust-Lag", {"alpha_schedule":
    "restart", "alpha_tick": "batch"})``; ``"PPO-Lag+dr"`` -> the robust method
    (``{"adversary": "dr"}``, ``+none``: not robust); ``"MDPO-Lag@lam_init=0@eta_lam=1e-4"``
    -> its hyperparameters (``HParams`` fields only). Every variant shares its family's
    compiled program (lanes); a plain algorithm name -> ``(name, {})``."""
    name, *hp_items = name.split("@")
    overrides: dict[str, Any] = {}
    name, plus, method = name.partition("+")
    if plus:
        if method not in (NONE, *adversary.names()):
            raise ValueError(f"unknown robust method {method!r}{closest(method, adversary.names())} in {name}+{method}: "
                             "write ALGO+METHOD with METHOD one "
                             f"of {', '.join((NONE, *adversary.names()))}")  # fmt: skip
        overrides = {"adversary": method}
    hp_fields = set(HPARAM_FIELDS) | set(options.declared_numbers())  # plug-ins' numbers too: pid.kp
    for item in hp_items:
        key, value = parse_setting(item) or ("", None)
        if key and key not in hp_fields:
            raise unknown_names([key], hp_fields, "hyperparameter", f" in {name!r} (ALGO@FIELD=NUMBER)")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"unknown hyperparameter variant {item!r} in {name!r}: write ALGO@FIELD=NUMBER with FIELD "
                             f"one of {', '.join(sorted(hp_fields))}")  # fmt: skip
        if key in overrides:
            raise ValueError(f"{key} given twice in {name}@{'@'.join(hp_items)}: give each hyperparameter once")
        try:  # one number, one float: @lr=1 is @lr=1.0
            overrides[key] = float(value)
        except OverflowError:  # an int beyond every float: refused by its field's range
            overrides[key] = value
    if ":" not in name:
        return name, overrides
    algo, _, variant = name.partition(":")
    schedule, _, tick = variant.partition("-")
    if schedule not in ALPHA_SCHEDULES or (tick and tick not in ALPHA_TICKS) or (schedule != "fixed" and not tick):
        raise ValueError(
            f"unknown schedule variant {name!r}: write ALGO:SCHEDULE-TICK with SCHEDULE one of "
            f"{', '.join(ALPHA_SCHEDULES)} and TICK one of {', '.join(ALPHA_TICKS)} (ALGO:fixed for fixed alpha)"
        )
    try:
        learner = parse_algorithm(algo)[0]
    except ValueError:  # named by the caller's own check of the algorithm
        learner = "mdpo"
    if learner != "mdpo":  # else a second name for the plain algorithm, its schedule unused
        raise ValueError(f"schedule variant {name!r}: alpha schedules (ALGO:SCHEDULE-TICK) apply to MDPO's "
                         f"algorithms only; {learner.upper()} has no alpha: drop :{variant}")  # fmt: skip
    return algo, {"alpha_schedule": schedule, "alpha_tick": tick or "epoch", **overrides}


# -Robust's method where a domain's default (``LearnerSpec.adversary``) is ``search`` and it cannot run
# as measured (the score-function gradient, a rollout env for the reward and each constraint): the
# next of docs/robustness.md's ranking that needs no gradient in xi and no 2^n corners
FALLBACK_METHOD = "worst-of-n"
_SCORE: dict[str, tuple[object, bool, int]] = {}  # env -> (its spec, a density, constraints)


def robust_default(env: str, learner: str) -> str:
    """The robust method ``-Robust`` names on ``env`` for ``learner``: the domain's
    (``LearnerSpec.adversary``); for ``search``, only where it runs as the benchmark measured it
    — the kernel has a density (the score-function gradient) and the learner has a rollout env
    for the reward and each constraint (MCPMD has one) — else ``FALLBACK_METHOD``."""
    spec = envs.spec(env)
    method = spec.learner.adversary
    if method != "search":
        return method
    if env not in _SCORE or _SCORE[env][0] is not spec:  # a name registered anew is another environment
        e, params = envs.make(env)
        try:
            e.check_estimator(params, "score")
            _SCORE[env] = (spec, True, e.num_constraints)
        except ValueError:
            _SCORE[env] = (spec, False, e.num_constraints)
    _, score, m = _SCORE[env]
    return method if score and learner != "mcpmd" and BATCH_ENVS >= 1 + m else FALLBACK_METHOD


def check_plugins_env(cfg: Config) -> None:
    """``options.check_env`` of ``cfg`` on its own environment and robust method, before anything
    compiles (a gymnax environment, or one made of it, made abstractly: ``jax.eval_shape``)."""
    import jax

    def check():
        options.check_env(cfg, envs.make(cfg.env)[0], adversary.family_methods([cfg]))
        return 0

    jax.eval_shape(check) if envs.GYMNAX_PREFIX in cfg.env else check()


def preset(env: str, algorithm: str, budget: str = "short", **overrides: Any) -> Config:
    """The docs/method.md §3 configuration of ``algorithm`` on ``env`` at ``budget``.

    ``algorithm`` is a name of the grid, optionally with an alpha schedule variant
    (``"MDPO-Robust-Lag:restart-batch"``, see ``split_variant``). ``overrides`` are any
    Config or HParams fields (validated).
    """
    _check_env(env)
    _choice("budget", budget, BUDGETS)
    if not isinstance(algorithm, str):
        raise ValueError(f"algorithm={algorithm!r}: algorithm must be a name (str), got {type(algorithm).__name__}")
    base_name, variant = split_variant(algorithm)
    overrides = {**overrides, **variant}  # a variant in the name is what names it
    learner, constraint, robust = parse_algorithm(base_name)
    if variant.get("adversary") == NONE and robust:
        raise ValueError(f"{algorithm!r}: a -Robust algorithm with +none; drop -Robust for the non-robust one")
    domain = envs.spec(env)
    p = domain.learner
    env_settings.check(p.plugins)  # here, when every plug-in (a --plugins file's too) is registered
    fields = dict(
        env=env, learner=learner, constraint=constraint, adversary=robust_default(env, learner) if robust else NONE,
        name=algorithm,
        total_timesteps=budget_steps(p.budgets, budget), policy_hidden=p.policy_hidden, critic_hidden=p.critic_hidden,
        optimizer=p.optimizer, dual_estimator=p.dual_estimator, n_dual_episodes=p.n_dual_episodes,
        hparams={
            "lam_init": 5.0,
            "alpha": 2.0,
            "alpha_decay": domain.gamma,  # docs/method.md §2d: geometric alpha decays by the domain's gamma
            "dropout": p.dropout,
            **p.hp,  # over the three above; never gamma or target_kl (envs.domain refuses them there)
            "gamma": domain.gamma,
            "target_kl": math.inf,  # PPO's preset sets its own
        },
    )  # fmt: skip
    # the plug-ins' parts, each from its per-environment settings (``rcmdp_jax.env_settings``): the
    # learner's (its batch), then every rule's and robust method's (their own options, on every preset,
    # so that a config given another method later keeps the environment's settings)
    learner_cls = learners.get(learner)
    fields = learner_cls.preset(fields, env_settings.settings_for(learner_cls, p.plugins), domain)
    for registry in (constraints.REGISTRY, adversary.REGISTRY):
        for name, cls in registry.items():
            fields = env_settings.own_part(f"{registry.kind} {name!r}", cls, fields, p.plugins, domain)
    if fields["hparams"].get("margin_z"):  # the data margin is sized for the domain's test
        fields["hparams"] = {"margin_n": float(domain.n_test), **fields["hparams"]}
    own = {f.name for f in dataclasses.fields(Config)}
    cfg = Config(
        **{k: v for k, v in fields.items() if k in own and k != "hparams"}, hparams=HParams(**fields["hparams"])
    )
    plugin_options = {k: v for k, v in fields.items() if k not in own}
    if overrides.get("alpha_schedule") == "geometric" and "alpha" not in overrides:
        # docs/method.md §2d: alpha_0 = 5 when ticking per epoch, 2 per batch
        overrides = {**overrides, "alpha": 5.0 if overrides.get("alpha_tick", "epoch") == "epoch" else 2.0}
    return cfg.replace(**{**plugin_options, **overrides}).validate()

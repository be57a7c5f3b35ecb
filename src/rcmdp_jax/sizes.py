"""What a run's sizes cost, checked before anything is trained or written: every derived
count against the train step's int32 counters (``check_counts``) and every buffer of the run
(training, the multiplier batch, LTMA's episodes, the robustness sweep) against this
machine's memory (``check_memory``). Both raise ``PlanError`` naming the field; the study's
runner (``study.plan``), ``rcmdp eval`` and the feasibility check call them."""

from __future__ import annotations

import dataclasses
import math
import os

from rcmdp_jax import options as plug_ins
from rcmdp_jax.config import INT32_MAX, Config
from rcmdp_jax.plugin import check_count, check_seed


class PlanError(ValueError):
    """An input the plan refuses (the message names the option and the allowed values);
    the command line reports it in one line, exit status 2, nothing written."""


def check_run_fields(seeds, seed, n_test, name=lambda field: field) -> None:
    """A run's ``seeds``, ``seed`` and ``n_test``, each called ``name(field)`` (the runner's ``--seeds``,
    a saved run.json's ``seeds``)."""
    check_count(name("seeds"), seeds)
    check_seed(name("seed"), seed)
    if n_test is not None:
        check_count(name("n_test"), n_test)


# the fields a memory estimate depends on (and the robust methods' ``size_fields``): the
# one whose default shrinks it most is named
SIZE_FIELDS = ("n_envs", "n_steps", "minibatch_size", "eval_episodes", "policy_hidden", "critic_hidden", "dual_batch",
               "n_dual_episodes")  # fmt: skip


def size_fields(configs) -> tuple[str, ...]:
    """``SIZE_FIELDS`` and the size fields of the robust methods of ``configs``."""
    from rcmdp_jax import adversary

    own = (f for c in configs for f in adversary.method_class(adversary.method_of(c)).size_fields)
    return tuple(dict.fromkeys((*SIZE_FIELDS, *own)))


def env_length(cfg: Config) -> int:
    from rcmdp_jax import envs

    return int(envs.spec(cfg.env).episode_length)


def derived_counts(cfg: Config) -> list[tuple[str, str, int]]:
    """The counts the train step keeps in int32: ``(field that sets it, what, count)``."""
    it = cfg.num_iterations
    per_batch = 1 if cfg.episodic else max(cfg.num_minibatches, 1)  # MCPMD: one episode an iteration
    return [
        ("total_timesteps", "num_iterations x n_envs x n_steps policy steps", (not cfg.episodic) * it * cfg.batch_size),
        (
            "epochs",
            "the alpha schedule's num_iterations x epochs ticks",
            it * (cfg.epochs if cfg.alpha_tick == "epoch" else 1),
        ),
        ("epochs", "epochs x minibatches gradient steps an iteration", cfg.epochs * per_batch),
        ("dual_epochs", "dual_epochs x dual_batch/dual_minibatch ascent steps an iteration", cfg.dual_steps),
        *(row for plugin in plug_ins.used(cfg) for row in plugin.counts(cfg, env_length(cfg))),  # the plug-ins' own
    ]


def check_counts(cfg: Config, where: str) -> None:

    for field, what, n in derived_counts(cfg):
        if n > INT32_MAX:
            raise PlanError(f"--set {field}: {where}: {what} = {n:,} is beyond the int32 counters of the train step "
                             f"(at most {INT32_MAX:,}); make it smaller")  # fmt: skip


def kernel_count(env: str) -> int:
    """The robustness test's kernels: levels x the 2^n sign directions of the box, ``n``
    the environment's ``DomainSpec.kernel_size`` (else its kernel's shape from
    ``jax.eval_shape``: no backend starts)."""
    import jax

    from rcmdp_jax import envs
    from rcmdp_jax.evaluate import DISTORTION_LEVELS

    n = envs.spec(env).kernel_size
    if n is None:
        n = math.prod(jax.eval_shape(lambda: envs.make(env)[1].xi_c).shape)
    return len(DISTORTION_LEVELS) * 2**n


def lane_bytes(cfg: Config) -> float:
    """Bytes one lane (a seed of an algorithm) of ``cfg`` needs while training: rough upper
    figures (a step record and its intermediates <= 48 floats plus the activations, an
    episode lane 256 floats, parameters with gradients and optimizer state five times)."""
    from rcmdp_jax import adversary

    layers = [[16, *h, 16] for h in (cfg.policy_hidden, cfg.critic_hidden)]  # observations, outputs: <= 16 wide
    n_params = sum(a * b for w in layers for a, b in zip(w, w[1:]))
    act = 4.0 * sum(cfg.policy_hidden + cfg.critic_hidden)
    record, episode = 192.0 + act, 1024.0 + act
    need = cfg.batch_size * record + cfg.eval_episodes * episode + 20.0 * n_params + 3.0 * cfg.minibatch_size * act
    if cfg.constrained:  # the multiplier batch, or the start-value estimate's parallel episodes
        need += cfg.dual_batch * record + cfg.n_dual_episodes * episode
    if cfg.robust:  # the robust method's own episodes (``Plugin.lane_bytes``)
        need += adversary.method_class(cfg.adversary).lane_bytes(cfg, record, episode)
    return need


def sweep_bytes(cfg: Config, n_test: int, seeds: int, kernels: int) -> float:
    """The robustness test of one algorithm: one seed's episode lanes at a time, and every
    seed's results (``V``, ``C``, ``EpCost``, ``bound``)."""
    act = 4.0 * sum(cfg.policy_hidden)
    lanes = float(kernels) * n_test
    return lanes * (1024.0 + act) + seeds * lanes * 32.0


def _default(cfg: Config, field: str) -> Config:
    """``cfg`` with ``field`` (a config field, or a plug-in's option) at its default."""
    if field in {f.name for f in dataclasses.fields(Config)}:
        return dataclasses.replace(cfg, **{field: getattr(Config(), field)})
    return cfg.replace(options=tuple((k, v) for k, v in cfg.options if k != field))


def family_bytes(members, n_test: int, seeds: int, kernels: int) -> float:
    """Bytes a family of ``members`` needs: the larger of its training (every lane) and
    the robustness sweep of one member."""
    train = seeds * sum(lane_bytes(c) for c in members)
    return max(train, max(sweep_bytes(c, n_test, seeds, kernels) for c in members))


def machine_bytes() -> int | None:
    """This machine's memory in bytes (None where the system does not say: no check)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not on a POSIX system
        return None


def check_memory(configs: dict, seeds: int, n_test: int | None) -> None:
    """Refuse a plan whose largest family (seeds x its algorithms, trained at once) or
    largest robustness sweep would not fit in this machine's memory, naming the field
    (or ``--n-test``) whose default would shrink it most."""
    from rcmdp_jax import envs

    total = machine_bytes()
    if total is None:
        return
    for env, cfgs in configs.items():
        default_test = envs.spec(env).n_test
        kernels = kernel_count(env)
        families: dict = {}
        for cfg in cfgs.values():
            families.setdefault(cfg.learner, []).append(cfg)
        for members in families.values():
            n = n_test or default_test
            need = family_bytes(members, n, seeds, kernels)
            if need <= 0.9 * total:
                continue
            fields = size_fields(members)
            shrink = {f: family_bytes([_default(c, f) for c in members], n, seeds, kernels) for f in fields}
            shrink["--n-test"] = family_bytes(members, default_test, seeds, kernels)
            field = min(shrink, key=shrink.get)
            raise PlanError(f"{env}: {len(members)} algorithm(s) x {seeds} seed(s) need about {need / 2**30:,.1f} "
                             f"GiB of this machine's {total / 2**30:,.1f} GiB, mostly for {field}; make it "
                             "smaller or use fewer seeds")  # fmt: skip

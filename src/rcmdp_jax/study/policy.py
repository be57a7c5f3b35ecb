"""A trained policy read back from a run folder: ``load_policy(RUN, algorithm, seed)``
gives its config, actor parameters and environment, a jit-able ``act(obs, key=None)``
and ``evaluate(kernel=...)``, the deterministic policy's return and constraint values
on one kernel named by its fields (``"masspole=+50%"``), with standard errors over the
episodes. ``rcmdp eval`` (``console.evaluate``) is the same from the command line.

The checkpoint is restored as ``--eval-only`` restores it (``checkpoint.restore`` into the
shape ``make_train`` of the run's config gives), so every run folder that still resumes
loads. ``evaluate`` runs the robustness test's episodes (``evaluate.policy_sweep``, the
deterministic policy): with the run's seed keys (``seed=None``) and its ``n_test``
episodes, its numbers at a grid kernel are those ``test_results.npz`` holds (up to the
float32 rounding of another compiled program: the same episodes, summed in another order)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax.study.run_folder import RunFolder, holder, in_use
from rcmdp_jax.study.run_plan import RunFolderError

# what the sweep's per-episode outputs ``[L, D, E]`` are called in an evaluation (a key the
# sweep adds with a constraint axis ``[L, D, E, m]`` is reported per constraint under its own name)
EPISODE_METRICS = {"V": "return", "bound": "at_state_bound"}


def mean_se(x) -> tuple[float, float]:
    """The mean over episodes (axis 0) and its standard error (``std / sqrt(n)``, ``ddof=1``;
    NaN for one episode)."""
    x = np.asarray(x, np.float64)
    n = x.shape[0]
    se = x.std(0, ddof=1) / np.sqrt(n) if n > 1 else np.full(x.shape[1:], np.nan)
    return x.mean(0), se


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """``evaluate``'s answer. ``metrics``: ``{name: (mean, standard error)}`` of the
    per-episode values (``return``: the discounted return; ``at_state_bound``: the share of
    episodes whose kernel reached the state bound); ``constraints``: ``{cost name: {metric:
    (mean, se)}}`` (``C``: the discounted constraint value, kept when <= 0; and any other
    per-constraint value the robustness test gives); ``episodes``: the raw per-episode arrays
    (``V [E]``, ``C [E, m]``, ...); ``xi``: the kernel; ``in_box``: whether it lies in the
    training box."""

    env: str
    algorithm: str
    seed: int
    kernel: str
    xi: np.ndarray
    in_box: bool
    n_episodes: int
    metrics: dict
    constraints: dict
    episodes: dict

    def to_dict(self) -> dict:
        """Plain numbers (JSON)."""
        num = lambda x: float(x) if np.isfinite(x) else None  # noqa: E731  strict JSON: no NaN (null)
        pair = lambda ms: {"mean": num(ms[0]), "se": num(ms[1])}  # noqa: E731
        return {"env": self.env, "algorithm": self.algorithm, "seed": self.seed, "kernel": self.kernel,
                "xi": np.asarray(self.xi).tolist(), "in_box": self.in_box, "n_episodes": self.n_episodes,
                "metrics": {k: pair(v) for k, v in self.metrics.items()},
                "constraints": {c: {k: pair(v) for k, v in d.items()}
                                for c, d in self.constraints.items()}}  # fmt: skip

    def lines(self) -> list[str]:
        """What ``rcmdp eval`` prints: one line a value, mean ± standard error."""
        box = "" if self.in_box else " (outside the training box)"
        out = [f"{self.env} {self.algorithm} seed {self.seed} on {self.kernel}{box}: "
               f"{self.n_episodes} episode(s) of the deterministic policy, mean ± standard error"]  # fmt: skip
        rows = [(k, ms) for k, ms in self.metrics.items()]
        rows += [(f"{k} {cost}", ms) for cost, d in self.constraints.items() for k, ms in d.items()]
        width = max([16] + [len(k) for k, _ in rows])  # one column of numbers, however long a name
        out += [f"  {k:<{width}} {m:10.4f} ± {s:.4f}" for k, (m, s) in rows]
        if not all(np.isfinite(m) for _, (m, _s) in rows):
            out.append("note: some values are not finite (NaN or inf): the episodes diverged on this kernel"
                       + ("" if self.in_box else ", far outside the box the policy was trained on"))  # fmt: skip
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class LoadedPolicy:
    """One trained seed of one algorithm of a run folder (``load_policy``)."""

    run: RunFolder
    env_name: str
    algorithm: str
    seed: int
    config: Any  # rcmdp_jax.Config
    params: Any  # the actor's parameters
    env: Any
    env_params: Any  # the nominal kernel and the box
    actor: Any  # the flax module
    n_test: int  # the run's test episodes per kernel
    test_key: Any  # the robustness test's key of this seed

    def act(self, obs, key=None):
        """The action at ``obs`` (one observation; ``jax.vmap`` for a batch): the
        distribution's mode (deterministic) when ``key`` is None, else drawn with ``key``.
        Jit-able (``jax.jit(policy.act)``)."""
        obs = self.observation(obs)
        if key is not None:
            check_key(key)
        dist = self.actor.apply(self.params, obs)
        return dist.mode() if key is None else dist.sample(seed=key)

    def observation(self, obs):
        """``obs`` as one observation of this environment (an array of shape ``(obs_dim,)``, or
        a list of numbers), else ``TypeError`` (not numbers) / ``ValueError`` (another shape)
        in one line."""
        want = (int(self.env.obs_dim),)
        if not isinstance(obs, jax.Array):  # a tracer is one: checked by its shape below
            try:
                if isinstance(obs, (str, bytes)) or obs is None:
                    raise TypeError
                obs = np.asarray(obs)
                if obs.dtype.kind not in "iuf":
                    raise TypeError
            except (TypeError, ValueError):
                raise TypeError(f"obs must be one observation, an array of {want[0]} numbers, got "
                                f"{type(obs).__name__}") from None  # fmt: skip
            obs = jnp.asarray(obs, jnp.float32)
        elif not (jnp.issubdtype(obs.dtype, jnp.floating) or jnp.issubdtype(obs.dtype, jnp.integer)):
            raise TypeError(f"obs must be one observation, an array of {want[0]} numbers, got dtype {obs.dtype}")
        if tuple(obs.shape) != want:
            raise ValueError(f"obs must have shape {want} (one observation of {self.env_name}; jax.vmap(policy.act) "
                             f"for a batch), got {tuple(obs.shape)}")  # fmt: skip
        return obs

    def _episodes(self, n: int):
        """The jitted ``policy_sweep`` of one kernel (axes ``[1, 1]``), kept per policy shape
        (``compiled.cached``)."""
        from rcmdp_jax.evaluate import policy_sweep
        from rcmdp_jax.rollout import Policy
        from rcmdp_jax.study.compiled import cached, policy_key

        env, actor = self.env, self.actor

        def run(params, env_params, xi, key, gamma):
            kernels = jax.tree.map(lambda x: jnp.asarray(x)[None, None], env_params.replace(xi=xi))
            return policy_sweep(env, kernels, Policy(actor, params, deterministic=True), n, gamma, key)

        return cached(("one kernel", *policy_key(self.env_name, self.config), n), lambda: jax.jit(run))

    @property
    def field_names(self) -> tuple[str, ...]:
        """The kernel's entries as the run's report names them (``kernel_text.kernel_names``)."""
        from rcmdp_jax.kernel_text import kernel_names

        return kernel_names(self.env_name, np.shape(self.env_params.xi_c))

    def kernel(self, text: str | None = None) -> np.ndarray:
        """The kernel ``xi`` named by ``text`` (``kernel_text.parse``: ``"g=+20%,m=11.0"``)."""
        from rcmdp_jax.kernel_text import parse

        return parse(text, np.asarray(self.env_params.xi_c), self.field_names)

    def evaluate(self, kernel: str | None = None, n_episodes: int | None = None, seed: int | None = None) -> Evaluation:
        """The deterministic policy on ``kernel`` (``None``: the nominal one), ``n_episodes``
        fresh episodes (default the run's ``n_test``) from key ``PRNGKey(seed)``, or with
        ``seed=None`` from the robustness test's key of this seed (then, with the run's
        ``n_test`` episodes, the episodes ``test_results.npz`` holds at a grid kernel)."""
        from rcmdp_jax import box
        from rcmdp_jax.kernel_text import describe
        from rcmdp_jax.study.report import cost_names

        xi = self.kernel(kernel)
        n = self.n_test if n_episodes is None else n_episodes
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 2**31 - 1:
            raise ValueError(f"n_episodes must be a positive whole number (at most 2^31 - 1), got {n!r}")
        if seed is not None:
            check_seed("seed", seed, " (leave it out for the robustness test's episodes)")
        check_episodes_memory(self.config, int(n))  # before anything is allocated
        key = self.test_key if seed is None else jax.random.PRNGKey(int(seed))
        out = self._episodes(int(n))(self.params, self.env_params, xi, key, np.float32(self.config.hparams.gamma))
        episodes = {k: np.asarray(v)[0, 0] for k, v in out.items()}  # [E] or [E, m]
        # a per-episode value is one metric; one with a constraint axis is reported per constraint
        metrics = {EPISODE_METRICS.get(k, k): mean_se(v) for k, v in episodes.items() if v.ndim == 1}
        metrics = {k: (float(mu), float(se)) for k, (mu, se) in metrics.items()}
        per_cost = {k: mean_se(v) for k, v in episodes.items() if v.ndim == 2}
        constraints = {
            c: {k: (float(mu[j]), float(se[j])) for k, (mu, se) in per_cost.items()}
            for j, c in enumerate(cost_names(self.env_name, self.env.num_constraints))
        }
        xi_c, kappa = np.asarray(self.env_params.xi_c), np.asarray(self.env_params.kappa)
        in_box = bool(np.all(np.abs(xi - xi_c) <= box.reach(kappa)))
        said = describe(xi, xi_c, self.field_names)
        return Evaluation(self.env_name, self.algorithm, self.seed, said, xi, in_box, int(n), metrics, constraints,
                          episodes)


def check_key(key) -> None:
    """``key``: a JAX random key (``jax.random.PRNGKey(0)`` or ``jax.random.key(0)``), else ``TypeError``."""
    ok = isinstance(key, jax.Array) and (
        jnp.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ()
        or key.dtype == jnp.uint32 and key.shape == (2,)
    )
    if not ok:
        raise TypeError(f"key must be None (the deterministic action) or a JAX random key (jax.random.PRNGKey(0)), "
                        f"got {type(key).__name__} {getattr(key, 'shape', '')}".rstrip())  # fmt: skip


def check_seed(what: str, seed, hint: str = "") -> None:
    """A seed of ``PRNGKey``: a whole number in [0, 2**32), else ``ValueError`` naming ``what``."""
    from rcmdp_jax.plugin import check_seed as check

    try:
        check("", seed)
    except ValueError:
        raise ValueError(f"{what} must be a whole number in [0, 2**32){hint}, got {seed!r}") from None


def check_episodes_memory(cfg, n: int) -> None:
    """Refuse ``n`` episodes on one kernel that would not fit in this machine's memory (the
    runner's estimate of a robustness sweep, ``sizes.sweep_bytes``), before anything is
    allocated."""
    from rcmdp_jax.sizes import machine_bytes, sweep_bytes

    total = machine_bytes()
    if total is None:
        return
    need, one = sweep_bytes(cfg, n, 1, 1), sweep_bytes(cfg, 1, 1, 1)
    if need > 0.9 * total:
        raise ValueError(f"n_episodes={n:,} needs about {need / 2**30:,.1f} GiB of this machine's "
                         f"{total / 2**30:,.1f} GiB; at most about {int(0.9 * total // one):,} fit")  # fmt: skip


def _choice(what: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{what}={value!r} is not in the run; choose one of: {', '.join(map(str, allowed))}")


def load_policy(run, algorithm: str, seed: int, env: str | None = None) -> LoadedPolicy:
    """Seed ``seed`` (0 .. seeds-1) of ``algorithm`` trained in the run folder ``run``
    (``rcmdp`` / ``experiments/run.py``'s ``--out``); ``env`` is needed only when the run
    holds several environments. ``ValueError`` in one line (``RunFolderError`` for the
    folder) naming what is wrong and what is allowed, before anything compiles."""
    from rcmdp_jax import checkpoint, envs, make_train
    from rcmdp_jax.networks import build_networks

    if not isinstance(run, (str, os.PathLike)) or not str(run).strip():
        raise TypeError(f"run must be a run folder (a path: str or pathlib.Path), got {run!r}")
    folder = RunFolder(run)
    plan = folder.open("load_policy")  # run.json and the saved files checked as --resume checks them
    if env is None and len(plan.envs) > 1:
        raise ValueError(f"env: the run holds {len(plan.envs)} environments; name one of: {', '.join(plan.envs)}")
    env = plan.envs[0] if env is None else env
    _choice("env", env, plan.envs)
    _choice("algorithm", algorithm, plan.algos)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed={seed!r} ({type(seed).__name__}) must be a whole number (int): one of the run's seeds "
                         f"0 .. {plan.seeds - 1}")  # fmt: skip
    if not 0 <= seed < plan.seeds:
        raise ValueError(f"seed={seed!r}: the run trained seeds 0 .. {plan.seeds - 1}")
    ckpt = folder.ckpt_dir(env, algorithm)
    if not checkpoint.exists(ckpt) and (pid := holder(folder.root)) is not None:
        raise RunFolderError(f"load_policy: {env}/{algorithm} is not trained yet: {in_use(folder.root, pid)}")
    if not checkpoint.exists(ckpt):
        raise RunFolderError(f"load_policy: no finished checkpoint of {env}/{algorithm} in {folder.root} (training "
                             f"did not finish: rcmdp --resume --out {folder.root})")  # fmt: skip
    cfg = plan.configs[env][algorithm]
    all_keys = jax.random.split(jax.random.PRNGKey(plan.seed), plan.seeds)
    folder.check_checkpoints(plan, all_keys, {env: [[algorithm]]}, "load_policy: ")
    try:
        result = checkpoint.restore(ckpt, checkpoint.abstract_result(make_train(cfg), all_keys))
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        why = err if isinstance(err, checkpoint.Damaged) else f"{type(err).__name__}: {first}" if first else type(err).__name__
        raise RunFolderError(f"load_policy: the checkpoint {ckpt} cannot be read ({why}); it is damaged: rcmdp --resume "
                             f"--out {folder.root} sets it aside and trains it again") from None  # fmt: skip
    params = jax.tree.map(lambda x: jnp.asarray(x[seed]), result.state.params["actor"])
    robust_env, env_params = envs.make(env)
    actor, _ = build_networks(cfg, robust_env)
    n_test = plan.n_test or envs.spec(env).n_test
    test_key = jax.random.split(jax.random.PRNGKey(plan.seed + 1), plan.seeds)[seed]  # as Study.test draws them
    return LoadedPolicy(folder, env, algorithm, int(seed), cfg, params, robust_env, env_params, actor, n_test, test_key)

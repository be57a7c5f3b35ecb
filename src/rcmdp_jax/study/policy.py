"""A trained policy read back from a run folder (``load_policy(RUN, algorithm, seed)``): a jit-able ``act(obs)``
and ``evaluate(kernel=...)``, its values on one kernel, mean ± standard error (``rcmdp eval``)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax import box, checkpoint, envs, make_train, verdict
from rcmdp_jax.chunked import cached, policy_key
from rcmdp_jax.evaluate import policy_sweep
from rcmdp_jax.kernel_text import describe, kernel_names, parse
from rcmdp_jax.networks import build_networks
from rcmdp_jax.plugin import check_count, check_seed, closest
from rcmdp_jax.rollout import Policy, check_key, check_observation, cost_discounts
from rcmdp_jax.sizes import machine_bytes, sweep_bytes
from rcmdp_jax.stats import mean_se
from rcmdp_jax.study.run_folder import RunFolder, holder
from rcmdp_jax.study.run_plan import RunFolderError

# what the sweep's per-episode outputs ``[L, D, E]`` are called in an evaluation (a key the
# sweep adds with a constraint axis ``[L, D, E, m]`` is reported per constraint under its own name)
EPISODE_METRICS = {"V": "return", "bound": "at_state_bound"}


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """``evaluate``'s answer: ``metrics`` ``{name: (mean, se)}`` over the episodes, ``constraints`` ``{cost name:
    {metric: (mean, se)}}``, ``episodes`` the per-episode arrays, ``in_box`` whether ``xi`` is in the training box."""

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
    verdicts: dict = dataclasses.field(default_factory=dict)  # {cost name: one line, rcmdp_jax.verdict's}

    def to_dict(self) -> dict:
        """Plain numbers (strict JSON: a value that is not finite is null)."""
        num = lambda x: float(x) if np.isfinite(x) else None
        pair = lambda ms: {"mean": num(ms[0]), "se": num(ms[1])}
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "episodes"}
        out["xi"] = np.asarray(self.xi).tolist()
        out["metrics"] = {k: pair(v) for k, v in self.metrics.items()}
        out["constraints"] = {c: {k: pair(v) for k, v in d.items()} for c, d in self.constraints.items()}
        return out

    def lines(self) -> list[str]:
        """What ``rcmdp eval`` prints: one line a value, mean ± standard error."""
        box = "" if self.in_box else " (outside the training box)"
        out = [f"{self.env} {self.algorithm} seed {self.seed} on {self.kernel}{box}: "
               f"{self.n_episodes} episode(s) of the deterministic policy, mean ± standard error"]  # fmt: skip
        rows = list(self.metrics.items())
        rows += [(f"{k} {cost}", ms) for cost, d in self.constraints.items() for k, ms in d.items()]
        said = [(f"verdict {cost}", text) for cost, text in self.verdicts.items()]
        width = max([16] + [len(k) for k, _ in rows + said])  # one column of numbers, however long a name
        out += [f"  {k:<{width}} {m:10.4f} ± {s:.4f}" for k, (m, s) in rows]
        out += [f"  {k:<{width}} {text}" for k, text in said]
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
        """The action at one observation: the mode when ``key`` is None, else drawn with ``key``; jit-able."""
        obs = check_observation(obs, int(self.env.obs_dim), self.env_name)
        if key is not None:
            check_key(key, "key")
        dist = self.actor.apply(self.params, obs)
        return dist.mode() if key is None else dist.sample(seed=key)

    @property
    def field_names(self) -> tuple[str, ...]:
        """The kernel's entries as the run's report names them (``kernel_text.kernel_names``)."""
        return kernel_names(self.env_name, np.shape(self.env_params.xi_c))

    def kernel(self, text: str | None = None) -> np.ndarray:
        """The kernel ``xi`` named by ``text`` (``kernel_text.parse``: ``"g=+20%,m=11.0"``)."""
        return parse(text, np.asarray(self.env_params.xi_c), self.field_names)

    def evaluate(self, kernel: str | None = None, n_episodes: int | None = None, seed: int | None = None) -> Evaluation:
        """The deterministic policy on ``kernel`` (None: nominal), ``n_episodes`` (default the run's ``n_test``) from
        ``PRNGKey(seed)``; ``seed=None``: the robustness test's key (the episodes ``test_results.npz`` holds)."""
        from rcmdp_jax.envs.base import RobustEnvironment  # here: importing it starts JAX's backend

        xi = self.kernel(kernel)
        n = self.n_test if n_episodes is None else n_episodes
        check_count("n_episodes", int(n) if isinstance(n, np.integer) else n)  # the one wording of a count
        if seed is not None:
            check_seed("seed", seed)
        env, actor, n = self.env, self.actor, int(n)
        total, need = machine_bytes(), sweep_bytes(self.config, n, 1, 1)  # the runner's estimate of a sweep
        if total is not None and need > 0.9 * total:  # refused before anything is allocated
            fit = int(0.9 * total // sweep_bytes(self.config, 1, 1, 1))
            raise ValueError(f"n_episodes={n:,} needs about {need / 2**30:,.1f} GiB of this machine's "
                             f"{total / 2**30:,.1f} GiB; at most about {fit:,} fit")  # fmt: skip

        def one_kernel(params, env_params, xi, key, gamma):  # the sweep's axes [1, 1]: one level, one kernel
            kernels = jax.tree.map(lambda x: jnp.asarray(x)[None, None], env_params.replace(xi=xi))
            return policy_sweep(env, kernels, Policy(actor, params, deterministic=True), n, gamma, key)

        run = cached(("one kernel", *policy_key(self.env_name, self.config), n), lambda: jax.jit(one_kernel))
        key = self.test_key if seed is None else jax.random.PRNGKey(int(seed))
        out = run(self.params, self.env_params, xi, key, np.float32(self.config.hparams.gamma))
        episodes = {k: np.asarray(v)[0, 0] for k, v in out.items()}  # [E] or [E, m]
        stats = {k: mean_se(v) for k, v in episodes.items()}  # a value with a constraint axis: per constraint
        bounded = type(env).kernel_saturated is not RobustEnvironment.kernel_saturated  # a state bound (Inventory's)
        kept = {k: ms for k, ms in stats.items() if k != "bound" or bounded}  # else never reached: not said
        metrics = {EPISODE_METRICS.get(k, k): (float(m), float(s)) for k, (m, s) in kept.items() if m.ndim == 0}
        names = envs.cost_names(self.env_name, self.env.num_constraints)
        per = {k: ms for k, ms in stats.items() if ms[0].ndim == 1}  # with a constraint axis
        constraints = {c: {k: (float(m[j]), float(s[j])) for k, (m, s) in per.items()} for j, c in enumerate(names)}
        xi_c, kappa = np.asarray(self.env_params.xi_c), np.asarray(self.env_params.kappa)
        in_box = bool(np.all(np.abs(xi - xi_c) <= box.reach(kappa)))
        gamma_c = cost_discounts(self.env, self.config.hparams.gamma)
        verdicts = verdict.said_of(verdict.kinds(self.env), gamma_c, names, episodes) if "C" in episodes else {}
        return Evaluation(self.env_name, self.algorithm, self.seed, describe(xi, xi_c, self.field_names), xi, in_box, n,
                          metrics, constraints, episodes, verdicts)  # fmt: skip


def load_policy(run, algorithm: str, seed: int, env: str | None = None) -> LoadedPolicy:
    """Seed ``seed`` of ``algorithm`` trained in the run folder ``run`` (``env``: needed when it holds
    several); ``ValueError`` (``RunFolderError`` for the folder) before anything compiles."""
    if not isinstance(run, (str, os.PathLike)) or not str(run).strip():
        raise TypeError(f"run must be a run folder (a path: str or pathlib.Path), got {run!r}")
    folder = RunFolder(run)
    plan = folder.open("load_policy", rewrites=False)  # run.json and the saved files checked as --resume checks them
    if env is None and len(plan.envs) > 1:
        raise ValueError(f"env: the run holds {len(plan.envs)} environments; name one of: {', '.join(plan.envs)}")
    env = plan.envs[0] if env is None else env
    for what, value, allowed in (("env", env, plan.envs), ("algorithm", algorithm, plan.algos)):
        if value not in allowed:
            raise ValueError(f"{what}={value!r} is not in the run{closest(value, allowed)}; choose one of: "
                             f"{', '.join(map(str, allowed))}")  # fmt: skip
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed={seed!r} ({type(seed).__name__}) must be a whole number (int): one of the run's seeds "
                         f"0 .. {plan.seeds - 1}")  # fmt: skip
    if not 0 <= seed < plan.seeds:
        raise ValueError(f"seed={seed!r}: the run trained seeds 0 .. {plan.seeds - 1}")
    if not folder.trained(env, algorithm) and (busy := holder(folder.root)) is not None:
        raise RunFolderError(f"load_policy: {env}/{algorithm} is not trained yet: {busy}")
    if not folder.trained(env, algorithm):
        raise RunFolderError(f"load_policy: no finished checkpoint of {env}/{algorithm} in {folder.root} (training "
                             f"did not finish: rcmdp --resume --out {folder.root})")  # fmt: skip
    cfg = plan.configs[env][algorithm]
    all_keys = jax.random.split(jax.random.PRNGKey(plan.seed), plan.seeds)
    folder.check_checkpoints(plan, all_keys, {env: [[algorithm]]}, "load_policy: ")
    ckpt = folder.ckpt_dir(env, algorithm)
    try:
        result = checkpoint.restore(ckpt, checkpoint.abstract_result(make_train(cfg), all_keys), envs.make(env)[1])
    except checkpoint.Damaged as why:
        raise RunFolderError(f"load_policy: the checkpoint {ckpt} cannot be read ({why}); it is damaged: rcmdp --resume "
                             f"--out {folder.root} sets it aside and trains it again") from None  # fmt: skip
    params = jax.tree.map(lambda x: jnp.asarray(x[seed]), result.state.params["actor"])
    robust_env, env_params = envs.make(env)
    actor, _ = build_networks(cfg, robust_env)
    test_key = jax.random.split(jax.random.PRNGKey(plan.seed + 1), plan.seeds)[seed]  # as Study.test draws them
    n = plan.n_test or envs.spec(env).n_test  # --n-test, else the spec's
    return LoadedPolicy(folder, env, algorithm, int(seed), cfg, params, robust_env, env_params, actor, n, test_key)

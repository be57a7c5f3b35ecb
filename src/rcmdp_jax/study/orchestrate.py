"""The study: per environment and family, train (or restore), test on the robustness grid, optionally search
the box for the worst kernel, then report. ``Study(plan, folder, ...).run()``: the exit status."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np

from rcmdp_jax import checkpoint, envs, family, make_train, snapshots
from rcmdp_jax.chunked import Prepared, cached, env_identity, fmt, policy_key, train_prepared
from rcmdp_jax.divergence import diverged_seeds, nonfinite_episodes
from rcmdp_jax.envs.numbers import program_key
from rcmdp_jax.evaluate import make_eval
from rcmdp_jax.program_store import policy_program
from rcmdp_jax.rollout import cost_discounts
from rcmdp_jax.sharding import gather_blocks, process_block, sharded_blocks
from rcmdp_jax.study.report import write_env_report
from rcmdp_jax.study.run_folder import RunFolder, load_npz
from rcmdp_jax.study.run_plan import Plan
from rcmdp_jax.study.runtime import program_name, ticking
from rcmdp_jax.study.training_log import CSV_NAME, TrainingLog
from rcmdp_jax.worst_case import compare_with_grid, corner_starts, make_worst_case


class Study:
    def __init__(self, plan: Plan, folder: RunFolder, resume: bool, eval_only: bool, mesh=None,
                 worst_case: str | None = None, plots: bool = True, tensorboard: bool = False):  # fmt: skip
        self.plan, self.folder, self.resume, self.eval_only = plan, folder, resume, eval_only
        self.mesh, self.worst_case, self.plots, self.tensorboard = mesh, worst_case, plots, tensorboard
        self.all_keys = jax.random.split(jax.random.PRNGKey(plan.seed), plan.seeds)
        self.block = process_block(plan.seeds)  # this process's seeds (all of them on one host)
        self.keys = np.asarray(self.all_keys[self.block])  # host data: the compile thread must not touch devices
        self.writer = jax.process_index() == 0
        self.cfgs = {e: {a: plan.configs[e][a] for a in plan.algos} for e in plan.envs}
        self.groups = {e: family.group(self.cfgs[e]) for e in plan.envs}
        # what went wrong, for the end of the run, by ``env/algo``: {name: (seeds diverged, seeds)}, no
        # checkpoint (--eval-only), a checkpoint that could not be read
        self.diverged, self.missing, self.damaged = {}, [], []
        # a family is trained (as a whole, so resumed runs give identical numbers) while any
        # member lacks a checkpoint; the next family compiles in a background thread
        done = lambda e, g: eval_only or all(folder.trained(e, a) for a in g)
        self.todo = [(e, tuple(g)) for e in plan.envs for g in self.groups[e] if not done(e, g)]
        self.pool, self.pending = ThreadPoolExecutor(max_workers=1), {}

    def _label(self, env: str, algos) -> str:
        numbers = "+".join(str(self.plan.algos.index(a) + 1) for a in algos)
        return f"[{env} {numbers}/{len(self.plan.algos)}] {', '.join(algos)}:"

    def prepare(self, i: int) -> None:
        """Compile family ``i`` of ``todo`` in the background thread."""
        if i < len(self.todo) and self.todo[i] not in self.pending:
            e, g = self.todo[i]
            future = self.pool.submit(Prepared, [self.cfgs[e][a] for a in g], self.keys, self.plan.vmap, self.mesh)
            self.pending[self.todo[i]] = future, time.perf_counter()

    def train(self, env: str, group: list[str], missing: list[str]) -> dict:
        """Train a family whose members ``missing`` lack a checkpoint; save those."""
        label, idx = self._label(env, group), self.todo.index((env, tuple(group)))
        self.prepare(idx)
        future, since = self.pending.pop((env, tuple(group)))
        what = f"compiling the training program ({len(group)} algorithm(s) x {self.plan.seeds} seed(s))"
        with ticking(label, what, since):
            prepared = future.result()
        self.prepare(idx + 1)
        dirs = {a: self.folder.algo_dir(env, a) for a in group}
        log = TrainingLog(dirs, env, self.tensorboard, algos=missing if self.writer else [])
        try:  # (several processes: no process's log is called while it trains)
            per_member, train_s = train_prepared(prepared, label, log.chunk, dirs[group[0]] / snapshots.FILE)
        except BaseException:  # Ctrl-C, a full disk: the event files written so far are closed
            log.close()
            raise
        timing = {"compile_s": prepared.compile_s, "train_s": train_s, "family": list(group), "seed": self.plan.seed}
        trained = {}
        for algo, result in zip(group, per_member):
            if algo not in missing:  # trained again only to keep the family whole
                continue
            result = trained[algo] = gather_blocks(result, self.plan.seeds)
            ckpt = self.folder.ckpt_dir(env, algo)
            if self.writer:
                metrics = jax.tree.map(np.asarray, result.metrics)
                self.folder.save_training(env, algo, metrics, timing)
                log.finish(algo, metrics)
                if ckpt.exists():  # incomplete (no metadata): keep it aside
                    print(f"{label} incomplete checkpoint of {algo} moved to {checkpoint.set_aside(ckpt)}", flush=True)
            # every process: orbax writes from process 0 and keeps the others in step
            checkpoint.save(ckpt, jax.tree.map(np.asarray, result))
        return trained

    def restore(self, env: str, algo: str):
        """A finished algorithm's trained state, or None (tested before, no or a damaged checkpoint)."""
        label, ckpt = self._label(env, [algo]), self.folder.ckpt_dir(env, algo)
        if not self.folder.trained(env, algo):
            print(f"{label} no checkpoint in {self.folder.algo_dir(env, algo)}; skipped", flush=True)
            self.missing.append(f"{env}/{algo}")
            return None
        if not self.eval_only and self.folder.tested(env, algo, searched=bool(self.worst_case)):
            return None  # finished before: nothing to load (else tested again, then searched)
        cfg = self.cfgs[env][algo]
        abstract = cached(("layout", cfg, env_identity(env), self.all_keys.shape),
                          lambda: checkpoint.abstract_result(make_train(cfg), self.all_keys))  # fmt: skip
        try:
            result = checkpoint.restore(ckpt, abstract, envs.make(env)[1])
        except checkpoint.Damaged as why:
            print(f"{label} damaged checkpoint ({why}); moved to {checkpoint.set_aside(ckpt)}; "
                  f"run again with --resume to retrain {algo}", flush=True)  # fmt: skip
            self.damaged.append(f"{env}/{algo}")
            return None
        print(f"{label} restored from {ckpt}", flush=True)
        metrics = self.folder.algo_dir(env, algo) / "train_metrics.npz"
        if self.writer and not self.eval_only and metrics.exists() and not load_npz(metrics, strict=False):
            self.folder.save_training(env, algo, jax.tree.map(np.asarray, result.metrics))
            print(f"{label} {metrics.name} could not be read: re-created from the checkpoint", flush=True)
        return result

    def test(self, env: str, algo: str, result):
        """The robustness test: ``(V, C, diverged seeds, levels, test kernels' xi)``; None if all diverged."""
        label, plan, cfg = self._label(env, [algo]), self.plan, self.cfgs[env][algo]

        sweep = make_eval(cfg, plan.n_test)  # this environment's kernels: an argument of the program
        kept = policy_key(env, cfg, program=True)

        def build():  # the sweep of the config's policy shape, shared by algorithms and the env's numbers
            stored = policy_program("sweep", program_key(env), kept, n_test=plan.n_test, mesh=self.mesh)
            run = lambda actor, keys, gammas, kernels: sweep.on(kernels).from_keys(actor, keys, gammas)  # noqa: E731
            if self.mesh is not None:
                return sharded_blocks(run, self.mesh, stored, whole=1)
            return stored(jax.jit(run))

        sweep_fn = cached(("sweep", *kept, plan.n_test, self.mesh), build)
        gamma = cfg.hparams.gamma  # an argument of the sweep
        t0 = time.perf_counter()
        seed_keys = jax.random.split(jax.random.PRNGKey(plan.seed + 1), plan.seeds)[self.block]
        local = jax.tree.map(lambda x: x[self.block], result)
        with ticking(label, "the robustness test (compiled on its first call)"):
            gammas = np.full(len(seed_keys), gamma, np.float32)
            res = gather_blocks(sweep_fn(local.state.params["actor"], seed_keys, gammas, sweep.kernels), plan.seeds)
        V, C, bound = np.asarray(res["V"]), np.asarray(res["C"]), np.asarray(res["bound"])
        bad = diverged_seeds(result, cfg) | nonfinite_episodes(V, C)
        test_xi = np.asarray(sweep.kernels.xi)
        if self.writer:  # what C is: each constraint's discount and the episodes' length, beside the episode costs
            gamma_c = np.broadcast_to(cost_discounts(sweep.env, gamma), sweep.env.num_constraints).astype(np.float64)
            epcost = dict(EpCost=np.asarray(res["EpCost"]), horizon=np.int64(sweep.env.episode_length), gamma_c=gamma_c)
            self.folder.save_test(env, algo, V, C, bound, bad, sweep.levels, test_xi, plan.seed, **epcost)
        if bad.any():
            self.diverged[f"{env}/{algo}"] = (int(bad.sum()), int(bad.size))
            print(f"{label} DIVERGED: every seed has non-finite numbers; no result" if bad.all() else f"{label} "
                  f"WARNING: seed(s) {np.flatnonzero(bad).tolist()} diverged (non-finite numbers); left out of the "
                  "statistics", flush=True)  # fmt: skip
            if bad.all():
                return None
        at_bound = f", {100 * bound.mean():.1f}% of episodes at the state bound" if bound.any() else ""
        print(f"{label} sweep {V.shape} in {fmt(time.perf_counter() - t0)}: "
              f"mean test return {V[~bad].mean():.2f}{at_bound}", flush=True)  # fmt: skip
        return V, C, bad, sweep.levels, test_xi

    def search(self, env: str, algo: str, result, made, V, C, bad, levels, test_xi) -> None:
        """``--worst-case``: each seed's worst kernel, searched from the centre and the grid's worst corners."""
        cfg, label = self.cfgs[env][algo], self._label(env, [algo])
        key = ("search", *policy_key(env, cfg), self.worst_case)
        stored = policy_program("search", env, policy_key(env, cfg), objectives=self.worst_case)
        finder = cached(key, lambda: stored(jax.jit(make_worst_case(cfg, objectives=self.worst_case))))
        t0 = time.perf_counter()
        starts = corner_starts(*made, V[:, int(np.argmax(levels))].mean(-1))  # made: envs.make(env), once per env
        with ticking(label, "the worst-case search (compiled on its first call)"):
            gamma = np.float32(cfg.hparams.gamma)  # an argument of the search
            found = finder(result.state.params["actor"], starts, jax.random.PRNGKey(self.plan.seed + 2), gamma)
            found = jax.tree.map(np.asarray, found)
        if self.writer:
            self.folder.save_worst_case(env, algo, found)
        cmp = compare_with_grid(V[~bad], C[~bad], jax.tree.map(lambda x: x[~bad], found), made[0].lambda_max, test_xi)
        d = cmp["Return" if "Return" in cmp else "C0"]  # --worst-case costs: the first constraint's
        what = "lowest return" if d["lower_is_worse"] else "highest C"
        print(f"{label} worst case in {fmt(time.perf_counter() - t0)}: {what} per seed {d['grid'].mean():.2f} on the "
              f"grid, {d['search'].mean():.2f} by the search ({'lower' if d['lower_is_worse'] else 'higher'} in "
              f"{int(d['beyond'].sum())}/{d['beyond'].size} seeds)", flush=True)  # fmt: skip

    def environment(self, env: str) -> str | None:
        """Every family of ``env``: train or restore, test, search; then its report."""
        made = envs.make(env)
        if self.writer:
            self.folder.env_dir(env).mkdir(parents=True, exist_ok=True)
        for group in self.groups[env]:
            missing = [a for a in group if not self.folder.trained(env, a)]
            trained = self.train(env, group, missing) if missing and not self.eval_only else {}
            for algo in group:
                result = trained[algo] if algo in trained else self.restore(env, algo)
                npz = self.folder.algo_dir(env, algo) / "train_metrics.npz"  # an older run folder: its CSV from it
                if self.writer and not npz.with_name(CSV_NAME).exists() and (m := load_npz(npz, strict=False)):
                    TrainingLog({algo: npz.parent}, env, False, algos=[]).finish(algo, m)
                if result is None:
                    continue
                tested = self.test(env, algo, result)
                if tested is not None and self.worst_case:
                    self.search(env, algo, result, made, *tested)
        if not self.writer:
            return None
        algos = [a for a in self.plan.algos if f"{env}/{a}" not in self.missing + self.damaged]
        return write_env_report(self.folder, env, algos, made, self.cfgs[env], self.plots)

    def run(self) -> int:
        self.folder.check_checkpoints(self.plan, self.all_keys, self.groups)
        self.prepare(0)
        t_start = time.perf_counter()
        tables = {env: md for env in self.plan.envs if (md := self.environment(env)) is not None}
        self.pool.shutdown(wait=True, cancel_futures=True)
        print(f"\nfinished in {fmt(time.perf_counter() - t_start)}; results in {self.folder.root}\n")
        for env, md in tables.items():
            print(f"## {env}\n\n{md}")
        return self.exit_status()

    def exit_status(self) -> int:
        """0; 5: a checkpoint missing or damaged; 4: an algorithm with no seed left; 3: some seeds diverged."""
        damaged, missing = ", ".join(self.damaged), ", ".join(self.missing)
        if damaged or missing:
            why = f"damaged checkpoint(s) of {damaged} set aside; --resume retrains them"
            if not damaged:
                why = f"no checkpoint for {missing}: their sweep was not run and they are left out of the tables"
            print(f"{program_name()}: error: {why}", file=sys.stderr)
            return 5
        if self.diverged:
            print("DIVERGED seeds (left out of every statistic): "
                  + ", ".join(f"{k} {n}/{t}" for k, (n, t) in self.diverged.items()), flush=True)  # fmt: skip
            return 4 if any(n == t for n, t in self.diverged.values()) else 3
        return 0

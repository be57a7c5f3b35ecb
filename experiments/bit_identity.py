"""Bit-identity of the train step across a refactor (a check, not a test): tiny runs of every
robust method alone, a family per learner (every method as a lane), the dual estimators, the
worst_cost reading and the alpha schedules, every metric and the final parameters saved.

    PYTHONPATH=OLD_COPY python experiments/bit_identity.py save before   # the code before
    python experiments/bit_identity.py save after                        # the code after
    python experiments/bit_identity.py compare before after

The ``runner/`` runs train a family through the study's runner (``rcmdp_jax.chunked``: a compiled
program run chunk by chunk, its numbers and budget as arguments) on the study's three domains and
a gymnax preset, 7 iterations (the last chunk runs past the end). The ``worst_case/`` runs search the
box as the robustness test's ``--worst-case`` does (``worst_case.WorstCase``), each estimator, for
an untrained policy of two seeds.

Each run goes in its own ``.npz`` (a run already saved is skipped, so an interrupted save
resumes); ``ONLY=family`` saves only the runs whose tag holds ``family``. ``compare`` prints
the arrays that differ in any bit (NaNs equal) and the keys only one side has.
"""

from __future__ import annotations

import glob
import os
import sys
import warnings

import numpy as np

METHODS = ("ltma", "ltma-norm", "dr", "worst-of-n", "corners")


def jobs() -> list[tuple[str, str, list]]:
    """``(tag, "alone" | "family", [(env, algorithm, overrides), ...])`` of every run."""
    out = [(f"alone/cartpole/MDPO-Robust-Lag/{m}", "alone", [("cartpole", "MDPO-Robust-Lag", {"adversary": m})])
           for m in METHODS]  # fmt: skip
    for env, learner, robust in (("inventory", "MDPO", "MDPO-Robust-Lag"), ("inventory", "PPO", "PPO-Robust-Lag"),
                                 ("cartpole", "MCPMD", "RMCPMD-Lag")):  # fmt: skip
        members = [(env, learner, {}), (env, learner + "-Lag", {})]
        members.append((env, robust.replace("-Lag", "-Augmented-Lag"), {"adversary": "ltma"}))
        members += [(env, robust, {"adversary": m}) for m in METHODS]
        out.append((f"family/{env}/{learner}", "family", members))
    out.append(("alone/cartpole/RMCPMD-Lag/dr", "alone", [("cartpole", "RMCPMD-Lag", {"adversary": "dr"})]))
    out.append(("alone/cartpole/PPO-Lag", "alone", [("cartpole", "PPO-Lag", {})]))
    for est in ("gae", "step_cost"):
        out.append((f"alone/inventory/MDPO-Lag/{est}", "alone", [("inventory", "MDPO-Lag", {"dual_estimator": est})]))
    worst = {"adversary": "worst-of-n", "dual_reading": "worst_cost"}
    out.append(("alone/cartpole/worst_cost", "alone", [("cartpole", "MDPO-Robust-Lag", worst)]))
    schedules = (("fixed", "epoch"), ("geometric", "epoch"), ("restart", "batch"))
    out.append(("family/cartpole/sched", "family",
                [("cartpole", "MDPO-Robust-Lag", {"alpha_schedule": s, "alpha_tick": t}) for s, t in schedules]))  # fmt: skip
    for env, algos in (("cartpole", ("MDPO", "MDPO-Lag", "MDPO-Robust-Lag")), ("inventory", ("PPO-Lag", "PPO-Robust-Lag")),
                       ("inventory3d", ("MDPO-Lag", "MDPO-Robust-Augmented-Lag")), ("cartpole", ("MCPMD-Lag", "RMCPMD-Lag")),
                       ("gymnax:CartPole-v1", ("MDPO-Lag", "MDPO-Robust-Lag")),
                       ("gymnax:CartPole-v1", ("PPO-Lag", "PPO-Robust-Lag")),  # the search (one constraint)
                       ("inventory3d", ("MDPO-Lag+search",))):  # fmt: skip (the search, three constraints)
        sizes = {} if "MCPMD" in algos[0] else {"total_timesteps": 7 * 64}
        out.append((f"runner/{env}/{algos[0]}", "runner", [(env, a, sizes) for a in algos]))
    for env in ("inventory", "inventory3d", "cartpole"):  # the robustness test's worst-case search, each estimator
        out += [(f"worst_case/{env}/{est}", "worst_case", [(env, "MDPO-Lag", {"estimator": est})])
                for est in ("score", "pathwise")]  # fmt: skip
    return out


def tiny(env: str, algo: str, **overrides):
    from rcmdp_jax import envs, preset

    sizes = dict(ltma_iterations=2, eval_episodes=2, adversary_episodes=2, adversary_candidates=4, adversary_steps=2)
    if "MCPMD" in algo:
        sizes["total_timesteps"] = envs.spec(env).episode_length * 2
    else:
        sizes.update(total_timesteps=128, n_steps=16, minibatch_size=16, epochs=2)
    return preset(env, algo, **{**sizes, **overrides})


def flat(prefix: str, tree, out: dict) -> None:
    import jax

    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        out[prefix + jax.tree_util.keystr(path)] = np.asarray(leaf)


def save(folder: str) -> None:
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import make_family, make_train

    key = jax.random.PRNGKey(3)
    os.makedirs(folder, exist_ok=True)
    for tag, kind, specs in jobs():
        path = os.path.join(folder, tag.replace("/", "__") + ".npz")
        if os.path.exists(path) or os.environ.get("ONLY", "") not in tag:
            continue
        if kind == "worst_case":  # an untrained policy of 2 seeds, from the centre and the corners
            from rcmdp_jax.worst_case import SearchConfig, corner_starts, make_worst_case

            ((env, algo, kw),) = specs
            cfg = tiny(env, algo)
            sc = SearchConfig(steps=3, episodes=4, eval_episodes=8, estimator=kw["estimator"])
            finder = make_worst_case(cfg, sc)
            actor = jax.vmap(lambda k: finder.actor.init(k, jnp.zeros((finder.env.obs_dim,))))(jax.random.split(key, 2))
            starts = corner_starts(finder.env, finder.env_params, np.zeros((2, 2**finder.env_params.xi.size)))
            out = {}
            flat(tag, jax.jit(finder)(actor, starts, key), out)
            np.savez(path, **out)
            print("saved", tag, flush=True)
            continue
        cfgs, out = [tiny(e, a, **kw) for e, a, kw in specs], {}
        if kind == "runner":
            from rcmdp_jax.chunked import Prepared, train_prepared

            keys = np.asarray(jax.random.split(key, 2))
            per_member, _ = train_prepared(Prepared(cfgs, keys, True), tag)
            for i, r in enumerate(per_member):
                flat(f"{tag}/{i}/m", r.metrics, out)
                flat(f"{tag}/{i}/s", r.state.params, out)
            np.savez(path, **out)
            print("saved", tag, flush=True)
            continue
        if kind == "alone":
            result = jax.jit(make_train(cfgs[0]))(key)
            flat(tag + "/d", result.state.dual, out)
        else:
            result = jax.jit(jax.vmap(make_family(cfgs), in_axes=(None, 0)))(key, jnp.arange(len(cfgs)))
        flat(tag + "/m", result.metrics, out)
        flat(tag + "/s", result.state.params, out)
        np.savez(path, **out)
        print("saved", tag, flush=True)


def compare(a_folder: str, b_folder: str) -> int:
    a, b = ({k: v for f in glob.glob(os.path.join(d, "*.npz")) for k, v in np.load(f).items()}
            for d in (a_folder, b_folder))  # fmt: skip
    only = sorted(set(a) ^ set(b))
    differ = [k for k in sorted(set(a) & set(b))
              if a[k].shape != b[k].shape or not np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f")]  # fmt: skip
    print(f"{len(set(a) & set(b))} arrays in both; {len(only)} on one side only (runs one side lacks){':' if only else ''}",
          *only[:5])  # fmt: skip
    print("BIT-IDENTICAL" if not differ else f"{len(differ)} differ: {differ}")
    return 1 if differ else 0


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    if len(sys.argv) == 3 and sys.argv[1] == "save":
        save(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        raise SystemExit(compare(sys.argv[2], sys.argv[3]))
    else:
        raise SystemExit(__doc__)

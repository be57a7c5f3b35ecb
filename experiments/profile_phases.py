"""Where one training iteration's time goes, phase by phase (a profile, not a test).

    python experiments/profile_phases.py --env cartpole --family PPO [--budget long] [--seeds 5] [--warm 20]

Builds the family of ``--family`` (its learner's algorithms), trains ``--warm``
iterations (so the state, e.g. where PPO's KL stop falls, is that of a run under
way), then times each phase of ``step.Step.iteration`` alone, jitted and vmapped
over the family's lanes (members x ``--seeds``; 5 seeds = one device's share of
the runner's 10 on two devices): the median of ``--repeats`` calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="cartpole")
    p.add_argument("--family", default="PPO", choices=("PPO", "MDPO", "MCPMD"))
    p.add_argument("--budget", default="long", choices=("short", "long"))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--warm", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import jax

    from rcmdp_jax import constraints, cpu_prng
    from rcmdp_jax.family import make_family
    from rcmdp_jax.presets import ALGORITHMS, preset

    cpu_prng.apply_default()
    names = [a for a in ALGORITHMS if a.replace("RMCPMD", "MCPMD").startswith(args.family)]
    fam = make_family([preset(args.env, a, args.budget) for a in names])
    step, cfg = fam.step, fam.configs[0]
    members = np.repeat(np.arange(len(names), dtype=np.int32), args.seeds)
    keys = np.tile(np.asarray(jax.random.split(jax.random.PRNGKey(0), args.seeds)), (len(names), 1))
    state = jax.jit(jax.vmap(fam.init))(keys, members)
    state, _ = jax.jit(jax.vmap(lambda s, m: fam.run(s, m, 0, args.warm)))(state, members)
    key = jax.random.PRNGKey(1)

    def lane(fn):
        def per_lane(s, m):
            hp, variant = fam.inputs(m)
            lam_tilde = constraints.multiplier(variant.constraint, s.dual, hp)
            return fn(s, hp, variant, lam_tilde)

        return jax.jit(jax.vmap(per_lane))

    from rcmdp_jax.dual import dual_phase
    from rcmdp_jax.evaluate import curve_point

    k_roll, k_upd = step.learner.learn_keys(key)
    data_of = lane(lambda s, hp, v, lt: step.learner.collect(k_roll, s, hp, step.per_env)[0])
    data = data_of(state, members)

    phases = {
        "rollout": data_of,
        "signal + update": jax.jit(jax.vmap(lambda s, m, d: _update(step, fam, k_upd, s, m, d))),
        "adversary (LTMA)": lane(
            lambda s, hp, v, lt: step.lanes.step(key, s.env_params, s.env_xi, s.params["actor"], lt, hp, v.adversary)
        ),
        "dual phase": lane(
            lambda s, hp, v, lt: dual_phase(
                key, step.env, step.actor, step.critic, s.params, s.dual, s.env_params, cfg, hp, v.constraint, 5.0
            )  # fmt: skip
        ),
        "evaluation": lane(
            lambda s, hp, v, lt: curve_point(key, 0, step.env, step.actor, s.params["actor"], s.env_params, cfg, hp)
        ),
        "whole iteration": jax.jit(jax.vmap(lambda s, m: fam.run(s, m, args.warm, 1))),
    }
    rows = {}
    for name, fn in phases.items():
        call = (lambda: fn(state, members, data)) if name == "signal + update" else (lambda: fn(state, members))
        jax.block_until_ready(call())  # compile + warm-up
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            out = jax.block_until_ready(call())
            times.append(time.perf_counter() - t)
        rows[name] = statistics.median(times) * 1000
        extra = ""
        if name == "signal + update":
            upd = out
            extra = (f"  (minibatch steps per lane: mean {float(np.mean(upd['n_updates'])):.0f}, "
                     f"max {float(np.max(upd['n_updates'])):.0f} of {cfg.epochs * cfg.num_minibatches})")  # fmt: skip
        print(f"{name:18s} {rows[name]:8.1f} ms{extra}", flush=True)
    print(f"({len(members)} lanes: {', '.join(names)} x {args.seeds} seeds; {args.env} {args.budget}, "
          f"after {args.warm} iterations; jax {jax.__version__}, {jax.devices()[0].device_kind})")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": args.env, "family": names, "seeds": args.seeds, "ms": rows}, f, indent=2)
    return 0


def _update(step, fam, key, s, m, data):
    hp, variant = fam.inputs(m)
    from rcmdp_jax import constraints

    lam_tilde = constraints.multiplier(variant.constraint, s.dual, hp)
    signal = step.learner.signal(data, s.params, lam_tilde, hp)
    return step.learner.update(key, s, data, signal, hp, variant.schedule)[2]


if __name__ == "__main__":
    raise SystemExit(main())

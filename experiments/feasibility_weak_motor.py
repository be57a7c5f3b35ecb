"""The feasibility check's learned policies against a full-torque brake on a weak-motor
Pendulum (docs/feasibility.md, "Measured"): gymnax Pendulum-v1 with ``max_torque`` 1 (the
preset's 2 halved; ``MAX_TORQUE=0.5`` in the environment for another), the preset's box
(g, m, l ±10 %) and its speed limit ``|theta_dot| <= 1.5``. The check runs without the brake
(its ``least_C`` is the learned policies' alone); the brake then runs on the same test kernels.

    MAX_TORQUE=1.0 python experiments/feasibility_weak_motor.py OUT.json [STEPS]   # STEPS: None = the default

``--env experiments/feasibility_weak_motor.py:make --controller experiments/feasibility_weak_motor.py:brake``
runs the same check from ``rcmdp feasibility``."""

import json
import os
import sys
import time

import jax.numpy as jnp

MAX_TORQUE = float(os.environ.get("MAX_TORQUE", "1.0"))  # the motor (gymnax default 2)


def make():
    import gymnax
    from rcmdp_jax.envs.gymnax_presets import PRESETS

    from rcmdp_jax import envs

    pre = PRESETS["Pendulum-v1"]
    inner, params = gymnax.make("Pendulum-v1")
    params = params.replace(max_steps_in_episode=200, max_torque=MAX_TORQUE)
    env = envs.robustify(inner, dict(pre.uncertain), {"speed": pre.costs["speed"].fn}, noise=pre.noise, params=params,
                         gamma=pre.gamma, lambda_max=pre.lambda_max, name="WeakPendulum")  # fmt: skip
    learner = {"budgets": dict(pre.learner.budgets), "hp": {"lr": pre.learner.hp["lr"], "eta_xi": pre.learner.hp["eta_xi"]}}
    return {"env": env, "learner": learner, "n_test": pre.n_test}


def brake(obs):
    """Full torque against the spin: ``u = -max_torque clip(10 theta_dot, -1, 1)`` (obs = cos, sin, theta_dot)."""
    return -MAX_TORQUE * jnp.clip(10 * obs[2:3], -1, 1)


def brake_per_kernel(name: str, n_test: int, seed: int = 7):
    """The brake's mean ``C`` and its standard error on every test kernel: two ``[L, D]`` arrays."""
    import jax
    import numpy as np

    from rcmdp_jax import envs
    from rcmdp_jax.evaluate import DISTORTION_LEVELS, policy_sweep
    from rcmdp_jax.feasibility_report import mean_and_se

    env, params = envs.make(name)
    grid = env.test_kernels(np.asarray(DISTORTION_LEVELS), params)
    run = jax.jit(lambda k: policy_sweep(env, grid, lambda obs, _k: brake(obs), n_test, env.gamma, k))
    return mean_and_se(np.asarray(run(jax.random.PRNGKey(seed))["C"])[..., 0], axis=2)


if __name__ == "__main__":
    import numpy as np

    from rcmdp_jax import envs
    from rcmdp_jax.feasibility import FeasibilityConfig, check_feasibility
    from rcmdp_jax.feasibility_report import lines

    out, steps = sys.argv[1], (int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] != "None" else None)
    spec = make()
    envs.register("weak-pendulum", spec["env"], learner=spec["learner"], n_test=spec["n_test"])
    start = time.time()
    report = check_feasibility("weak-pendulum", FeasibilityConfig(steps=steps), progress=print)  # learned only
    report["wall_s"] = time.time() - start
    print("\n".join(lines(report)))
    learned = np.asarray(report["constraints"][0]["least_C"])
    brake_C, brake_se = brake_per_kernel("weak-pendulum", report["settings"]["n_test"])
    report["brake"] = {"C": brake_C.tolist(), "se": brake_se.tolist(), "worst_C": float(brake_C.max()),
                       "learned_minus_brake_max": float((learned - brake_C).max()),
                       "kernels_brake_better": int((brake_C < learned).sum())}  # fmt: skip
    print("brake:", {k: v for k, v in report["brake"].items() if k not in ("C", "se")})
    with open(out, "w") as f:
        json.dump(report, f, indent=1, default=float)

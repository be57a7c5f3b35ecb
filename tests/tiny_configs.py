"""The tiny configurations the tests train (not a test file), in one place: one tiny batch for
the Python API (``tiny``) and the command line's tiny studies (``TINY``, ``HOSTILE_TINY``, with
``sets`` to write fields as ``--set`` arguments). A test that trains takes them as they are, and
overrides a field only where its check reads that field, so that tests training the same
algorithm on the same environment through the same call compile the same program, once a
session (the XLA cache of conftest.py).

``tiny(env, algo)``: 3 iterations of 4 environments x 16 steps, minibatches of 16, 2 epochs,
3 LTMA iterations, 2 evaluation episodes, the multiplier read from the start state's value; the
golden numbers of ``golden/presets.json`` pin this configuration (``test_train_families.py``).

The command line's batch (``CLI_BATCH``) has the same steps, minibatches and evaluation
episodes, but keeps the presets' epochs and 2 LTMA iterations: the shared runs ``full`` and
``trained`` (conftest.py) that the checks marked slow read were made with them. The command
line trains families (``make_family``), not ``make_train`` alone, so the two never share a
program either way.
"""

from rcmdp_jax import envs, preset

# the tiny batch: every field a tiny configuration sets beyond its budget
BATCH = dict(n_steps=16, minibatch_size=16, epochs=2, ltma_iterations=3, eval_episodes=2)
STEPS_PER_ITERATION = 64  # 4 environments x n_steps=16 (the presets' n_envs)


def tiny(env="cartpole", algo="MDPO-Robust-Lag", iterations=3, **kw):
    """A few iterations (3 by default: enough for state carried between them) on the tiny batch;
    MCPMD keeps its one-episode batch and gets a budget of about ``iterations`` episodes.
    ``kw`` overrides any field (``total_timesteps`` too)."""
    base = dict(total_timesteps=STEPS_PER_ITERATION * iterations, **BATCH, dual_estimator="start_value")
    if "MCPMD" in algo:
        episode = envs.REGISTRY[env].episode_length
        base = dict(total_timesteps=episode * iterations, ltma_iterations=BATCH["ltma_iterations"],
                    eval_episodes=BATCH["eval_episodes"], eval_every=1, dual_estimator="start_value")  # fmt: skip
    base.update(kw)
    return preset(env, algo, **base)


def sets(fields: dict) -> list[str]:
    """``fields`` as the command's ``--set FIELD=VALUE`` arguments."""
    return [x for k, v in fields.items() for x in ("--set", f"{k}={v}")]


# the command line's tiny studies (conftest.py's ``full_run`` and ``trained`` train them once a
# session): 2 iterations of the tiny batch, 3 test episodes a kernel
CLI_BATCH = ["--seeds", "2", "--steps", "128", "--n-test", "3",
             *sets(dict(n_steps=16, minibatch_size=16, ltma_iterations=2, eval_episodes=2))]  # fmt: skip
ALGOS = "MDPO-Lag,MDPO-Robust,PPO-Lag"  # two families: {MDPO-Lag, MDPO-Robust}, {PPO-Lag}
TINY = ["--algos", ALGOS, *CLI_BATCH]

# the report's tables without its figures (a few seconds a run): for the runs whose figures no test reads
QUICK = ["--plots", "off"]

# a tiny MDPO-Lag run on CartPole (2 seeds): ``trained``, for the tests that edit, re-read or
# re-test a finished run folder
HOSTILE_TINY = ["--algos", "MDPO-Lag", *CLI_BATCH, *QUICK]

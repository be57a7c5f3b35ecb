"""Run by ``test_portability.py`` in a subprocess at XLA's *default* optimisation level
and random-bit lowering
(the suite itself runs at level 0, older fusion emitters, JAX's rolled threefry, for compile speed): a tiny training run of MDPO-Robust-Lag
on Inventory 1-D, and the fixed-policy pattern XLA CPU once miscompiled at this level.
Prints ``SMOKE OK``."""

import os

import jax
import jax.numpy as jnp
import numpy as np

assert not any(
    f in os.environ.get("XLA_FLAGS", "") for f in ("xla_backend_optimization_level", "xla_cpu_use_fusion_emitters")
)

from rcmdp_jax import cpu_prng, envs  # noqa: E402
from rcmdp_jax import make_train, preset  # noqa: E402
from rcmdp_jax.networks import build_networks  # noqa: E402

assert cpu_prng.apply_default()  # as the runner does: the straight-line threefry

keys = jax.random.split(jax.random.PRNGKey(0), 2)
for algo in ("MDPO-Robust-Lag",):
    small = {} if "MCPMD" in algo else dict(n_steps=16, minibatch_size=16, epochs=2)
    cfg = preset("inventory", algo, total_timesteps=3 * 80, ltma_iterations=2, eval_episodes=2, **small)
    result = jax.jit(jax.vmap(make_train(cfg)))(keys)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(result.state.params)), algo
    active = np.asarray(result.metrics["active"]) > 0
    assert np.all(np.isfinite(np.asarray(result.metrics["lam"])[active])), algo

# an output layer with zero weights and a bias favouring one action, params as jit arguments
cfg = preset("inventory", "MDPO-Robust-Lag")
env, _ = envs.make("inventory")
actor, _ = build_networks(cfg, env)
params = actor.init(jax.random.PRNGKey(0), jnp.zeros((1,)))
mlp = params["params"]["MLP_0"]
mlp["Dense_1"] = {"kernel": jnp.zeros_like(mlp["Dense_1"]["kernel"]), "bias": jnp.array([0.0, 0.0, 0.0, 50.0])}
obs = jax.random.normal(jax.random.PRNGKey(1), (3000, 1)) * 3.0
probs = jax.jit(jax.vmap(lambda p, o: jnp.exp(actor.apply(p, o).logits)[3], in_axes=(None, 0)))(params, obs)
np.testing.assert_allclose(probs, 1.0, rtol=1e-6)
print("SMOKE OK")

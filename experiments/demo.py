"""Roll out every environment with a random policy; print returns and constraint-costs."""

import jax
import jax.numpy as jnp

from rcmdp_jax import envs


def rollout(name: str, n_episodes: int = 8, seed: int = 0):
    env, params = envs.make(name)

    def episode(key):
        k_reset, k_run = jax.random.split(key)
        _, state = env.reset(k_reset, params)

        def body(carry, key):
            state, alive, disc = carry
            k_act, k_step = jax.random.split(key)
            if env.discrete:
                action = jax.random.randint(k_act, (), 0, env.action_dim)
            else:
                action = jax.random.uniform(k_act, (env.action_dim,), minval=-1, maxval=1)
            _, state, r, term, trunc, info = env.step(k_step, state, action, params)
            out = alive * disc * jnp.concatenate([r[None], info["costs"]])
            return (state, alive * (1.0 - (term | trunc)), disc * env.gamma), out

        keys = jax.random.split(k_run, env.episode_length)
        _, out = jax.lax.scan(body, (state, 1.0, 1.0), keys)
        return out.sum(0)

    res = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.PRNGKey(seed), n_episodes))
    return res[:, 0], res[:, 1:]


if __name__ == "__main__":
    for name in envs.ENV_NAMES:
        ret, costs = rollout(name)
        print(
            f"{name:12s} random policy: discounted return {float(ret.mean()):9.3f}  "
            f"discounted constraint-costs {[round(float(c), 3) for c in costs.mean(0)]}"
        )

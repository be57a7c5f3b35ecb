"""Robust-constrained CartPole (docs/method.md §1a).

The classic explicit-Euler cart-pole gives the deterministic next state
``mu(s, a)``; the kernel is ``s' ~ Normal(xi * mu(s, a), sigma2 * I)`` with
``xi`` an element-wise multiplier around ``xi_c = 1``.
"""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces
from rcmdp_jax.envs.base import RobustEnvironment
from rcmdp_jax.envs.domain import of_class, study_learner

EPISODE_LENGTH = 100  # the time limit: gymnax's max_steps_in_episode and the class's episode_length


@struct.dataclass
class CartPoleParams(environment.EnvParams):
    xi: jax.Array = struct.field(default_factory=lambda: jnp.ones(4))
    xi_c: jax.Array = struct.field(default_factory=lambda: jnp.ones(4))
    kappa: jax.Array = struct.field(default_factory=lambda: jnp.array([0.005, 0.05, 0.005, 0.05]))
    sigma2: float = 1e-7
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length
    force_mag: float = 10.0
    tau: float = 0.02
    theta_threshold: float = 12 * 2 * jnp.pi / 360
    x_threshold: float = 2.4
    velocity_limit: float = 0.15  # constraint: |x_dot| - velocity_limit <= 0
    max_steps_in_episode: int = EPISODE_LENGTH


def euler_step(params: CartPoleParams, s: jax.Array, action: jax.Array) -> jax.Array:
    """``mu(s, a)``: one explicit-Euler step of the classic cart-pole, shape ``(4,)``."""
    x, x_dot, theta, theta_dot = s[0], s[1], s[2], s[3]
    force = jnp.where(action == 1, params.force_mag, -params.force_mag)
    total_mass = params.masscart + params.masspole
    pml = params.masspole * params.length
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    temp = (force + pml * theta_dot**2 * sin) / total_mass
    theta_acc = (params.gravity * sin - cos * temp) / (
        params.length * (4.0 / 3.0 - params.masspole * cos**2 / total_mass)
    )
    x_acc = temp - pml * theta_acc * cos / total_mass
    return jnp.stack(
        [
            x + params.tau * x_dot,
            x_dot + params.tau * x_acc,
            theta + params.tau * theta_dot,
            theta_dot + params.tau * theta_acc,
        ]
    )


class CartPole(RobustEnvironment):
    num_constraints = 1
    gamma = 0.99
    lambda_max = 50.0
    episode_length = EPISODE_LENGTH
    # pushing one way from the worst start ends an episode after 7 steps at the box's
    # edge (8 at the nominal kernel): no policy ends one sooner
    min_episode_length = 6
    state_dim = 4
    discrete = True
    action_dim = 2

    @property
    def default_params(self) -> CartPoleParams:
        return CartPoleParams()

    @property
    def name(self) -> str:
        return "RobustCartPole"

    def initial_state(self, key, params):
        return jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05)

    def next_state_distribution(self, params, s, action):
        loc = params.xi * euler_step(params, s, action)
        scale = jnp.sqrt(params.sigma2) * jnp.ones_like(loc)
        return distrax.MultivariateNormalDiag(loc, scale)

    def reward(self, params, s, action, s_next):
        return jnp.ones((), dtype=s.dtype)

    def constraint_costs(self, params, s, action, s_next):
        return jnp.abs(s[1:2]) - params.velocity_limit

    def is_terminated_vec(self, params, s_next):
        return jnp.logical_or(
            jnp.abs(s_next[0]) > params.x_threshold,
            jnp.abs(s_next[2]) > params.theta_threshold,
        )

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (4,), jnp.float32)


# docs/method.md §3 (the learners on CartPole) and §4 (the robustness test's episodes per kernel)
SPEC = of_class(
    CartPole,
    learner=study_learner(
        policy_hidden=(128,), critic_hidden=(128,), optimizer="adam",
        plugins={"ppo": dict(epochs=50, target_kl=0.01, dual_epochs_from_policy=True),
                 "ltma": dict(per_100=10.0, horizon=10, per_episode=10)},
        budgets={"short": 20_000, "long": 200_000},
        hp=dict(lr=3e-4, gae_lambda=0.95, eta_lam=1e-3, lam_clip=50.0, eta_xi=1e-7),
    ),
    n_test=100,
    cost_names=("|x_dot|-0.15",),
    # xi multiplies the Euler step's next state entry by entry: (x, x_dot, theta, theta_dot)
    kernel_names=("cart position", "cart velocity", "pole angle", "pole angular velocity"),
)  # fmt: skip

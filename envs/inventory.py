"""Robust-constrained Inventory Management, 1-D and 3-D (docs/method.md §1b, §1c).

Features are *negative scaled squared distances* (no exponential), as in the
reference implementation: ``zeta_i(s, a) = -K ||(s, a) - mu_i||^2 / (2 sigma_i^2)``
with ``K = 1 / sqrt(8 pi)``.  The next state is Gaussian around ``eta . zeta``
with unit standard deviation; ``xi = eta``.

The quadratic features make the state diverge under some kernels of the box
(e.g. ``eta = (13, -11.5)``): ``s`` grows like ``s^2`` and overflows within an
episode. To keep every kernel of the uncertainty set finite, the kernel *mean*
is clipped to ``[-state_bound, state_bound]`` (default 100, far outside the
states a nominal episode visits). The next state is still exactly the Normal
the adversary differentiates; only its mean saturates.
"""

from __future__ import annotations

import math

import distrax
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces
from rcmdp_jax.envs.base import RobustEnvironment
from rcmdp_jax.envs.domain import of_class, study_learner

K_FEATURE = 1.0 / math.sqrt(8.0 * math.pi)
EPISODE_LENGTH_1D = 80  # the time limits: gymnax's max_steps_in_episode and the classes' episode_length
EPISODE_LENGTH_3D = 100


def features(z: jax.Array, centres: jax.Array, sigmas: jax.Array) -> jax.Array:
    """``zeta_i(z) = -K ||z - mu_i||^2 / (2 sigma_i^2)``; ``z`` (d,), centres (2, d) -> (2,)."""
    sq = jnp.sum((z[None, :] - centres) ** 2, axis=-1)
    return -K_FEATURE * sq / (2.0 * sigmas**2)


@struct.dataclass
class InventoryParams(environment.EnvParams):
    xi: jax.Array = struct.field(default_factory=lambda: jnp.array([-2.0, 3.5]))
    xi_c: jax.Array = struct.field(default_factory=lambda: jnp.array([-2.0, 3.5]))
    kappa: jax.Array = struct.field(default_factory=lambda: jnp.array([15.0, 15.0]))
    action_values: jax.Array = struct.field(default_factory=lambda: jnp.array([-8.0, -4.0, 3.0, 6.0]))
    centres: jax.Array = struct.field(default_factory=lambda: jnp.array([[-4.0, 5.0], [-2.0, 8.0]]))
    sigmas: jax.Array = struct.field(default_factory=lambda: jnp.array([10.0, 5.0]))
    noise_std: float = 1.0
    cost_threshold: float = 0.0
    state_bound: float = 100.0  # the kernel mean is clipped to [-bound, bound]
    max_steps_in_episode: int = EPISODE_LENGTH_1D


@struct.dataclass
class Inventory3DParams(environment.EnvParams):
    xi: jax.Array = struct.field(default_factory=lambda: jnp.array([[-2.0, 2.5], [-1.8, 1.5], [-1.5, 2.0]]))
    xi_c: jax.Array = struct.field(default_factory=lambda: jnp.array([[-2.0, 2.5], [-1.8, 1.5], [-1.5, 2.0]]))
    kappa: jax.Array = struct.field(default_factory=lambda: jnp.full((3, 2), 0.5))
    centres: jax.Array = struct.field(
        default_factory=lambda: jnp.array([[-3.0, -2.5, -3.5, 5.0, 2.0, 4.5], [-6.0, -2.8, -4.0, 8.0, 2.0, 2.5]])
    )
    sigmas: jax.Array = struct.field(default_factory=lambda: jnp.array([4.0, 4.5]))
    action_low: float = -1.0
    action_high: float = 1.0
    noise_std: float = 1.0
    cost_threshold: float = 0.0
    state_bound: float = 100.0  # the kernel mean is clipped to [-bound, bound]
    max_steps_in_episode: int = EPISODE_LENGTH_3D


class _Inventory(RobustEnvironment):
    """What the 1-D and 3-D inventories share: the feature kernel
    ``s' ~ N(clip(eta zeta(s, a), -bound, bound), noise_std^2 I)`` with ``xi = eta``
    (``state_dim x 2``; the 1-D ``xi`` is its one row), the state-bound flag and the
    reset to 0. Subclasses give ``order`` (the order vector of an action), the reward,
    the costs and the spaces."""

    gamma = 0.95
    lambda_max = 500.0

    def initial_state(self, key, params):
        return jnp.zeros((self.state_dim,))

    def order(self, params, action) -> jax.Array:
        """The order vector, shape ``(state_dim,)``."""
        raise NotImplementedError

    def zeta(self, params, s, action):
        z = jnp.concatenate([s, self.order(params, action)])
        return features(z, params.centres, params.sigmas)

    def kernel_mean(self, params, s, action):
        """The unclipped kernel mean ``eta zeta(s, a)``, shape ``(state_dim,)``."""
        return jnp.reshape(params.xi, (self.state_dim, 2)) @ self.zeta(params, s, action)

    def next_state_distribution(self, params, s, action):
        loc = jnp.clip(self.kernel_mean(params, s, action), -params.state_bound, params.state_bound)
        return distrax.MultivariateNormalDiag(loc, params.noise_std * jnp.ones_like(loc))

    def kernel_saturated(self, params, s, action):
        return jnp.any(jnp.abs(self.kernel_mean(params, s, action)) >= params.state_bound)

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (self.state_dim,), jnp.float32)


class InventoryManagement(_Inventory):
    """1-D inventory: state ``s`` (shape (1,)), four discrete order sizes."""

    num_constraints = 1
    episode_length = EPISODE_LENGTH_1D
    min_episode_length = EPISODE_LENGTH_1D
    state_dim = 1
    discrete = True
    action_dim = 4

    @property
    def default_params(self) -> InventoryParams:
        return InventoryParams()

    @property
    def name(self) -> str:
        return "RobustInventory1D"

    def order(self, params, action):
        return params.action_values[jnp.asarray(action).astype(jnp.int32)][None]  # an invalid action: NaN step

    def reward(self, params, s, action, s_next):
        return self.order(params, action)[0] - s[0] - s_next[0]

    def constraint_costs(self, params, s, action, s_next):
        a = self.order(params, action)[0]
        return (0.01 * (a**2 - s[0]) - params.cost_threshold)[None]

    def action_space(self, params=None):
        return spaces.Discrete(4)


class InventoryManagement3D(_Inventory):
    """3-D inventory: state in R^3, continuous actions clipped to [-1, 1]^3."""

    num_constraints = 3
    episode_length = EPISODE_LENGTH_3D
    min_episode_length = EPISODE_LENGTH_3D
    state_dim = 3
    discrete = False
    action_dim = 3

    @property
    def default_params(self) -> Inventory3DParams:
        return Inventory3DParams()

    @property
    def name(self) -> str:
        return "RobustInventory3D"

    def order(self, params, action):
        return jnp.clip(action, params.action_low, params.action_high)

    def reward(self, params, s, action, s_next):
        return jnp.sum(self.order(params, action) - s - s_next)

    def constraint_costs(self, params, s, action, s_next):
        return self.order(params, action) - 0.5 * s - params.cost_threshold

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (3,), jnp.float32)


# docs/method.md §3 (the learners on each inventory) and §4 (the robustness test's episodes per kernel)
_INVENTORY_HP = dict(lr=1e-3, gae_lambda=0.5, eta_lam=1e-2, lam_clip=500.0, eta_xi=1e-1)
SPEC = of_class(
    InventoryManagement,
    learner=study_learner(
        policy_hidden=(64,), critic_hidden=(128,), optimizer="adam",
        plugins={"ppo": dict(epochs=5, target_kl=math.inf, dual_epochs_from_policy=False),
                 "ltma": dict(per_100=25.0, horizon=40, per_episode=20)},
        budgets={"short": 16_000, "long": 400_000},
        hp=_INVENTORY_HP,
    ),
    n_test=50,
    cost_names=("0.01(a^2-s)",),
    # xi = eta: the next stock's mean is eta_1 zeta_1 + eta_2 zeta_2 (the two features)
    kernel_names=("stock's feature-1 weight", "stock's feature-2 weight"),
)  # fmt: skip
SPEC_3D = of_class(
    InventoryManagement3D,
    learner=study_learner(
        policy_hidden=(128, 128), critic_hidden=(128,), optimizer="sgd",
        plugins={"ppo": dict(epochs=5, target_kl=math.inf, dual_epochs_from_policy=False),
                 "ltma": dict(per_100=20.0, horizon=40, per_episode=20)},
        budgets={"short": 40_000, "long": 400_000},
        hp=dict(_INVENTORY_HP),
    ),
    n_test=10,
    cost_names=("a_1-0.5s_1", "a_2-0.5s_2", "a_3-0.5s_3"),
    # xi = eta, one row per item: item i's next stock mean is eta[i,0] zeta_1 + eta[i,1] zeta_2
    kernel_names=tuple(f"item {i}'s feature-{k} weight" for i in (1, 2, 3) for k in (1, 2)),
)  # fmt: skip

"""A toy whose least constraint value is known in closed form (tests/test_feasibility.py);
``FILE.py:make`` for ``rcmdp feasibility --env``."""

import distrax
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces
from rcmdp_jax.envs.base import RobustEnvironment

GAMMA, HORIZON = 0.9, 10
DISCOUNT = sum(GAMMA**t for t in range(HORIZON))  # the discounted sum of a constant per-step cost


@struct.dataclass
class DriftParams(environment.EnvParams):
    xi: jax.Array = struct.field(default_factory=lambda: jnp.array([0.5]))
    xi_c: jax.Array = struct.field(default_factory=lambda: jnp.array([0.5]))
    kappa: jax.Array = struct.field(default_factory=lambda: jnp.array([0.8]))
    max_steps_in_episode: int = HORIZON


class Drift(RobustEnvironment):
    """``s' ~ N(xi - a, 0.01^2)``, ``a in {0, 1}``, cost ``c = s'``: the least expected cost per
    step is ``xi - 1`` (always ``a = 1``), so the least ``C`` is ``(xi - 1) * DISCOUNT``."""

    num_constraints, gamma, lambda_max = 1, GAMMA, 10.0
    episode_length = min_episode_length = HORIZON
    state_dim, discrete, action_dim = 1, True, 2

    def __init__(self, kappa: float):
        super().__init__()
        self.kappa = kappa

    @property
    def default_params(self):
        return DriftParams(kappa=jnp.array([self.kappa]))

    @property
    def name(self):
        return "Drift"

    def initial_state(self, key, params):
        return jnp.zeros((1,))

    def next_state_distribution(self, params, s, action):
        return distrax.MultivariateNormalDiag(params.xi - action, 0.01 * jnp.ones((1,)))

    def reward(self, params, s, action, s_next):
        return jnp.zeros(())

    def constraint_costs(self, params, s, action, s_next):
        return s_next

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (1,), jnp.float32)


def make():
    """The wide box (not keepable above xi = 1), tiny networks, 2 test episodes per kernel."""
    return {
        "env": Drift(0.8),
        "learner": {"policy_hidden": (16,), "critic_hidden": (16,), "hp": {"lr": 3e-3}},
        "n_test": 2,
    }


class Fixed(Drift):
    """The drift with a cost that never moves (``c = 0.25`` every step): a constraint no policy
    changes (``cost_check.cannot_bind``)."""

    def constraint_costs(self, params, s, action, s_next):
        return jnp.full((1,), 0.25)


def make_fixed():
    """``make``'s toy with the constant cost."""
    return {**make(), "env": Fixed(0.8)}


class Drift2(Drift):
    """Drift with two constraints, ``s'`` and ``s' - 0.2``: two trainings (``--resume`` after the first)."""

    num_constraints = 2

    def constraint_costs(self, params, s, action, s_next):
        return jnp.concatenate([s_next, s_next - 0.2])


def make2():
    return {**make(), "env": Drift2(0.8)}


def raises(obs):
    """A controller that fails on every observation (``rcmdp feasibility --controller``'s refusal)."""
    raise RuntimeError("boom")


def wrong_shape(obs):
    """A controller whose action has the wrong shape (Drift's action is one integer)."""
    return jnp.zeros((3,))

"""An environment as a plug-in: one file with a ``RobustEnvironment`` and its
``DomainSpec``, loaded by ``--env FILE.py:SPEC``'s loader or named as a built-in by one
registration line, trained through the family program; the spec's checks."""

import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rcmdp_jax.envs.domain import DomainSpec, from_dict, learner_spec

from rcmdp_jax import envs, preset
from rcmdp_jax.evaluate import make_eval
from rcmdp_jax.family import make_family
from rcmdp_jax.study import user_code

TOY = '''
"""A 1-D drift: the action pushes the state by -0.1 or +0.1, the kernel scales it by xi."""
import distrax
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces
from rcmdp_jax.envs.base import RobustEnvironment
from rcmdp_jax.envs.domain import DomainSpec, learner_spec


@struct.dataclass
class DriftParams(environment.EnvParams):
    xi: jax.Array = struct.field(default_factory=lambda: jnp.ones(1))
    xi_c: jax.Array = struct.field(default_factory=lambda: jnp.ones(1))
    kappa: jax.Array = struct.field(default_factory=lambda: jnp.full(1, 0.2))
    max_steps_in_episode: int = 10


class Drift(RobustEnvironment):
    num_constraints = 1
    gamma = 0.9
    lambda_max = 5.0
    episode_length = 10
    min_episode_length = 10
    state_dim = 1
    discrete = True
    action_dim = 2

    @property
    def default_params(self):
        return DriftParams()

    @property
    def name(self):
        return "Drift"

    def initial_state(self, key, params):
        return jnp.zeros((1,))

    def next_state_distribution(self, params, s, action):
        push = jnp.where(action == 1, 0.1, -0.1)
        return distrax.MultivariateNormalDiag(params.xi * (s + push), jnp.full((1,), 0.01))

    def reward(self, params, s, action, s_next):
        return -jnp.abs(s_next[0])

    def constraint_costs(self, params, s, action, s_next):
        return jnp.abs(s_next) - 0.5

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (1,), jnp.float32)


SPEC = DomainSpec(
    factory=Drift, gamma=0.9, lambda_max=5.0, episode_length=10, min_episode_length=10, n_test=3,
    cost_names=("|s|-0.5",),
    learner=learner_spec({"budgets": {"short": 320, "long": 640}, "policy_hidden": (8,), "critic_hidden": (8,)}),
)
'''
TINY = dict(n_envs=2, n_steps=16, minibatch_size=16, eval_episodes=1)


@pytest.fixture(scope="module")
def toy_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("plugin") / "drift_env.py"
    path.write_text(TOY)
    return path


def test_a_plugin_environment_trains_through_the_family_program(toy_file):
    name, record = user_code.load_spec(f"{toy_file}:SPEC")
    assert name == "drift_env.py:SPEC" and record["attr"] == "SPEC"
    spec = envs.spec(name)
    assert (spec.n_test, spec.cost_names, spec.episode_length) == (3, ("|s|-0.5",), 10)
    cfgs = [preset(name, a, **TINY) for a in ("PPO", "PPO-Lag")]
    c = cfgs[1]
    # the spec's settings reach the config; the rest are LearnerSpec's defaults
    assert (c.total_timesteps, c.policy_hidden, c.critic_hidden, c.adversary) == (320, (8,), (8,), "none")
    assert preset(name, "PPO-Robust-Lag", **TINY).adversary == "search"  # LearnerSpec's default (a density: the score)
    assert c.hparams.gamma == c.hparams.alpha_decay == 0.9 and c.hparams.eta_xi == 1e-4
    seeds = jax.random.split(jax.random.PRNGKey(0), 2)
    out = jax.jit(jax.vmap(make_family(cfgs)))(jnp.tile(seeds, (2, 1)), jnp.repeat(jnp.arange(2), 2))
    m = out.metrics
    assert np.asarray(m["lam"]).shape[:2] == (4, 320 // 32)
    assert np.all(np.isfinite(np.asarray(m["episode_costs"])[~np.isnan(np.asarray(m["episode_costs"]))]))
    assert np.all(np.asarray(m["lam"][:2]) == 5.0)  # PPO: the multiplier stays at its start
    assert np.any(np.asarray(m["lam"][2:]) != 5.0)  # PPO-Lag: the dual step moves it
    assert make_eval(cfgs[0]).n_test == 3  # the robustness test's episodes: the spec's


def test_a_builtin_environment_is_one_file_and_one_registration_line(toy_file, monkeypatch):
    monkeypatch.syspath_prepend(str(toy_file.parent))
    monkeypatch.setitem(envs._BUILTIN, "drift", "drift_env:SPEC")
    env, params = envs.make("drift")
    assert type(env).__name__ == "Drift" and params.max_steps_in_episode == 10
    cfg = preset("drift", "MDPO-Lag", "long", **TINY)
    assert cfg.total_timesteps == 640 and make_eval(cfg).n_test == 3
    sys.modules.pop("drift_env", None)


def _toy_fields(**kw):
    return dict(factory=lambda: None, gamma=0.9, lambda_max=5.0, episode_length=10, min_episode_length=10, **kw)


def test_unknown_spec_keys_are_refused_with_the_allowed_ones():
    with pytest.raises(ValueError, match=re.escape("unknown DomainSpec key(s) n_tests; allowed: factory, gamma")):
        DomainSpec.of(**_toy_fields(n_tests=3))
    with pytest.raises(ValueError, match=re.escape("unknown learner key 'budget'; allowed: adversary, budgets")):
        DomainSpec.of(**_toy_fields(learner={"budget": {"short": 1, "long": 2}}))
    env = envs.make("gymnax:Pendulum-v1")[0]
    with pytest.raises(ValueError, match=re.escape("unknown key(s) ntest; allowed: env, learner, n_test")):
        from_dict({"env": env, "ntest": 2})
    spec = DomainSpec.of(**_toy_fields(learner={"hp": {"lr": 0.5}}))
    assert spec.learner.hp["lr"] == 0.5 and spec.learner.hp["eta_xi"] == 1e-4  # over the default hyperparameters


@pytest.mark.parametrize("fields,message", [
    (dict(n_test=0), "DomainSpec.n_test must be a positive integer, got 0"),
    (dict(episode_length=10.0), "DomainSpec.episode_length must be a positive integer"),
    (dict(min_episode_length=11), "min_episode_length=11 exceeds episode_length=10"),
    (dict(gamma=1.5), "DomainSpec.gamma must be a float in (0, 1]"),
    (dict(lambda_max=-5.0), "DomainSpec.lambda_max (the multipliers' cap) must be a finite number >= 0, got -5.0"),
    (dict(lambda_max=float("nan")), "DomainSpec.lambda_max (the multipliers' cap) must be a finite number >= 0, got nan"),
    (dict(lambda_max=1e40), "must be a finite number >= 0, got 1e+40"),
    (dict(factory=3), "DomainSpec.factory must build the environment"),
    (dict(learner={"ppo_epochs": 3}), "DomainSpec.learner must be a LearnerSpec"),
    (dict(kernel_names=("g", "")), "DomainSpec.kernel_names must be a tuple of non-empty strings"),
    (dict(kernel_names="g"), "DomainSpec.kernel_names must be a tuple of non-empty strings, got 'g'"),
])  # fmt: skip
def test_a_bad_spec_is_a_clear_error(fields, message):
    base = _toy_fields()
    with pytest.raises(ValueError, match=re.escape(message)):
        DomainSpec(**{**base, **fields})


def test_a_spec_and_its_environment_agree(toy_file, monkeypatch):
    monkeypatch.syspath_prepend(str(toy_file.parent))
    import drift_env

    wrong = DomainSpec(**{**_toy_fields(), "factory": drift_env.Drift, "lambda_max": 50.0})
    with pytest.raises(
        ValueError, match=re.escape("DomainSpec.lambda_max=50.0 but the environment's lambda_max is 5.0")
    ):
        wrong.build()
    with pytest.raises(ValueError, match="DomainSpec.factory must return a RobustEnvironment, got NoneType"):
        DomainSpec(**_toy_fields()).build()
    sys.modules.pop("drift_env", None)


def test_a_spec_is_registered_whole():
    spec = DomainSpec(**_toy_fields())
    with pytest.raises(ValueError, match="a DomainSpec carries its learner settings and n_test"):
        envs.register("toy-whole", spec, n_test=5)
    with pytest.raises(ValueError, match=re.escape("learner['budgets'] must be")):
        learner_spec({"budgets": {"short": 10}})


@pytest.mark.parametrize("name", ["inventory@mine", "cartpole@velocity_limit=0.3", "cartpole@"])
def test_a_name_that_spells_a_built_in_domains_limit_is_refused_at_registration(name):
    """``NAME@...`` of a built-in domain is its limit's spelling (``cartpole@velocity_limit=X``):
    registering such a name is refused there, naming the form, where it was accepted and every
    later use of the name failed (``spec`` read it as a limit: "write inventory@cost_threshold=...")."""
    spec = DomainSpec(**_toy_fields())
    with pytest.raises(ValueError, match=re.escape(f"register: {name!r}")) as err:
        envs.register(name, spec)
    assert "NAME@FIELD=NUMBER" in str(err.value) and name not in envs.registered()


@pytest.mark.parametrize("name", ["", " ", "\n\t"])
def test_a_name_of_whitespace_alone_is_refused_at_registration(name):
    with pytest.raises(ValueError, match="must be a name with a character other than whitespace"):
        envs.register(name, DomainSpec(**_toy_fields()))

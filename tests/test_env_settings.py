"""Per-environment plug-in settings (``rcmdp_jax.env_settings``): a plug-in declares what an
environment's spec may choose for it and turns it into the preset config's fields; the spec
gives them by the plug-in's registered name (``learner={"plugins": {"ppo": {...}}}``). Nothing
here compiles a program: presets are configs."""

import itertools
import math
import re

import pytest

from rcmdp_jax import envs, learners, preset
from rcmdp_jax.learners import PPO


class WidePPO(PPO):
    """A PPO of a plug-in with a setting of its own: its batch's steps per env."""

    env_settings = {"rollout": 400}

    @classmethod
    def preset(cls, fields, settings, domain):
        return {**super().preset(fields, settings, domain), "n_steps": settings["rollout"]}


@pytest.fixture(scope="module")
def pendulum():
    learners.register("ppo-wide", WidePPO)
    env = envs.make("gymnax:Pendulum-v1")[0]
    names = []

    def register(name, learner):
        envs.register(name, env, learner=learner)
        names.append(name)
        return name

    yield register
    for name in names:
        envs.unregister(name)
    learners.unregister("ppo-wide")


def test_a_plugin_reads_its_own_settings_and_its_bases(pendulum):
    """A subclass reads its base's settings under the base's name (``ppo``) and its own under its
    own; what the spec leaves out is the declared default."""
    env = pendulum("settings-wide", {"plugins": {"ppo": {"epochs": 7}, "ppo-wide": {"rollout": 200}}})
    cfg = preset(env, "PPO-WIDE-Lag")
    assert (cfg.learner, cfg.epochs, cfg.n_steps, cfg.hparams.target_kl) == ("ppo-wide", 7, 200, 0.02)
    plain = preset(env, "PPO-Lag")  # PPO itself does not read ppo-wide's
    assert (plain.epochs, plain.n_steps) == (7, 400)
    mdpo = preset(env, "MDPO-Lag")  # nor MDPO PPO's: its epochs and KL target are the batch learner's
    assert (mdpo.epochs, mdpo.hparams.target_kl) == (5, math.inf)


def test_ltma_steps_follow_the_learners_batch(pendulum):
    """LTMA's steps per iteration: ``per_100`` per 100 steps of a batch learner's batch
    (4 envs x 400 steps here), ``per_episode`` for the episodic MCPMD; its horizon and reading."""
    env = pendulum("settings-ltma", {"plugins": {"ltma": {"per_100": 2.5, "per_episode": 3, "horizon": 7,
                                                          "dual_reading": "found"}}})  # fmt: skip
    batch = preset(env, "PPO-Robust-Lag", adversary="ltma")
    assert batch.n_envs * batch.n_steps == 1600
    assert (batch.option("ltma_iterations"), batch.option("ltma_horizon"), batch.option("ltma_dual_reading")) == (
        40, 7, "found")  # fmt: skip
    assert preset(env, "RMCPMD-Lag", adversary="ltma").option("ltma_iterations") == 3
    # set on every preset: a config given ltma later keeps the environment's settings
    assert preset(env, "PPO-Lag").replace(adversary="ltma").option("ltma_horizon") == 7


def test_older_flat_settings_read_as_the_plugins(pendulum):
    flat = pendulum("settings-flat", {"ppo_epochs": 3, "ppo_target_kl": 0.05, "ltma_per_100": 10.0,
                                      "mcpmd_ltma": 4, "ltma_dual_reading": "found"})  # fmt: skip
    nested = pendulum("settings-nested", {"plugins": {"ppo": {"epochs": 3, "target_kl": 0.05},
                                                      "ltma": {"per_100": 10.0, "per_episode": 4,
                                                               "dual_reading": "found"}}})  # fmt: skip
    for algo in ("PPO-Robust-Lag", "RMCPMD-Lag"):
        a, b = preset(flat, algo, adversary="ltma"), preset(nested, algo, adversary="ltma")
        assert a.replace(env=b.env) == b, algo


def test_the_study_domains_keep_the_tables_of_method_md():
    """docs/method.md §3's tables: PPO's epochs and KL target, LTMA's steps (steps per 100 of the
    4 x 400 batch; per MCPMD episode) and horizon on CartPole and Inventory 1-D / 3-D."""
    table = {"cartpole": (50, 0.01, 50, 160, 10, 10), "inventory": (5, math.inf, 5, 400, 20, 40),
             "inventory3d": (5, math.inf, 5, 320, 20, 40)}  # fmt: skip
    for env, (epochs, kl, dual_epochs, ltma, ltma_mcpmd, horizon) in table.items():
        ppo, mcpmd = preset(env, "PPO-Robust-Lag"), preset(env, "RMCPMD-Lag")
        got = (ppo.epochs, ppo.hparams.target_kl, ppo.dual_epochs, ppo.option("ltma_iterations"),
               mcpmd.option("ltma_iterations"), ppo.option("ltma_horizon"))  # fmt: skip
        assert got == (epochs, kl, dual_epochs, ltma, ltma_mcpmd, horizon), env
        assert ppo.option("ltma_dual_reading") == "found"  # the study's reading on its domains


BAD = itertools.count()  # a name for each bad spec


@pytest.mark.parametrize("plugins,message", [
    ({"ppx": {"epochs": 3}}, "learner['plugins']['ppx']: no registered plug-in of that name has per-environment "
                             "settings; those that have: ltma, ppo, ppo-wide"),
    ({"ppo": {"epoch": 3}}, "unknown setting learner['plugins']['ppo']['epoch']; 'ppo' has: epochs, target_kl"),
    ({"ppo": {"epochs": 3.0}}, "learner['plugins']['ppo']['epochs'] must be an integer (its default is 10), got 3.0"),
    ({"ppo": {"epochs": True}}, "learner['plugins']['ppo']['epochs'] must be an integer"),
    ({"ppo": {"dual_epochs_from_policy": 1}}, "['dual_epochs_from_policy'] must be True or False"),
    ({"ppo": {"epochs": 0}}, "learner['plugins']['ppo']['epochs'] must be a positive integer, got 0"),
    ({"ltma": {"per_100": -1.0}}, "learner['plugins']['ltma']['per_100'] must be a finite number > 0"),
    ({"ltma": {"per_100": math.nan}}, "learner['plugins']['ltma']['per_100'] must be a number"),
    ({"ltma": {"dual_reading": "nominal"}}, "learner['plugins']['ltma']['dual_reading']='nominal' is not allowed; "
                                            "choose one of: found, guarded"),
])  # fmt: skip
def test_bad_settings_are_refused_when_the_preset_is_built(pendulum, plugins, message):
    env = pendulum(f"settings-bad-{next(BAD)}", {"plugins": plugins})
    with pytest.raises(ValueError, match=re.escape(message)):
        preset(env, "PPO-Robust-Lag", adversary="ltma")


def test_a_plugin_declares_settings_of_simple_kinds():
    class Bad(PPO):
        env_settings = {"rollout": [400]}

    with pytest.raises(ValueError, match=re.escape("learner 'ppo-bad': env_settings must be a dict")):
        learners.register("ppo-bad", Bad)
    assert "ppo-bad" not in learners.names()

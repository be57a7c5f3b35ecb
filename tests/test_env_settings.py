"""Per-environment plug-in settings (``rcmdp_jax.env_settings``): a plug-in declares what an
environment's spec may choose for it and turns it into the preset config's fields; the spec
gives them by the plug-in's registered name (``learner={"plugins": {"ppo": {...}}}``). Nothing
here compiles a program: presets are configs."""

import itertools
import math
import re

import pytest

from rcmdp_jax import constraints, env_settings, envs, learners, preset
from rcmdp_jax.learners import PPO
from rcmdp_jax.plugin import Number


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
                             "settings; those that have: ltma, ppo, ppo-wide (a plug-in reads its bases'"),
    ({"ppo-wide": {"epochs": 3}}, "unknown setting learner['plugins']['ppo-wide']['epochs']; 'ppo-wide' has: rollout "
                                  "(and reads dual_epochs_from_policy, epochs, target_kl under its bases' names)"),
    ({"ppo": {"target_kl": -0.01}}, "learner['plugins']['ppo']['target_kl'] must be a number > 0 in float32 (inf: no early stop), got -0.01"),
    ({"ppo": {"epoch": 3}}, "unknown setting learner['plugins']['ppo']['epoch']; 'ppo' has: epochs, target_kl"),
    ({"ppo": {"epochs": 3.0}}, "learner['plugins']['ppo']['epochs'] must be a whole number within int32 (at most 2**31 - 1 in size), got 3.0"),
    ({"ppo": {"epochs": True}}, "learner['plugins']['ppo']['epochs'] must be a whole number within int32"),
    ({"ppo": {"dual_epochs_from_policy": 1}}, "['dual_epochs_from_policy'] must be True or False"),
    ({"ppo": {"epochs": 0}}, "learner['plugins']['ppo']['epochs'] must be a positive integer, got 0"),
    ({"ltma": {"per_100": -1.0}}, "learner['plugins']['ltma']['per_100'] must be a finite number > 0 in float32, got -1.0"),
    ({"ltma": {"per_100": math.nan}}, "learner['plugins']['ltma']['per_100'] must be a finite number > 0 in float32, got nan"),
    ({"ltma": {"dual_reading": "nominal"}}, "learner['plugins']['ltma']['dual_reading']='nominal' is not allowed; "
                                            "choose one of: found, guarded"),
])  # fmt: skip
def test_bad_settings_are_refused_when_the_preset_is_built(pendulum, plugins, message):
    """Whichever plug-ins the algorithm trains with: MDPO-Lag reads neither PPO's nor LTMA's."""
    env = pendulum(f"settings-bad-{next(BAD)}", {"plugins": plugins})
    for algo in ("PPO-Robust-Lag", "MDPO-Lag"):
        with pytest.raises(ValueError, match=re.escape(message)):
            preset(env, algo)


def test_an_older_key_and_its_plugin_setting_are_one(pendulum):
    with pytest.raises(ValueError, match=re.escape("learner['ppo_epochs'] and learner['plugins']['ppo']['epochs'] "
                                                   "are one setting; give it once")):  # fmt: skip
        pendulum("settings-twice", {"ppo_epochs": 7, "plugins": {"ppo": {"epochs": 20}}})
    with pytest.raises(ValueError, match=re.escape("learner['plugins'] must be a dict")):
        pendulum("settings-list", {"ppo_epochs": 7, "plugins": [1, 2]})


def test_a_learner_of_its_own_is_sized_as_a_batch_learner(pendulum):
    """A learner that says nothing of its batch (a ``Learner`` subclass without ``preset``) gets
    the batch learners' (4 x 400 steps), and LTMA's steps from it."""
    from rcmdp_jax.learners import Learner

    class Own(Learner):
        per_env_kernels = True  # (the guarded ltma's envs; never trained here)

    learners.register("own-settings", Own)
    try:
        cfg = preset(pendulum("settings-own", {}), "OWN-SETTINGS-Lag", adversary="ltma")
        assert (cfg.n_envs, cfg.n_steps, cfg.epochs, cfg.option("ltma_iterations")) == (4, 400, 5, 80)
    finally:
        learners.unregister("own-settings")


def test_a_rule_or_method_preset_sets_only_its_own_options(pendulum):
    from rcmdp_jax import constraints
    from rcmdp_jax.constraints.lagrangian import Lagrangian

    class Greedy(Lagrangian):
        suffix = None

        @classmethod
        def preset(cls, fields, settings, domain):
            return {**fields, "epochs": 99}

    constraints.register("greedy-settings", Greedy)
    try:
        with pytest.raises(ValueError, match=re.escape("constraint rule 'greedy-settings': its preset may set only "
                                                       "its own options (none), it set epochs")):  # fmt: skip
            preset(pendulum("settings-greedy", {}), "PPO-Lag")
    finally:
        constraints.unregister("greedy-settings")


def test_a_plugin_declares_settings_of_simple_kinds():
    class Bad(PPO):
        env_settings = {"rollout": [400]}

    with pytest.raises(ValueError, match=re.escape("learner 'ppo-bad': env_settings must be a dict")):
        learners.register("ppo-bad", Bad)
    assert "ppo-bad" not in learners.names()


class _Toy(constraints.Rule):
    """A rule with an option, a per-environment setting of each kind, and a Number among them."""

    options = {"toy_flag": False}
    env_settings = {"flag": False, "count": 3, "gain": Number(1.0, 0.0, open_low=True)}

    def step(self, lam, c_hat, hp):
        return lam


def test_one_check_and_one_wording_for_a_settings_kind():
    """A setting's kind is refused alike whatever declares it: a plug-in's option, a per-environment
    setting, a ``Config`` field (by their defaults), a per-environment setting and an ``HParams``
    field declared by a ``Number`` (by its range)."""
    constraints.register("toy-kinds", _Toy)
    try:
        said = []
        for attempt in (lambda: preset("cartpole", "PPO-Lag", toy_flag=1).validate(),
                        lambda: env_settings.check({"toy-kinds": {"flag": 1}}),
                        lambda: preset("cartpole", "PPO-Lag", normalize_advantages=1),
                        lambda: env_settings.check({"toy-kinds": {"count": 2.5}}),
                        lambda: env_settings.check({"toy-kinds": {"gain": 0.0}}),
                        lambda: preset("cartpole", "PPO-Lag", lr=0.0)):  # fmt: skip
            with pytest.raises(ValueError) as err:
                attempt()
            said.append(str(err.value))
        assert said[:3] == ["option toy_flag must be True or False, got 1",
                            "learner['plugins']['toy-kinds']['flag'] must be True or False, got 1",
                            "normalize_advantages must be True or False, got 1"]  # fmt: skip
        assert said[3] == ("learner['plugins']['toy-kinds']['count'] must be a whole number within int32 "
                           "(at most 2**31 - 1 in size), got 2.5")  # fmt: skip
        assert said[4] == "learner['plugins']['toy-kinds']['gain'] must be a finite number > 0 in float32, got 0.0"
        assert said[5] == "lr must be a finite number > 0 in float32, got 0.0"
        env_settings.check({"toy-kinds": {"flag": True, "count": 4, "gain": 2}})  # and their own kinds pass
    finally:
        constraints.unregister("toy-kinds")

"""A brax environment seen through gymnax's API, its physical system's fields named as users
name them: the adapter under ``envs.robustify`` for brax (``envs.brax_wrapper``).

* **Fields** (the float ``EnvParams`` a box may name): ``LINK_mass`` for each body (kg; the
  body's inertia tensor scales with it, as a denser body's would), and multipliers of the
  system's own arrays (nominal 1): ``friction`` (every geom's friction), ``damping`` (every
  joint's damping; not read by the ``positional`` pipeline: refused there), ``gear`` (every
  actuator's gear). ``BraxGymnax.system(params)`` is the brax ``System`` they give.
* **State**: brax's ``State`` (``pipeline_state``, ``obs``, ``done``, ``metrics``) held as flat
  float vectors in a gymnax ``EnvState``; ``step_env`` rebuilds the brax ``State`` and calls the
  brax env's own ``step`` with its ``sys`` swapped for the perturbed one (brax's own
  domain-randomisation wrappers swap it the same way).
* **Episodes**: the unwrapped brax env; the time limit and the auto-reset are gymnax's
  (``max_steps_in_episode``), brax's ``done`` is termination only, so a time limit is a
  truncation (GAE bootstraps through it). A ``brax.envs.create`` env is unwrapped here, its
  ``EpisodeWrapper``'s length kept.
"""

from __future__ import annotations

import contextlib
import copyreg
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

MULTIPLIERS = ("friction", "damping", "gear")  # scale the system's own arrays (nominal 1)
DIFFERENTIABLE = ("positional",)  # pipelines whose reverse-mode gradient is checked (tests/test_brax.py)
NO_GRADIENT_METHODS = "dr, worst-of-n, corners"


def import_brax():
    """``brax`` and ``brax.envs``, or one clear line saying how to get them."""
    import contextlib
    import io
    import warnings

    # third-party noise, not ours to show: mujoco's optional warp backend prints its absence on
    # import, and brax warns on every system it loads that it is no longer maintained
    warnings.filterwarnings("ignore", message="Brax System, piplines and environments", category=UserWarning)
    warnings.filterwarnings("ignore", message="JAXopt is no longer maintained", category=DeprecationWarning)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import brax
            import brax.envs as benvs
    except ImportError:
        raise ImportError('brax environments need the optional extra: pip install -e ".[brax]"') from None
    return brax, benvs


class ParamsType(type):
    """The type of a brax system's ``EnvParams`` classes (``params_class``): made per system, so
    pickled as the call that makes them, not by a name the module lacks."""


@functools.cache
def params_class(name: str, nominal: tuple[tuple[str, float], ...], length: int) -> ParamsType:
    """The ``EnvParams`` class of a brax system: its fields ``nominal`` (``(field, nominal value)``
    pairs) and ``max_steps_in_episode`` (``length``). One class per arguments in a process, so that
    a compiled program pickled in one process (``rcmdp_jax.program_store``: its arguments' tree
    names this class) and loaded in another meets the class of the env built there."""
    body = {**dict(nominal), "max_steps_in_episode": length, "__module__": __name__, "__qualname__": name}
    body["__annotations__"] = {**{f: float for f, _ in nominal}, "max_steps_in_episode": int}
    cls = struct.dataclass(ParamsType(name, (environment.EnvParams,), body))
    cls._made_by = (name, nominal, length)
    return cls


copyreg.pickle(ParamsType, lambda cls: (params_class, cls._made_by))


@struct.dataclass
class BraxEnvState(environment.EnvState):
    """brax's ``State`` as flat float vectors (``done`` is brax's termination, 0 or 1)."""

    pipeline: jax.Array
    obs: jax.Array
    done: jax.Array
    metrics: jax.Array
    time: int


def unwrap(env) -> tuple[object, int | None]:
    """``(the innermost brax env, the EpisodeWrapper's length or None)``; refuses an action repeat."""
    length = None
    while hasattr(env, "env"):
        if hasattr(env, "episode_length"):
            if getattr(env, "action_repeat", 1) != 1:
                raise ValueError("brax env: EpisodeWrapper's action_repeat must be 1 (repeat in the env's n_frames)")
            length = int(env.episode_length)
        env = env.env
    return env, length


class BraxGymnax(environment.Environment):
    """A brax ``PipelineEnv`` as a gymnax ``Environment`` whose ``EnvParams`` are the system's
    named physical fields (see the module docstring)."""

    def __init__(self, env, episode_length: int | None = None):
        super().__init__()
        inner, wrapped_length = unwrap(env)
        if not hasattr(inner, "sys") or not hasattr(inner, "pipeline_init"):
            raise TypeError(f"robustify needs a brax PipelineEnv (brax.envs.get_environment(...)), got {type(env).__name__}")
        self.brax = inner
        self.backend = str(getattr(inner, "_backend", "unknown"))
        sys = inner.sys
        self.link_names = tuple(str(n) for n in sys.link_names)
        self.mass_fields = tuple(f"{n}_mass" for n in self.link_names)
        length = episode_length or wrapped_length or 1000
        self.nominal = {f: float(m) for f, m in zip(self.mass_fields, np.asarray(sys.link.inertia.mass))}
        self.nominal.update({f: 1.0 for f in MULTIPLIERS})
        self.params_cls = params_class(f"{type(inner).__name__}Params", tuple(self.nominal.items()), int(length))
        template = jax.eval_shape(inner.reset, jax.random.key(0))
        self.ps_def = jax.tree.structure(template.pipeline_state)
        self.ps_shapes = [leaf.shape for leaf in jax.tree.leaves(template.pipeline_state)]
        self.metric_names = tuple(sorted(template.metrics))
        self.obs_size = int(math.prod(template.obs.shape))
        self._dt = float(inner.dt)  # the control step (read here: under a trace brax's sys is swapped)

    @property
    def name(self) -> str:
        return f"brax-{type(self.brax).__name__}"

    @property
    def default_params(self):
        return self.params_cls()

    @property
    def dt(self) -> float:
        return self._dt

    def fields_read(self) -> tuple[str, ...]:
        """The fields this env's pipeline reads (``damping`` is not read by ``positional``)."""
        return tuple(f for f in self.nominal if not (f == "damping" and self.backend == "positional"))

    # ------------------------------------------------------------ the system
    def system(self, params):
        """The brax ``System`` under ``params``: each body's mass and inertia scaled by its
        ``LINK_mass`` over the nominal one, friction, damping and gear multiplied."""
        sys = self.brax.sys
        nominal = jnp.asarray([self.nominal[f] for f in self.mass_fields], jnp.float32)
        scale = jnp.stack([jnp.asarray(getattr(params, f), jnp.float32) for f in self.mass_fields]) / nominal
        inertia = sys.link.inertia.replace(mass=sys.link.inertia.mass * scale,
                                           i=sys.link.inertia.i * scale[:, None, None])  # fmt: skip
        body = jnp.concatenate([jnp.ones((1,)), scale])  # mjx's body 0 is the world
        return sys.replace(
            link=sys.link.replace(inertia=inertia),
            dof=sys.dof.replace(damping=sys.dof.damping * params.damping),
            actuator=sys.actuator.replace(gear=sys.actuator.gear * params.gear),
            body_mass=sys.body_mass * body, body_inertia=sys.body_inertia * body[:, None],
            dof_damping=sys.dof_damping * params.damping, geom_friction=sys.geom_friction * params.friction,
            actuator_gear=sys.actuator_gear.at[:, 0].multiply(params.gear),
        )  # fmt: skip

    @contextlib.contextmanager
    def using(self, sys):
        """The brax env with ``sys`` swapped in while tracing (restored after)."""
        old = self.brax.sys
        self.brax.sys = sys
        try:
            yield self.brax
        finally:
            self.brax.sys = old

    # ------------------------------------------------------------ brax State <-> flat
    def to_brax(self, state: BraxEnvState, sys=None):
        """The brax ``State`` of a flat one (``info``: ``dt``, the control step)."""
        from brax.envs.base import State

        leaves, i = [], 0
        for shape in self.ps_shapes:
            n = math.prod(shape)
            leaves.append(state.pipeline[i : i + n].reshape(shape))
            i += n
        ps = jax.tree.unflatten(self.ps_def, leaves)
        if sys is not None and hasattr(ps, "mass"):  # positional keeps the link masses in its state
            ps = ps.replace(mass=sys.link.inertia.mass ** (1 - sys.spring_mass_scale))
        metrics = {k: state.metrics[j] for j, k in enumerate(self.metric_names)}
        return State(pipeline_state=ps, obs=state.obs, reward=jnp.zeros(()), done=state.done, metrics=metrics,
                     info={"dt": jnp.float32(self.dt)})  # fmt: skip

    def from_brax(self, bstate, time) -> BraxEnvState:
        flat = jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in jax.tree.leaves(bstate.pipeline_state)])
        metrics = jnp.stack([jnp.asarray(bstate.metrics[k], jnp.float32).reshape(()) for k in self.metric_names]) \
            if self.metric_names else jnp.zeros((0,), jnp.float32)  # fmt: skip
        return BraxEnvState(pipeline=flat, obs=jnp.ravel(bstate.obs).astype(jnp.float32),
                            done=jnp.asarray(bstate.done, jnp.float32).reshape(()), metrics=metrics, time=time)  # fmt: skip

    # ------------------------------------------------------------ gymnax contract
    def reset_env(self, key, params):
        with self.using(self.system(params)) as env:
            bstate = env.reset(key)
        state = self.from_brax(bstate, jnp.zeros((), jnp.int32))
        return state.obs, state

    def step_env(self, key, state, action, params):
        sys = self.system(params)
        action = jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)
        with self.using(sys) as env:
            bnext = env.step(self.to_brax(state, sys), action)
        nxt = self.from_brax(bnext, state.time + 1)
        reward = jnp.asarray(bnext.reward, jnp.float32).reshape(())
        return nxt.obs, nxt, reward, self.is_terminated(nxt, params), {}

    def brax_step(self, state, action, params):
        """``(next state, reward)`` of brax's step: what ``RobustBrax`` differentiates."""
        _, nxt, reward, _, _ = self.step_env(jax.random.key(0), state, action, params)
        return nxt, reward

    def get_obs(self, state, params=None, key=None):
        return state.obs

    def is_terminated(self, state, params):
        return state.done > 0.5

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (int(self.brax.action_size),), jnp.float32)

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (self.obs_size,), jnp.float32)

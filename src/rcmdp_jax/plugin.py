"""What every plug-in declares (``Plugin``: a learner, a constraint rule, a robust method)
and the one registry the kinds share (``Registry``: ``register(name, cls)``; environments
register the same way, ``envs.register(name, spec)``, a ``DomainSpec`` carrying their own
settings).

A plug-in carries its own options, their checks, its memory needs and its checks against
an environment; ``Config``, ``Config.validate``, ``study/run_plan.py`` and ``step.Step`` read
them from the registry instead of listing names (docs/design.md, "Plug-ins").
"""

from __future__ import annotations

import math
import re
from importlib import import_module
from typing import Any, ClassVar, NamedTuple

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # names go in ALGO+METHOD names, --algos lists, folders
INT32_MAX = 2**31 - 1  # the train step's counters are int32


def finite_f32(x, xp):  # and representable in float32, the dtype training uses
    return xp.isfinite(x) & (xp.abs(x) <= 3.4028235e38)


class Number(NamedTuple):
    """A traced number, declared once: ``HParams``' own fields (``hparams.number``) and the ones a
    plug-in declares (``Plugin.numbers``) alike. Its ``default``, the range it allows (``low``/
    ``high``, each end included unless ``open_low``/``open_high``; +inf allowed only where ``inf``
    says what it means, e.g. "inf: no clip") and a word on what it is (``what``); one check (``ok``) and one
    wording (``words``) for all. A plug-in's is set as ``"NAME.number"`` (the plug-in's registered
    name, a dot, the number's), e.g. ``--set pid.kp=5``. It enters the compiled program as an
    argument (``HParams.number``), so a sweep of it is lanes of one program and a changed value
    compiles nothing new."""

    default: float
    low: float = -math.inf
    high: float = math.inf
    what: str = ""
    open_low: bool = False
    formerly: str = ""  # the setting it was before it was traced: an older run.json's name for it
    inf: str = ""  # what +inf means, where it is allowed ("" : finite only)
    open_high: bool = False

    def words(self) -> str:
        """The allowed range in words, e.g. "a finite number >= 0", "a number > 0 (inf: no clip)"."""
        if math.isfinite(self.low) and math.isfinite(self.high):
            ends = "(" if self.open_low else "[", ")" if self.open_high else "]"
            return f"a number in {ends[0]}{self.low:g}, {self.high:g}{ends[1]}"
        lo = "" if self.low == -math.inf else (f"> {self.low:g}" if self.open_low else f">= {self.low:g}")
        lo += " in float32" if self.open_low and self.low == 0 else ""  # a tiny number is 0 there
        hi = "" if self.high == math.inf else f"{'<' if self.open_high else '<='} {self.high:g}"
        words = " and ".join(w for w in (lo, hi) if w)
        return " ".join(w for w in ("a number" if self.inf else "a finite number", words) if w) + (
            f" ({self.inf})" if self.inf else "")  # fmt: skip

    def ok(self, x, xp):
        """Whether ``x`` (an array; ``xp`` NumPy or jax.numpy) is in range, element-wise (its low
        end in float32, the dtype training uses, where ``x`` is finite there)."""
        above = lambda y: (y > self.low) if self.open_low else (y >= self.low)
        finite = finite_f32(x, xp)
        low = xp.where(finite, above(xp.where(finite, x, 0.0).astype(xp.float32)), above(x))
        high = (x < self.high) if self.open_high else (x <= self.high)
        return (finite | (x == xp.inf) if self.inf else finite) & low & high


# what a setting declared by its default may be, by the default's kind (``kind_problem``)
KINDS = {bool: "True or False", int: "a whole number within int32 (at most 2**31 - 1 in size)",
         float: "a finite number in float32", str: "a string"}  # fmt: skip


def kind_problem(value: Any, declared: Any) -> str:
    """What ``value`` must be to stand for a setting declared by ``declared`` ("" when it may): a
    ``Number``'s range, else the kind of the default it is (``KINDS``: a bool, a whole number within
    int32, a number finite in float32, a string; another kind of default: "", its plug-in's own
    check says). The one check of a setting's kind: plug-ins' options, per-environment settings
    and ``Config``'s plain fields read it, and ``refusal`` words it."""
    import numpy as np

    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    try:
        x = np.float64(value if number else np.nan)
    except OverflowError:  # an int beyond every float
        x = np.float64(np.nan)
    if isinstance(declared, Number):
        return "" if number and bool(declared.ok(np.asarray(x), np)) else declared.words()
    if isinstance(declared, bool) or isinstance(value, bool):
        ok = isinstance(value, bool) and isinstance(declared, bool)
    elif isinstance(declared, int):
        ok = isinstance(value, int) and abs(value) <= INT32_MAX
    elif isinstance(declared, float):
        ok = number and bool(finite_f32(x, np))
    else:
        ok = not isinstance(declared, str) or isinstance(value, str)
    return "" if ok else KINDS.get(type(declared), "")


def shown(value: Any) -> str:
    """``value`` as a refusal writes it: its repr, an integer of more than 80 digits as ``~10**N``
    (Python writes none beyond 4300 digits), a long text cut after 80 characters."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**80:
        return f"{'-' if value < 0 else ''}~10**{int(math.log10(abs(value)))}"
    try:
        text = repr(value)
    except ValueError:  # one holding such an integer
        return f"a {type(value).__name__} holding an integer too long to write"
    return text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"


def refusal(where: str, words: str, value: Any) -> ValueError:
    """The one wording of a refused value: "WHERE must be WORDS, got VALUE" (``shown``)."""
    return ValueError(f"{where} must be {words}, got {shown(value)}")


def _match(name: Any, names) -> str:
    import difflib

    lower = {str(n).lower(): str(n) for n in names}  # LR: lr
    return lower.get(next(iter(difflib.get_close_matches(str(name).lower(), lower, n=1)), None), "")


def closest(name: Any, names) -> str:
    """What a refusal of an unknown name adds: " (did you mean 'X'?)" with ``X`` the one of ``names``
    closest to ``name`` (``difflib``), "" where none is close."""
    return f" (did you mean {m!r}?)" if (m := _match(name, names)) else ""


def unknown_names(unknown, allowed, what: str = "config field", where: str = "") -> ValueError:
    """The one wording of names no setting has where they are given (``--set``, ``ALGO@FIELD=``,
    ``Config.replace``, a saved config, its options): "unknown config field(s) ['lrr'] (did you mean
    'lr'?); allowed config fields: ...", listing only what that place takes (``allowed``), with the
    closest of them (``closest``) where one is close."""
    allowed, unknown = sorted(allowed), sorted(map(str, unknown))
    close = {u: m for u in unknown if (m := _match(u, allowed))}
    hint = ", ".join(repr(m) if len(unknown) == 1 else f"{m!r} for {u!r}" for u, m in close.items())
    hint = f" (did you mean {hint}?)" if hint else ""
    return ValueError(f"unknown {what}(s) {unknown}{where}{hint}; allowed {what}s: {', '.join(allowed) or 'none'}")


def check_kind(where: str, value: Any, declared: Any) -> None:
    """Refuse ``value`` for the setting ``where`` declared by ``declared`` (``kind_problem``)."""
    if words := kind_problem(value, declared):
        raise refusal(where, words, value)


class Plugin:
    """What a plug-in declares, all optional.

    ``numbers``: its traced numbers, ``{name: Number(default, low, high, what)}``, set as
    ``"REGISTERED_NAME.name"`` (``--set pid.kp=5``, ``PPO-PID-Lag@pid.kp=5``, ``sweep``) and read in
    the program with ``hp.number(f"{self.name}.name")``; unlike ``options`` they are arguments of
    the compiled program, not constants, so sweeping one is lanes of one program.

    ``options``: its own options, ``{name: default}`` (a hashable value: a number, a
    string, a bool or a tuple); a config sets one like a field (``cfg.replace(name=v)``)
    and the plug-in reads it with ``cfg.option(name)``. A subclass has its bases' options
    too (``options_of``): an option several plug-ins share is declared once, on their
    common base, and no other plug-in may declare its name. ``check_options(cfg)`` raises
    ``ValueError`` naming the option and what it allows (``check_count``,
    ``check_choice``; call ``super()``'s for the bases' options); ``check_env(env, cfg)`` raises
    when the environment cannot run the plug-in (both run before anything compiles).
    ``lane_bytes(cfg, record, episode)``: the bytes one lane needs beyond the learner's
    batch (``record``: one kept step, ``episode``: one episode lane); ``size_fields``: the
    config fields or options that set them (the memory check names the one to shrink);
    ``counts(cfg, episode_length)``: the counts it keeps in int32, ``(field, what, n)`` each
    (the plan refuses one beyond int32, naming ``field``).

    ``env_settings``: what an environment's spec may choose for it, ``{name: default}`` (an int,
    float, bool or str each), given under the plug-in's registered name
    (``LearnerSpec.plugins``, e.g. ``{"ppo": {"epochs": 50}}``); a subclass has its bases' under
    their names. ``check_settings(settings)`` refuses a bad value; ``preset(fields, settings,
    domain)`` turns them into a preset config's fields (``rcmdp_jax.env_settings``)."""

    options: ClassVar[dict[str, Any]] = {}
    # options added after run folders were written whose default changes what those ran: the
    # value a saved config that does not name the option reads as (``config_from_dict``)
    legacy_options: ClassVar[dict[str, Any]] = {}
    numbers: ClassVar[dict[str, Number]] = {}
    size_fields: ClassVar[tuple[str, ...]] = ()
    env_settings: ClassVar[dict[str, Any]] = {}

    @classmethod
    def check_settings(cls, settings: dict[str, Any]) -> None:
        """Raise ``ValueError`` naming a bad value of its own ``env_settings`` (``settings``: the
        spec's over the defaults; ``env_settings.where(name, key)`` names one)."""

    @classmethod
    def preset(cls, fields: dict[str, Any], settings: dict[str, Any], domain) -> dict[str, Any]:
        """A preset config's ``fields`` (``Config`` fields and options, ``hparams`` a dict of
        ``HParams`` fields) with this plug-in's part on environment ``domain`` (its ``DomainSpec``);
        ``settings``: its ``env_settings``, the spec's over the defaults. Default: unchanged."""
        return fields

    @classmethod
    def check_options(cls, cfg) -> None:
        """Raise ``ValueError`` naming the option and its allowed values."""

    @classmethod
    def check_env(cls, env, cfg) -> None:
        """Raise ``ValueError`` when ``env`` (built) cannot run this plug-in under ``cfg``."""

    @classmethod
    def lane_bytes(cls, cfg, record: float, episode: float) -> float:
        return 0.0

    @classmethod
    def counts(cls, cfg, episode_length: int) -> tuple[tuple[str, str, int], ...]:
        return ()


class Registry:
    """The plug-ins of one kind (``kind``, e.g. "robust method"), by name: the built-in
    ones (``builtin``: name -> class, or ``"module:Class"`` imported when first used) and
    the registered ones. Each entry is a ``base`` subclass made without arguments."""

    def __init__(self, kind: str, base: str, builtin: dict[str, Any], reserved: dict[str, str] | None = None):
        self.kind, self._base = kind, base
        self._entries: dict[str, Any] = dict(builtin)
        self.builtin = tuple(builtin)
        self.reserved = reserved or {}  # names no plug-in may take -> why (e.g. "none" for robust methods)
        REGISTRIES.append(self)

    def base(self) -> type:
        return _resolve(self._base)

    def register(self, name: str, cls: type) -> type:
        """Add ``cls`` as ``name`` (letters, digits, ``-``, ``_``, ``.``); returns ``cls``."""
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ValueError(f"a {self.kind}'s name must be letters, digits, '-', '_' and '.' (it goes in ALGO+METHOD "
                             f"names, --algos lists and folder names), got {name!r}")  # fmt: skip
        if name in self._entries or name in self.reserved:
            what = self.reserved.get(name, "registered already")
            raise ValueError(f"{self.kind} {name!r} is {what}")
        base = self.base()
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ValueError(f"a {self.kind} must be a {base.__module__}.{base.__name__} subclass, got {cls!r}")
        try:
            cls()
        except TypeError as err:
            raise ValueError(f"{self.kind} {name!r}: {cls.__name__}() must take no arguments ({err})") from None
        _check_option_names(self.kind, name, cls)
        _check_numbers(self.kind, name, cls)
        _check_env_settings(self.kind, name, cls)
        self._entries[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Remove plug-in ``name`` (the built-in ones stay)."""
        if name in self.builtin:
            raise ValueError(f"{self.kind} {name!r} is built-in")
        if name not in self._entries:
            plugins = [n for n in self._entries if n not in self.builtin]
            raise ValueError(f"no {self.kind} {name!r} is registered; registered: {', '.join(plugins) or 'none'}")
        del self._entries[name]

    def names(self) -> tuple[str, ...]:
        """The built-in names, then the registered ones."""
        return tuple(self._entries)

    def get(self, name: str, field: str) -> type:
        """The class registered as ``name``; ``field``: the config field named in the error."""
        check_choice(field, name, tuple(self._entries))
        cls = _resolve(self._entries[name])
        self._entries[name] = cls
        return cls

    def items(self) -> tuple[tuple[str, type], ...]:
        """Every ``(name, class)``, the public read of the registry."""
        return tuple((n, self.get(n, self.kind)) for n in self._entries)


REGISTRIES: list[Registry] = []  # every kind's registry, in the order they were made


def options_of(cls: type) -> dict[str, Any]:
    """The options of plug-in class ``cls``: its own and its bases', ``{name: default}``."""
    return {o: d for c in reversed(cls.__mro__) for o, d in vars(c).get("options", {}).items()}


def declarer(cls: type, option: str) -> type:
    """The class that declares ``option`` for ``cls``: the most basic of its classes that names it."""
    return next(c for c in reversed(cls.__mro__) if option in vars(c).get("options", {}))


def option_owners() -> dict[str, tuple[str, type]]:
    """Every registered plug-in's option -> ``("kind name", class)`` of a plug-in that has it."""
    return {o: (f"{r.kind} {n!r}", cls) for r in REGISTRIES for n, cls in r.items() for o in options_of(cls)}


def option_clash(kind_name: str, cls: type, option: str, owner: tuple[str, type]) -> str:
    """Why ``cls`` may not have ``option`` that ``owner`` (``("kind name", class)``) has ("" if it
    may): only plug-ins that share its declaring base share an option, and with its default."""
    if declarer(cls, option) is not declarer(owner[1], option):
        return f"{kind_name}: option {option!r} is taken by {owner[0]}"
    if options_of(cls)[option] != options_of(owner[1])[option]:
        return (f"{kind_name}: option {option!r} is {declarer(cls, option).__name__}'s, default "
                f"{options_of(owner[1])[option]!r}; a subclass may not change it")  # fmt: skip
    return ""


def check_count(option: str, value: Any) -> None:
    """Refuse a count or size that is not a positive integer within the int32 counters."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise refusal(option, "a positive integer", value)
    if value > INT32_MAX:
        raise ValueError(f"{option}={shown(value)} is beyond the int32 counters of the train step (at most "
                         f"{INT32_MAX})")  # fmt: skip


SEED_LIMIT = 2**32  # a base seed is a uint32 of jax.random.PRNGKey on every platform


def check_seed(option: str, value: Any) -> None:
    """Refuse a base random seed that is not an integer in ``[0, 2**32)`` (the runner's
    ``--seed``, ``rcmdp feasibility``'s, ``FeasibilityConfig.seed``, a saved ``run.json``)."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < SEED_LIMIT:
        raise refusal(option, "an integer in [0, 2**32)", value)


def check_choice(option: str, value: Any, allowed: tuple[str, ...]) -> None:
    """Refuse a value that is not one of ``allowed``, naming them (the closest first, ``closest``)."""
    if value not in allowed:
        raise ValueError(f"{option}={value!r} is not allowed{closest(value, allowed)}; choose one of: "
                         f"{', '.join(allowed)}")  # fmt: skip


def numbers_of(cls: type) -> dict[str, Number]:
    """The traced numbers of plug-in class ``cls``: its own and its bases', ``{name: Number}``."""
    return {n: d for c in reversed(cls.__mro__) for n, d in vars(c).get("numbers", {}).items()}


def _check_numbers(kind: str, name: str, cls: type) -> None:
    """Refuse traced numbers that are not ``Number``s with identifier names and in-range defaults."""
    if not all(isinstance(vars(c).get("numbers", {}), dict) for c in cls.__mro__):
        raise ValueError(f"{kind} {name!r}: numbers must be a dict {{name: Number(default, ...)}}, got {cls.numbers!r}")
    for n, spec in numbers_of(cls).items():
        if not isinstance(n, str) or not n.isidentifier():
            raise ValueError(f"{kind} {name!r}: number {n!r} must be an identifier")
        if not isinstance(spec, Number):
            raise ValueError(f"{kind} {name!r}: number {n!r} must be an rcmdp_jax.plugin.Number, got {spec!r}")
        import numpy as np

        if isinstance(spec.default, bool) or not isinstance(spec.default, (int, float)) or not spec.ok(
            np.asarray(float(spec.default)), np
        ):
            raise ValueError(f"{kind} {name!r}: number {n!r}'s default {spec.default!r} must be {spec.words()}")


def _check_env_settings(kind: str, name: str, cls: type) -> None:
    """Refuse per-environment settings that are not ``{identifier: int | float | bool | str | Number}``."""
    own = vars(cls).get("env_settings", {})
    if not isinstance(own, dict) or not all(
        isinstance(k, str) and k.isidentifier() and isinstance(v, (int, float, bool, str, Number)) for k, v in own.items()
    ):
        raise ValueError(f"{kind} {name!r}: env_settings must be a dict {{identifier: an int, float, bool or str "
                         f"default, or a Number}}, got {own!r}")  # fmt: skip


def _resolve(entry: Any) -> Any:
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        return getattr(import_module(module), attr)
    return entry


def _check_option_names(kind: str, name: str, cls: type) -> None:
    """Refuse options that are not names, or that another plug-in declares (a subclass shares
    its bases' with their defaults); ``Config.validate`` refuses those that are config fields."""
    if not all(isinstance(vars(c).get("options", {}), dict) for c in cls.__mro__):
        raise ValueError(f"{kind} {name!r}: options must be a dict {{name: default}}, got {cls.options!r}")
    taken = option_owners()
    for option, default in options_of(cls).items():
        if not isinstance(option, str) or not option.isidentifier():
            raise ValueError(f"{kind} {name!r}: option {option!r} must be an identifier")
        if option in taken and (why := option_clash(f"{kind} {name!r}", cls, option, taken[option])):
            raise ValueError(why)
        try:
            hash(default)
        except TypeError:
            raise ValueError(
                f"{kind} {name!r}: option {option!r}'s default must be hashable, got {default!r}"
            ) from None

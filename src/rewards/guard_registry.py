"""Guards as registered classes: a guard is one class (its name, its settings, its check) and one yaml entry
(reward.guards.<name> in conf/reward_base/default.yaml), as a component is (src/rewards/components.py).

    @register_guard
    class Repetition(Guard):
        name = "repetition"

        @dataclass(frozen=True)
        class Settings(GuardSettingsBase):          # enable and penalty, then its own fields
            max_share: float = guard_field("the share of tokens inside a repeated n-gram at or above which it fires",
                                           interval="(0, 1]")

        def fired(self, x: GuardInput, s: Settings) -> bool: ...

The settings class is the one typed definition of the guard's keys: the workers read the reward kwargs into it
(`read_guards`), and the launcher's Hydra schema is made from it (src/config/reward_schema.py), each field with its
doc line and interval, so a misspelt key is refused at composition and a value out of its interval before anything
is written. The built-in guards register in src/rewards/guards.py, which is where the rest of src/rewards imports
them from. Stdlib only.
"""
from __future__ import annotations

import difflib
import math
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Mapping

from src.data.terms import Term
from src.rewards.values import RewardConfigError, number


def guard_field(doc: str, interval: str | None = None, example: str | None = None, default: Any = MISSING):
    """A guard setting with its doc line and, for a number, the interval it must lie in ("(0, 1]", "(-inf, 0]") with
    the value a refusal suggests."""
    if (interval is None) != (example is None):
        raise ValueError("guard_field(): an interval needs its example and an example its interval")
    return field(default=default, metadata={"doc": doc, "interval": interval, "example": example})


@dataclass(frozen=True)
class GuardSettingsBase:
    """What every guard has; a guard's Settings subclasses it."""
    enable: bool = guard_field("whether the guard runs (off: not computed, logged as null)")
    # a guard lowers the score of an answer it flags: a positive penalty would reward the hack it catches
    penalty: float = guard_field("added to format.bonus when the guard flags an answer (the lowest penalty that "
                                 "applies)", interval="(-inf, 0]", example="-1.0")


@dataclass(frozen=True)
class GuardInput:
    """One well-formed answer and what it is judged against; languages as base codes (zh for zh-CN)."""
    translation: str
    source: str
    reference: str
    src_lang: str
    tgt_lang: str
    terms: tuple[Term, ...] = ()


class Guard:
    """Subclass, set `name` and `Settings`, override `fired` (and `check`, `launch_value` where they apply)."""
    name: ClassVar[str]
    Settings: ClassVar[type] = GuardSettingsBase
    # False: part of a run (a key of its reward kwargs and a flag of every result) only when the run trains on
    # `guards_component` (the reward component the guard keeps honest), so a guard added after runs were recorded
    # keeps their verl config, run id and logged keys as they were
    in_every_run: ClassVar[bool] = True
    guards_component: ClassVar[str | None] = None

    def fired(self, x: GuardInput, s: Any) -> bool:
        raise NotImplementedError

    def check(self, s: Any) -> None:
        """Refuse, in one line (RewardConfigError), what the fields' types and intervals cannot say."""

    def read(self, key: str, value: Any) -> Any:
        """A setting of this guard read from the kwargs where its type alone does not say how; NotImplemented: as
        its type says."""
        return NotImplemented

    def launch_value(self, key: str, value: Any, root) -> Any:
        """A setting as the launcher writes it into the reward kwargs (`root`: the checkout relative paths are
        read from): as given, unless the guard says otherwise."""
        return value


_REGISTRY: dict[str, Guard] = {}


def register_guard(cls: type[Guard]) -> type[Guard]:
    """Class decorator: make `cls` available under `cls.name` (the same class again is a no-op)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise RewardConfigError(f"guard {cls.__qualname__} needs a `name` that is a Python identifier, got {name!r}")
    if not (isinstance(cls.Settings, type) and issubclass(cls.Settings, GuardSettingsBase)):
        raise RewardConfigError(f"guard {name}: Settings must subclass GuardSettingsBase (enable, penalty)")
    old = _REGISTRY.get(name)
    if old is not None and (type(old).__module__, type(old).__qualname__) != (cls.__module__, cls.__qualname__):
        raise RewardConfigError(f"guard name {name!r} is taken by {type(old).__module__}.{type(old).__qualname__}")
    _REGISTRY[name] = cls()
    return cls


def registered() -> dict[str, Guard]:
    """name -> guard, in registration order (the order of the logged flags)."""
    return dict(_REGISTRY)


def flag(name: str) -> str:
    """The result key a guard's verdict is logged under."""
    return f"guard_{name}"


# ----------------------------------------------------------------------------------------------
# the settings: reward kwargs `guards` -> one Settings object per guard
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GuardSettings:
    """reward.guards as the workers read it: guard name -> its Settings, None for a guard the kwargs have no
    settings for (written before it existed, or not in this run): off."""
    by_name: Mapping[str, Any]

    def __getattr__(self, name: str) -> Any:
        by_name = self.__dict__.get("by_name", {})
        if name in by_name:
            return by_name[name]
        raise AttributeError(name)

    def on(self, name: str) -> bool:
        guard = self.by_name.get(name)
        return guard is not None and guard.enable

    def enabled(self) -> tuple[str, ...]:
        return tuple(n for n in self.by_name if self.on(n))

    def logged(self) -> tuple[str, ...]:
        """The guards whose flags this run's results carry: every guard in every run, and the others it has."""
        return tuple(n for n, g in registered().items() if g.in_every_run or self.by_name.get(n) is not None)


def _type_of(settings_cls: type, key: str):
    return typing.get_type_hints(settings_cls)[key]


def _value(name: str, key: str, value: Any, kind, interval: str | None) -> Any:
    """One setting checked against its field's type and interval; RewardConfigError naming the key."""
    where = f"reward.guards.{name}.{key}"
    args = typing.get_args(kind)
    if type(None) in args:
        if value is None:
            return None
        kind = next(a for a in args if a is not type(None))
    if kind is bool:
        if not isinstance(value, bool):
            raise RewardConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RewardConfigError(f"{where} must be an integer >= 0, got {value!r}")
        return value
    if kind is float:
        v = number(value, f"guards.{name}.{key}")
        if interval is not None and not _inside(v, interval):
            raise RewardConfigError(f"{where} must be in {interval}, got {v:g}")
        return v
    if kind is str:
        if not isinstance(value, str) or not value.strip():
            raise RewardConfigError(f"{where} must be a non-empty string, got {value!r}")
        return value
    if typing.get_origin(kind) is tuple:
        if isinstance(value, str) or not hasattr(value, "__iter__") or not all(isinstance(x, str) for x in value):
            raise RewardConfigError(f"{where} must be a list of strings, got {value!r}")
        return tuple(value)
    raise TypeError(f"guard {name}: setting {key} has a type read_guards cannot read ({kind})")


def _inside(v: float, interval: str) -> bool:
    """Whether v lies in an interval written as "(0, 1]", "(-inf, 0]", "[0, inf)"."""
    lo_text, hi_text = (p.strip() for p in interval[1:-1].split(","))
    lo, hi = float(lo_text), float(hi_text)
    above = v > lo if interval[0] == "(" else v >= lo
    below = v < hi if interval[-1] == ")" else v <= hi
    return math.isfinite(v) and above and below


def read_guards(value: Mapping[str, Any] | None) -> GuardSettings:
    """reward kwargs `guards` -> settings. None (a verl config written before the guards existed, replayed from a
    snapshot), or a guard absent from them: that guard off, so the replay scores as the original run did."""
    given = dict(value or {})
    guards = registered()
    for name, sub in given.items():
        if name not in guards:
            near = difflib.get_close_matches(name, list(guards), n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            raise RewardConfigError(f"reward.guards: unknown guard {name!r} ({hint}known: {', '.join(guards)})")
        # `reward.guards.repetition=false` replaces the group by a bool: refused, not read as "every key off"
        if sub is not None and not isinstance(sub, Mapping):
            raise RewardConfigError(f"reward.guards.{name} is a group of settings, got {sub!r}; to turn the guard "
                                    f"off: reward.guards.{name}.enable=false")
    out: dict[str, Any] = {}
    for name, guard in guards.items():
        sub = dict(given.get(name) or {})
        if not sub:
            out[name] = None
            continue
        settings_fields = {f.name: f for f in fields(guard.Settings)}
        missing = [f for f, spec in settings_fields.items() if f not in sub and spec.default is MISSING]
        extra = [f for f in sub if f not in settings_fields]
        if missing or extra:
            bad = (f"lacks {missing[0]!r}" if missing else f"has unknown key {extra[0]!r}")
            raise RewardConfigError(f"reward.guards.{name} {bad} (keys: {', '.join(settings_fields)})")
        kw = {}
        for key, v in sub.items():
            own = guard.read(key, v)
            kw[key] = own if own is not NotImplemented else _value(name, key, v, _type_of(guard.Settings, key),
                                                                   settings_fields[key].metadata.get("interval"))
        settings = guard.Settings(**kw)
        guard.check(settings)
        out[name] = settings
    return GuardSettings(out)


def launch_kwargs(group: Mapping[str, Any], root, train_weights: Mapping[str, float]) -> dict:
    """The composed reward.guards -> the reward kwargs' `guards`: each guard in every run, and each other one when
    the run trains on the component it guards (`train_weights`), its settings as plain values (a guard that is not
    a group goes through as is: read_guards refuses it in one line)."""
    guards = registered()
    out = {}
    for name, sub in dict(group).items():
        guard = guards.get(name)
        if isinstance(sub, Mapping):
            if guard is not None and not guard.in_every_run and not train_weights.get(guard.guards_component or ""):
                continue
            sub = {k: (guard.launch_value(k, v, root) if guard is not None else v) for k, v in dict(sub).items()}
        out[name] = sub
    return out


# ----------------------------------------------------------------------------------------------
# the verdicts of one answer
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Guards:
    """Which guards fired: name -> True/False, None for a guard of the run that is off; a guard not in the run has
    no entry (and no flag)."""
    results: Mapping[str, bool | None] = field(default_factory=dict)

    @classmethod
    def none_of(cls, s: GuardSettings | None) -> "Guards":
        """No guard computed (an answer that never reached them): every flag of the run null."""
        logged = s.logged() if s is not None else tuple(n for n, g in registered().items() if g.in_every_run)
        return cls({n: None for n in logged})

    def fired(self) -> tuple[str, ...]:
        return tuple(n for n, v in self.results.items() if v)

    @property
    def any(self) -> bool:
        return bool(self.fired())

    def flags(self) -> dict[str, float | None]:
        """As reward components: 1.0 fired, 0.0 not, None off (means give rates per step)."""
        return {flag(n): (None if v is None else float(v)) for n, v in self.results.items()}

    def penalty(self, s: GuardSettings) -> float | None:
        """The lowest penalty of the guards that fired, None when none did."""
        applied = [s.by_name[n].penalty for n in self.fired()]
        return min(applied) if applied else None


def run_guards(x: GuardInput, s: GuardSettings | None) -> Guards:
    """Every guard of the run that is on, computed (so each is logged); the others None."""
    out = dict(Guards.none_of(s).results)
    if s is not None:
        guards = registered()
        for name in s.enabled():
            out[name] = bool(guards[name].fired(x, s.by_name[name]))
    return Guards(out)

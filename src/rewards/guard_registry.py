"""Guards as registered classes: a guard is one class (its name, its settings, its check) and one yaml entry
(reward.guards.<name> in conf/reward_base/default.yaml), as a component is (src/rewards/components.py).

    @register_guard
    class Repetition(Guard):
        name = "repetition"

        @dataclass(frozen=True)
        class Settings(GuardSettingsBase):          # enable and penalty, then its own fields
            max_share: float = setting_field("the share of tokens inside a repeated n-gram at or above which it fires",
                                           interval="(0, 1]")

        def fired(self, x: GuardInput, s: Settings) -> bool: ...

The settings class is the one typed definition of the guard's keys (src/rewards/typed_settings.py): the workers
read the reward kwargs into it (`read_guards`), and the launcher's Hydra schema is made from it (src/config/reward_schema.py), each field with its
doc line and interval, so a misspelt key is refused at composition and a value out of its interval before anything
is written. The built-in guards register in src/rewards/guards.py, which is where the rest of src/rewards imports
them from. Stdlib only.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from src.data.terms import Term
from src.rewards.typed_settings import read_section, setting_field
from src.rewards.values import RewardConfigError


@dataclass(frozen=True)
class GuardSettingsBase:
    """What every guard has; a guard's Settings subclasses it."""
    enable: bool = setting_field("whether the guard runs (off: not computed, logged as null)")
    # a guard lowers the score of an answer it flags: a positive penalty would reward the hack it catches
    penalty: float = setting_field("added to format.bonus when the guard flags an answer (the lowest penalty that "
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
        sub = given.get(name)
        if not sub:
            out[name] = None
            continue
        settings = read_section(guard.Settings, sub, f"reward.guards.{name}", guard.read)
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

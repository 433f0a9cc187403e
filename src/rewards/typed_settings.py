"""One typed definition per group of reward settings (reward.format, reward.degenerate, each guard, ...): a frozen
dataclass whose fields carry their doc line and, for a number that must lie in an interval, that interval. The
reward workers read verl's reward kwargs into it (`read_section`), and the launcher's Hydra schema is made from the
same class (src/config/reward_schema.py `schema_of`): a key is declared once, for both sides, with its doc.

    @dataclass(frozen=True)
    class FormatSettings:
        bonus: float = setting_field("added when the format is right")

Stdlib only: the reward workers import it.
"""
from __future__ import annotations

import collections.abc
import math
import typing
from dataclasses import MISSING, field, fields
from typing import Any, Callable, Mapping

from src.rewards.values import RewardConfigError, number


def setting_field(doc: str, interval: str | None = None, example: str | None = None, default: Any = MISSING,
                  choices: tuple[str, ...] | None = None):
    """A setting with its doc line and, for a number, the interval it must lie in ("(0, 1]", "(-inf, 0]") with the
    value a refusal suggests; for a string, the `choices` it must be one of."""
    if (interval is None) != (example is None):
        raise ValueError("setting_field(): an interval needs its example and an example its interval")
    metadata = {"doc": doc, "interval": interval, "example": example}
    if choices is not None:  # only then: the Hydra schema copies the metadata of the others as it was
        metadata["choices"] = tuple(choices)
    return field(default=default, metadata=metadata)


def inside(v: float, interval: str) -> bool:
    """Whether v lies in an interval written as "(0, 1]", "(-inf, 0]", "[0, inf)"."""
    lo_text, hi_text = (p.strip() for p in interval[1:-1].split(","))
    lo, hi = float(lo_text), float(hi_text)
    above = v > lo if interval[0] == "(" else v >= lo
    below = v < hi if interval[-1] == ")" else v <= hi
    return math.isfinite(v) and above and below


def choice(where: str, value: Any, choices: tuple[str, ...]) -> str:
    """`value` if it is one of `choices`; else RewardConfigError: "reward.credit must be sequence or token, got 'x'
    (e.g. reward.credit=token)" (the example: the last choice)."""
    if value not in choices:
        named = f"{', '.join(choices[:-1])} or {choices[-1]}" if len(choices) > 1 else choices[0]
        raise RewardConfigError(f"{where} must be {named}, got {value!r} (e.g. {where}={choices[-1]})")
    return value


def read_value(where: str, value: Any, kind, interval: str | None = None,
               choices: tuple[str, ...] | None = None) -> Any:
    """One setting checked against its field's type (bool, int >= 0, float, str, a tuple of str or float, a Mapping of
    names to one of those, and those or None), interval and choices; RewardConfigError naming `where` (the dotted key,
    reward. included)."""
    args = typing.get_args(kind)
    if type(None) in args:
        if value is None:
            return None
        (kind,) = [a for a in args if a is not type(None)]
    if kind is bool:
        if not isinstance(value, bool):
            raise RewardConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RewardConfigError(f"{where} must be an integer >= 0, got {value!r}")
        return value
    if kind is float:
        v = number(value, where.removeprefix("reward."))
        if interval is not None and not inside(v, interval):
            raise RewardConfigError(f"{where} must be in {interval}, got {v:g}")
        return v
    if kind is str:
        if choices is not None:
            return choice(where, value, choices)
        if not isinstance(value, str) or not value.strip():
            raise RewardConfigError(f"{where} must be a non-empty string, got {value!r}")
        return value
    if typing.get_origin(kind) is collections.abc.Mapping:
        item = typing.get_args(kind)[1]
        if not isinstance(value, Mapping):
            raise RewardConfigError(f"{where} must be a map of names to values, got {value!r}")
        return {str(k): read_value(f"{where}.{k}", v, item) for k, v in value.items()}
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
            raise RewardConfigError(f"{where} must be a list, got {value!r}")
        if item is str:
            if not all(isinstance(x, str) for x in value):
                raise RewardConfigError(f"{where} must be a list of strings, got {value!r}")
            return tuple(value)
        return tuple(read_value(where, x, item) for x in value)
    raise TypeError(f"{where}: a setting of a type read_value cannot read ({kind})")


def read_section(cls: type, value: Any, where: str,
                 own: Callable[[str, Any], Any] | None = None) -> Any:
    """`value` (a mapping from the reward kwargs) as an instance of the settings class `cls`: every field without a
    default present, no other key, each read by its type and interval, or by `own(key, value)` where that does not
    return NotImplemented. RewardConfigError naming `where` (reward.format) and the key."""
    if not isinstance(value, Mapping):
        raise RewardConfigError(f"{where} is a group of settings, got {value!r}")
    declared = {f.name: f for f in fields(cls)}
    missing = [f for f, spec in declared.items() if f not in value and spec.default is MISSING]
    extra = [f for f in value if f not in declared]
    if missing or extra:
        bad = f"lacks {missing[0]!r}" if missing else f"has unknown key {extra[0]!r}"
        raise RewardConfigError(f"{where} {bad} (keys: {', '.join(declared)})")
    hints = typing.get_type_hints(cls)
    kw = {}
    for key, v in value.items():
        got = own(key, v) if own is not None else NotImplemented
        meta = declared[key].metadata
        kw[key] = got if got is not NotImplemented else read_value(f"{where}.{key}", v, hints[key],
                                                                   meta.get("interval"), meta.get("choices"))
    return cls(**kw)

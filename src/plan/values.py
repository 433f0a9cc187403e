"""PlanError, Adjustment, and the range checks every part of the plan shares.

Types are the schema's (src/config/schema.py: Hydra refuses `gpus=four` at composition); what a
type cannot say, a count >= 1 or a size > 0, is checked here, with the key and an example.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class PlanError(ValueError):
    """Bad input: the message is one line saying what is wrong and how to fix it."""


@dataclass(frozen=True)
class Adjustment:
    """An intent the plan changed to satisfy a rule: the key, the value asked for, the value used, why."""
    key: str
    intent: Any
    value: Any
    reason: str


def at_least(value, minimum: int, key: str, example: str):
    """`value` when it is >= `minimum` (a count: minimum 1 reads "a positive integer")."""
    if value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise PlanError(f"{key} must be {what}, got {value!r} (e.g. {example})")
    return value


def positive(value, key: str, example: str):
    """`value` when it is > 0 (a size or a duration)."""
    if value <= 0:
        raise PlanError(f"{key} must be a positive number, got {value!r} (e.g. {example})")
    return value


def flatten(tree: dict, prefix: str = "") -> dict:
    """{'a': {'b': 1}} -> {'a.b': 1}; empty dicts are kept as values."""
    out = {}
    for key, value in (tree or {}).items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out

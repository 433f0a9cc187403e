"""RewardConfigError and the readers of one reward setting's value (a finite number, a [lo, hi]
range), shared by the worker-side settings, the guards' settings, the launch-side builder and
language-ID loading, so each refusal reads the same. Stdlib only.
"""
from __future__ import annotations

import math
from typing import Any


class RewardConfigError(ValueError):
    """A reward setting that cannot work; one line naming the key."""


def number(value: Any, key: str) -> float:
    """reward.<key> as a float; refused unless a finite int or float (a bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RewardConfigError(f"reward.{key} must be a finite number, got {value!r}")
    return float(value)


def number_range(value: Any, key: str) -> tuple[float, float]:
    """reward.<key> as (lo, hi) from a two-item list."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise RewardConfigError(f"reward.{key} must be [lo, hi], got {value!r}")
    return number(value[0], key), number(value[1], key)

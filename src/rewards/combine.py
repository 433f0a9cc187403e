"""Components -> one answer score: optional discrete thresholds, clipping, weights."""
from __future__ import annotations

from typing import Mapping

from src.rewards.components import get_component
from src.rewards.settings import RewardSettings


def discretised(value: float, thresholds: tuple[float, ...]) -> float:
    """Share of thresholds reached: [0.5, 0.7, 0.85] maps 0.72 to 2/3."""
    return sum(1 for t in thresholds if value >= t) / len(thresholds)


def answer_score(components: Mapping[str, float | None], s: RewardSettings, validation: bool) -> float:
    """sum over weighted components of weight * clip(value). A weighted component that could not be
    computed (no reference for BLEU, a non-finite model score) counts at its lower clip bound:
    the worst value, never a silent neutral one."""
    total = 0.0
    for comp, weight in s.weights(validation).items():
        if weight == 0.0:
            continue
        lo, hi = s.clip[comp]
        value = components.get(comp)
        if value is None:
            v = lo
        else:
            v = get_component(comp).normalised(value)  # e.g. BLEU is logged 0..100, weighted /100
            if s.discrete.enable and comp in s.discrete.components:
                v = discretised(v, s.discrete.thresholds)
            v = min(max(v, lo), hi)
        total += weight * v
    return total

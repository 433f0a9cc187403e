"""What the reward said about the answers a training step trains on, as verl metrics.

verl 0.9.1 logs the reward function's extra info for validation only (verl/trainer/ppo/v1/trainer_base.py,
`_validate` -> `_val_metrics_update`: val-aux/<data source>/<key>/mean@N); for training it logs the summed
token rewards (critic/score, critic/rewards) and nothing per component, so a guard's flag rate, a
component's curve or the share of degenerate answers never reached the metrics file or wandb. The
reward's extra info of every trajectory is in TransferQueue (`extra_fields.reward_extra_info`, written by
the V1 agent loop, verl/trainer/ppo/v1/agent_loop_tq.py), where DAPO's filter already reads it
(replay_buffer.py, `_dapo_filtered_keys`). src/trainer/guard.py reads it for the batch a step trains on,
right after verl's `sample` selected it, and adds one metric per numeric key:

    train-aux/<key>/mean   the mean over the step's trajectories that carry a number for it

so `train-aux/guard_<name>/mean` is the guard's flag rate (1.0 flagged, 0.0 not; a guard that is off
logs None and no metric), `train-aux/score/mean` the reward's sequence score (without what verl adds
after the reward function: token-credit penalties, DAPO's overlong penalty), `train-aux/bleu/mean` a
component's mean. Strings (the translation, error spans) and keys that are None everywhere are left out.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable, Mapping

PREFIX = "train-aux"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # numpy scalars too
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def means(reward_extra_infos: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """train-aux/<key>/mean over the trajectories' reward extra info (see the module docstring)."""
    values: dict[str, list[float]] = defaultdict(list)
    for info in reward_extra_infos:
        for key, value in info.items():
            number = _number(value)
            if number is not None:
                values[key].append(number)
    return {f"{PREFIX}/{key}/mean": sum(v) / len(v) for key, v in sorted(values.items())}


def reward_extra_infos(extra_fields: Iterable[Any]) -> list[Mapping[str, Any]]:
    """The reward's extra info of each trajectory, from the `extra_fields` TransferQueue returns."""
    infos = []
    for value in extra_fields:
        fields = getattr(value, "data", value)  # NonTensorData wraps the dict
        info = fields.get("reward_extra_info") if isinstance(fields, dict) else None
        infos.append(info if isinstance(info, dict) else {})
    return infos

"""Which reward components a run trained with: the training reward's weights in its resolved verl config (the reward
kwargs src/rewards/group_kwargs.py writes). The report marks validation metrics by them, the evaluation its columns."""
from __future__ import annotations

TRAIN_WEIGHTS_KEY = "reward.custom_reward_function.reward_kwargs.train_weights"


def train_weights_of(cfg: dict) -> dict[str, float] | None:
    """{component: weight} the training reward used, the numeric entries only; None when the config has none (a run
    of another reward function)."""
    raw = cfg
    for part in TRAIN_WEIGHTS_KEY.split("."):
        if not isinstance(raw, dict) or part not in raw:
            return None
        raw = raw[part]
    if not isinstance(raw, dict):
        return None
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

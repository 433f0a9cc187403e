"""verl reward managers whose validation scores are the reward function's score, nothing added.

verl 0.9.1's `dapo` manager (verl/experimental/reward_loop/reward_manager/dapo.py,
DAPORewardManager.run_single) adds the overlong-buffer penalty to every row: it never looks at
whether the row is a validation row, so `val-core/.../reward` of a DAPO run would mix translation
quality with response length and not compare with a GRPO run. The subclass here keeps verl's
training behaviour unchanged and, for validation rows (extra_info.split in the reward's
`validation_splits`, the rule src/rewards/compute.py uses), returns the function's own score and
logs the penalty as 0.

Loaded by verl through `reward.reward_manager.source=importlib` (verl/trainer/ppo/reward.py,
resolve_reward_manager_cls), in the trainer and in every reward loop worker; src/verl_config/ppo_trainer.py
(REWARD_MANAGERS) says which manager name of conf/algo maps to which class here.
"""
from __future__ import annotations

from typing import Any

from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager

MODULE_PATH = "pkg://src.rewards.managers"


class PureValidationDAPORewardManager(DAPORewardManager):
    """verl's DAPO manager; validation rows get the reward function's score without the penalty."""

    def __init__(self, config, tokenizer, compute_score, **kwargs: Any):
        super().__init__(config, tokenizer, compute_score, **kwargs)
        fn_kwargs = (config.reward.get("custom_reward_function") or {}).get("reward_kwargs") or {}
        self.validation_splits = {str(s) for s in (fn_kwargs.get("validation_splits") or ())}

    async def run_single(self, data) -> dict:
        out = await super().run_single(data)
        info = data[-1:][0].non_tensor_batch.get("extra_info") or {}
        if str(info.get("split", "")) not in self.validation_splits:
            return out
        extra = out["reward_extra_info"]
        # compute_score always returns a dict with "score" (src/rewards/compute.py); the penalty
        # is recomputed away rather than switched off because run_single calls overlap on one
        # manager instance (one event loop, many trajectories), so no shared flag may change.
        out["reward_score"] = extra["score"]
        if "overlong_reward" in extra:
            extra["overlong_reward"] = 0.0
            extra["overlong"] = False
        return out


"""reward.normalise=per_component in the trainer: the batch's reward parts, read from TransferQueue
around verl's own advantage step (the rule and the estimator: src/rewards/normalise.py).

verl 0.9.1's V1 trainer computes advantages in `_compute_advantage` (verl/trainer/ppo/v1/
trainer_base.py): it fetches uid, response_mask, rm_scores, log-probs and values for the batch's
keys and hands the estimator tensors only (verl/trainer/ppo/ray_trainer.py, compute_advantage).
The parts each trajectory's reward function returned are in the same store, in its `extra_fields`
(reward_extra_info, put there by verl/trainer/ppo/v1/agent_loop_tq.py, _agent_loop_postprocess;
verl's own validation reads them back the same way, trainer_base.py _validate). So this mixin,
placed before verl's trainer class (src/trainer/entry.py time_limited), fetches `uid`, `rm_scores`
and `extra_fields` for the same keys and holds the parts while verl's _compute_advantage runs,
unchanged: KL, rollout correction, writing the advantages back are verl's. With any other
estimator it is not involved.
"""
from __future__ import annotations

from src.rewards import normalise


class RewardPartsAdvantage:
    """Mixed in before verl's trainer class; active with adv_estimator=grpo_per_component."""

    def _compute_advantage(self, batch, metrics: dict):
        if self.config.algorithm.adv_estimator != normalise.ESTIMATOR:
            return super()._compute_advantage(batch, metrics)
        from verl.trainer.ppo.v1 import trainer_base

        data = trainer_base.tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                            select_fields=["uid", "rm_scores", "extra_fields"])
        uids = data.pop("uid").tolist()
        # its row sums are the scores verl trains on (as trainer_base.py _validate reads them)
        scores = data["rm_scores"].sum(dim=1).tolist()
        infos = [(f or {}).get("reward_extra_info") or {} if isinstance(f, dict) else {}
                 for f in data.pop("extra_fields").tolist()]
        # verl's padding rows (padding_utils.py, upsample_batch_to_divisible_size: tagged is_padding, in a
        # group of their own, no response token, rm_scores 0) carry a copy of a real row's extra_fields
        padding = [bool((tag or {}).get("is_padding")) for tag in batch.tags]
        weights = normalise.weights_of(self.config.reward.custom_reward_function.reward_kwargs)
        rows = normalise.parts_matrix(infos, weights, scores, padding)
        real = [row for row, pad in zip(rows, padding) if not pad]
        for k, name in enumerate(weights):
            metrics[f"reward_parts/{name}/mean"] = sum(r[k] for r in real) / len(real) if real else 0.0
        with normalise.batch_parts(uids, rows, weights):
            return super()._compute_advantage(batch, metrics)

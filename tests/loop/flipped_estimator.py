"""A test-only advantage estimator: verl's GRPO advantages with the sign flipped, `algo.adv_estimator=grpo_flipped`.

The control of the learning check (test_learn_tiny.py): the same run as experiment=learn_tiny, every part
real, but each update pushes the policy away from the answers the reward prefers. It must not learn, and
the verdict must say FAIL: the check can fail, and it follows the reward's direction, not the mere fact
that weights change.

Registered in verl's own estimator registry (verl/trainer/ppo/core_algos.py register_adv_est), which the
V1 trainer consults for every estimator but gae and grpo (verl/trainer/ppo/ray_trainer.py
compute_advantage -> get_adv_estimator_fn). Every process imports it through verl's
VERL_USE_EXTERNAL_MODULES (verl/__init__.py import_external_libs): the launcher, whose check refuses an
estimator verl has not registered, and the trainer's processes (accelerator.env).
"""
from __future__ import annotations

from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

NAME = "grpo_flipped"


@register_adv_est(NAME)
def compute_flipped_grpo_advantage(token_level_rewards, response_mask, index, config=None, **kwargs):
    norm = config.get("norm_adv_by_std_in_grpo", True) if config is not None else True
    advantages, returns = compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards, response_mask=response_mask, index=index,
        norm_adv_by_std_in_grpo=norm, config=config)
    return -advantages, -returns

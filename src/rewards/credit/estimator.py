"""`grpo_token`: verl's GRPO advantage plus a weighted token term for the penalised tokens.

What reaches an estimator (verl/trainer/ppo/v1/trainer_base.py, `_compute_advantage`, then
verl/trainer/ppo/ray_trainer.py, `compute_advantage`, the branch for estimators other than gae
and grpo): `token_level_rewards` (= rm_scores, no KL in reward here), `response_mask`, `index`
(the group uid) and `config` (the `algorithm` section). Reward extra info does not, so the token
penalties travel inside rm_scores (src/rewards/credit/agent_loop.py puts them there) and this
estimator takes them apart again:

    sequence score s_i  = token_level_rewards[i, last_i]   (last_i: the last position with
                          response_mask 1; the agent loop never puts a penalty there)
    penalties p_{i,t}   = token_level_rewards[i, t] for t != last_i, masked (all <= 0)
    A_{i,t}             = GRPO(s)_i + weight * p_{i,t} / scale          where response_mask is 1

GRPO(s) is verl's own `compute_grpo_outcome_advantage` on a tensor holding s_i at last_i and 0
elsewhere (its row sum is s_i exactly), with verl's epsilon and `norm_adv_by_std_in_grpo`, so with
weight 0 the result is bit for bit what `grpo` gives for the same sequence scores. `scale` is the
penalty of the heaviest severity (the same number the reward function used), so p/scale is in
[-1, 0]: a token in a critical error is pushed down by `weight` advantage units (one group
standard deviation of the sequence score when norm_adv_by_std_in_grpo), a minor one by a tenth.
The token term is not group-normalised on purpose: a group in which every answer has the same
score (GRPO advantage 0) still learns which tokens were wrong, and nothing divides by a std of 0.

`weight` and `scale` come from reward.custom_reward_function.reward_kwargs.token_credit (set by
the plan, src/rewards/credit/launch.py), read in the trainer process by `configure`.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

NAME = "grpo_token"
KWARGS_KEY = "token_credit"  # src/rewards/credit/ranges.py KWARGS_KEY
MANAGER_HINT = "src.rewards.credit.agent_loop.TokenCreditAgentLoopManager"


def split_rewards(token_level_rewards: torch.Tensor, response_mask: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(sequence-only rewards: s_i at last_i, 0 elsewhere; penalties: the rest, masked)."""
    mask = response_mask.to(token_level_rewards.dtype)
    length = response_mask.size(-1)
    positions = torch.arange(length, device=response_mask.device).expand_as(response_mask)
    # the last masked-in position of each row; rows with no response token get none
    last = torch.where(response_mask.bool(), positions, torch.full_like(positions, -1)).max(dim=-1).values
    at_last = (positions == last.unsqueeze(-1)) & (last.unsqueeze(-1) >= 0)
    sequence = torch.where(at_last, token_level_rewards, torch.zeros_like(token_level_rewards))
    penalties = torch.where(at_last, torch.zeros_like(token_level_rewards), token_level_rewards) * mask
    return sequence, penalties


# (weight, scale) of this process, set by configure() from verl's config
_SETTINGS: dict[str, float] = {}


def configure(verl_config: Any) -> None:
    """Reads the token weight and scale from verl's config in this process. verl hands estimators
    only the `algorithm` section, whose AlgoConfig dataclass refuses keys it does not know, so
    they live beside the reward function's token-credit settings in
    reward.custom_reward_function.reward_kwargs.token_credit (src/rewards/credit/launch.py)."""
    kwargs = verl_config.reward.custom_reward_function.get("reward_kwargs") or {}
    section = kwargs.get(KWARGS_KEY)
    if section is None:
        raise ValueError(f"adv_estimator={NAME} needs reward.custom_reward_function.reward_kwargs.{KWARGS_KEY} "
                         f"(the launcher writes it with reward.credit=token)")
    weight, scale = float(section["weight"]), float(section["scale"])
    if not (weight >= 0 and scale > 0):
        raise ValueError(f"{KWARGS_KEY}: weight must be >= 0 and scale > 0, got weight={weight}, scale={scale}")
    _SETTINGS.update(weight=weight, scale=scale)


def _settings() -> tuple[float, float]:
    if not _SETTINGS:
        raise RuntimeError(f"adv_estimator={NAME} was called before src.rewards.credit.estimator.configure(config) "
                           f"in this process (the agent loop manager {MANAGER_HINT} does it)")
    return _SETTINGS["weight"], _SETTINGS["scale"]


def compute_grpo_token_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                 index: np.ndarray, config: Any = None, **kwargs: Any
                                 ) -> tuple[torch.Tensor, torch.Tensor]:
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    weight, scale = _settings()
    norm_by_std = bool(config.get("norm_adv_by_std_in_grpo", True)) if config is not None else True
    sequence, penalties = split_rewards(token_level_rewards, response_mask)
    advantages, _ = compute_grpo_outcome_advantage(token_level_rewards=sequence, response_mask=response_mask,
                                                   index=index, norm_adv_by_std_in_grpo=norm_by_std, config=config)
    if weight != 0.0:
        advantages = advantages + (weight / scale) * penalties  # penalties are masked already
    return advantages, advantages


def register(verl_config: Any = None) -> None:
    """Registers `grpo_token` with verl in this process (idempotent), configured from
    `verl_config` when given. verl looks estimators up in the process that computes advantages,
    the trainer's (TaskRunner actor): the agent loop manager (agent_loop.py) calls this when verl
    creates it there."""
    if verl_config is not None:
        configure(verl_config)
    from verl.trainer.ppo import core_algos

    if core_algos.ADV_ESTIMATOR_REGISTRY.get(NAME) is not compute_grpo_token_advantage:
        core_algos.register_adv_est(NAME)(compute_grpo_token_advantage)


def register_for(verl_config: Any) -> None:
    """The training entry's call (src/trainer/entry.py, in the TaskRunner's process): registers and
    configures `grpo_token` when the run uses it, nothing otherwise."""
    if verl_config.algorithm.adv_estimator == NAME:
        register(verl_config)

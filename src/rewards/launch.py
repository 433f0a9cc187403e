"""The reward's side of a launch: the reward kwargs verl passes to compute_score, built once.

`reward.custom_reward_function.reward_kwargs` is the reward group's settings
(src/rewards/settings.py reward_kwargs) plus what reward.credit (src/rewards/credit/launch.py) and
reward.normalise (src/rewards/normalise.py) add; with their defaults those add nothing. The
launcher builds it once per run, in the plan (src/plan/run_plan.py: the first place a launch
derives anything from the reward, so every refusal comes before anything is written), and
src/verl_config copies it into verl's config; `python -m src.rewards.inspect` scores with the
same. Stdlib only, as the rest of the launch side of src/rewards.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from src.rewards import normalise
from src.rewards import settings as rewards_settings
from src.rewards.credit import launch as credit_launch

# each a ValueError whose message is one line naming the key
REFUSALS = (rewards_settings.RewardConfigError, credit_launch.CreditConfigError, normalise.NormaliseConfigError)


@dataclass(frozen=True)
class RewardLaunch:
    # reward.custom_reward_function.reward_kwargs, exactly as verl's config will hold it
    kwargs: dict
    # reward.credit=token's plan (estimator, agent loop, token weights); None for sequence
    token_credit: Optional[credit_launch.TokenCreditPlan]


def reward_launch(cfg: Mapping[str, Any]) -> RewardLaunch:
    """From the composed config; raises one of REFUSALS for a reward that cannot work."""
    group = rewards_settings.reward_kwargs(cfg["reward"], cfg["scorer"]["models"], cfg["paths"]["root_dir"])
    token_credit = credit_launch.plan(cfg, group)
    kwargs = {**group, **credit_launch.reward_kwargs(token_credit), **normalise.reward_kwargs(cfg)}
    return RewardLaunch(kwargs=kwargs, token_credit=token_credit)

"""When the trainer stops a run instead of training on less: lost groups and DAPO's resampling bound.

Derived once here (src/plan/run_plan.py calls `stop_rules`), shown in the plan table, and handed
to the trainer process through verl's `trainer.v1.sampler.sampler_kwargs` (src/verl_config/ppo_trainer.py),
where src/trainer/guard.py enforces them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .values import at_least


@dataclass(frozen=True)
class StopRules:
    # training groups a run may lose to failed rollouts or reward calls (a scorer error) before
    # it stops; 0: the first lost group stops the run
    lost_groups_allowed: int
    # DAPO: generation batches (of data.train_batch_size prompts) one step may draw before the run
    # stops; 0 when the algo does not filter groups (nothing is resampled)
    max_gen_batches: int
    # the reward key DAPO's group filter compares (None: no filtering)
    filter_metric: Optional[str]


def stop_rules(cfg: dict) -> StopRules:
    """From the composed config: scorer.lost_groups_allowed and algo.filter_groups."""
    lost = at_least(cfg["scorer"]["lost_groups_allowed"], 0, "scorer.lost_groups_allowed", "scorer.lost_groups_allowed=0")
    fg = cfg["algo"]["filter_groups"]
    if not fg["enable"]:
        return StopRules(lost_groups_allowed=lost, max_gen_batches=0, filter_metric=None)
    # verl 0.9.1's V1 replay buffer ignores max_num_gen_batches (a warning in
    # verl/trainer/ppo/v1/trainer_base.py _resolve_filter_groups_metric) and "0 = no limit" would
    # let DAPO resample forever while the step counter stands still: here it is a bound, >= 1
    bound = at_least(fg["max_num_gen_batches"], 1, "algo.filter_groups.max_num_gen_batches",
                     "algo.filter_groups.max_num_gen_batches=10")
    return StopRules(lost_groups_allowed=lost, max_gen_batches=bound, filter_metric=str(fg["metric"]))

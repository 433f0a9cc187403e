"""The reward's side of a launch: the reward kwargs verl passes to compute_score, built once.

`reward.custom_reward_function.reward_kwargs` is the reward group's settings
(src/rewards/group_kwargs.py reward_kwargs) plus what reward.credit (src/rewards/credit/launch.py) and
reward.normalise (src/rewards/normalise.py) add; with their defaults those add nothing. The
launcher builds it once per run, in the plan (src/plan/run_plan.py: the first place a launch
derives anything from the reward, so every refusal comes before anything is written), and
src/verl_config copies it into verl's config; `python -m src.evaluate.inspect_reward` scores with the
same. Stdlib only, as the rest of the launch side of src/rewards.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from src.data.templates import TEMPLATES, gives_terms
from src.rewards import degenerate, group_kwargs, guards, names, normalise, plugins
from src.rewards.components import TermSuccess
from src.rewards import settings as rewards_settings
from src.rewards.credit import launch as credit_launch
from src.rewards.credit import ranges as credit_ranges
from src.scorer.vocabulary import severity_counts

# each a ValueError whose message is one line naming the key
REFUSALS = (rewards_settings.RewardConfigError, credit_launch.CreditConfigError, normalise.NormaliseConfigError)


@dataclass(frozen=True)
class RewardLaunch:
    # reward.custom_reward_function.reward_kwargs, exactly as verl's config will hold it
    kwargs: dict
    # reward.credit=token's plan (estimator, agent loop, token weights); None for sequence
    token_credit: Optional[credit_launch.TokenCreditPlan]


def taken_names() -> dict[str, str]:
    """Every name of a reward result that is not a component -> what it is: a component named so would
    log beside it, or over it (a plug-in `length_ratio` beside the degenerate check of that name)."""
    taken = {key: "a key of every reward result" for key in names.RESULT_KEYS}
    for flag in degenerate.FLAGS:
        taken[flag] = taken[flag.removeprefix("degenerate_")] = f"the degenerate check {flag}"
    for name, flag in zip(guards.NAMES, guards.FLAGS):
        taken[name] = taken[flag] = f"the guard {name} (reward.guards.{name}, logged as {flag})"
    for key in severity_counts([]):
        taken[key] = "the span model's error count of that severity"
    taken[credit_ranges.RESULT_KEY] = "reward.credit=token's token ranges"
    taken[normalise.RESULT_KEY] = "reward.normalise=per_component's reward parts"
    return taken


def _check_component_names(kwargs: Mapping[str, Any]) -> None:
    taken = taken_names()
    for name in plugins.component_names(kwargs.get("plugins") or []):
        if name in taken:
            raise rewards_settings.RewardConfigError(
                f"reward.plugins: component name {name!r} is taken by {taken[name]}: components, guards and metrics "
                f"share one namespace (a reward result's keys); give the component another name")


def reward_launch(cfg: Mapping[str, Any]) -> RewardLaunch:
    """From the composed config; raises one of REFUSALS for a reward that cannot work."""
    # data whose prompts give the terms: the term component is computed (logged) even where it is not weighted
    # (an unknown template is the data check's to refuse, in its own words: src/data/checks.py)
    template = str((cfg.get("data") or {}).get("template") or "")
    logged = (TermSuccess.name,) if template in TEMPLATES and gives_terms(template) else ()
    group = group_kwargs.reward_kwargs(cfg["reward"], cfg["scorer"]["models"], cfg["paths"]["root_dir"], logged)
    _check_component_names(group)
    token_credit = credit_launch.plan(cfg, group)
    kwargs = {**group, **credit_launch.reward_kwargs(token_credit), **normalise.reward_kwargs(cfg)}
    return RewardLaunch(kwargs=kwargs, token_credit=token_credit)

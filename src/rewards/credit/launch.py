"""reward.credit -> the plan's TokenCreditPlan -> verl config keys (launch side).

src/rewards/launch.py calls `plan(cfg, kw)` and `reward_kwargs` (for the plan, src/plan/run_plan.py);
src/verl_config/ppo_trainer.py turns the plan into verl keys with `adv_estimator` and `verl_overrides`. With reward.credit=sequence (the default)
all three add nothing, so the verl config (and the run id hashed from it) is byte-identical to a
run without this module.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from src.rewards import settings as rewards_settings
from src.rewards.components import get_component
from src.rewards.credit.ranges import (CREDITS, KWARGS_KEY, SEQUENCE, CreditConfigError, CreditSettings,
                                       TokenCreditGroup)
from src.rewards.typed_settings import choice, read_section
from src.rewards.values import RewardConfigError

ESTIMATOR = "grpo_token"  # src/rewards/credit/estimator.py NAME (not imported: it imports torch)
AGENT_LOOP = "token_credit_agent"  # src/rewards/credit/agent_loop.py AGENT_NAME
MANAGER_CLASS = "src.rewards.credit.agent_loop.TokenCreditAgentLoopManager"


# verl policy losses that average the advantage over each answer before they use it, so a token's penalty
# would move the whole answer (verl/trainer/ppo/core_algos.py)
SEQUENCE_LOSSES = {"geo_mean": "averages the advantage over each answer (compute_policy_loss_geo_mean)"}


@dataclass(frozen=True)
class TokenCreditPlan:
    # the estimator's token weight w: A = GRPO + w * penalty / scale
    weight: float
    # penalty of the heaviest severity, in reward units; null in the config: the training answer's range
    scale: float
    # spans (XCOMET severities) or words (BAD words, word_tag_source=probs)
    source: str
    severity_weights: dict
    estimator: str = ESTIMATOR
    agent_loop: str = AGENT_LOOP
    agent_loop_manager_class: str = MANAGER_CLASS


def answer_range(reward_kwargs: dict) -> float:
    """hi - lo of the training answer: sum of |weight| x clip width over its components."""
    s = rewards_settings.RewardSettings.from_kwargs(reward_kwargs)
    return sum(abs(w) * (s.clip[c][1] - s.clip[c][0]) for c, w in s.train_weights.items())


def plan(cfg: dict, kw: dict) -> Optional[TokenCreditPlan]:
    """None for reward.credit=sequence; raises CreditConfigError (one line) for what cannot work.
    `kw`: the group's reward kwargs (src/rewards/group_kwargs.py reward_kwargs; src/rewards/launch.py
    builds them once per launch)."""
    reward, algo = cfg["reward"], cfg["algo"]
    try:  # the choice, as the reward group's typed definition reads it (src/rewards/group.py)
        credit = choice("reward.credit", reward.get("credit", SEQUENCE), CREDITS)
    except RewardConfigError as exc:
        raise CreditConfigError(str(exc)) from None
    if credit == SEQUENCE:
        return None
    spans_in_training = kw["models"].get("span") is not None and any(
        w != 0.0 and get_component(c).model == "span" for c, w in kw["train_weights"].items())
    if not spans_in_training:
        raise CreditConfigError(
            f"reward.credit=token needs the span model's error spans in the training reward, and reward "
            f"{reward['name']} (mode={reward['mode']}) does not call it in training: use reward=xcomet_xl or "
            f"reward=word_qe, or reward.mode=train with reward.weights.mqm=1")
    if algo["adv_estimator"] != "grpo":
        # verl's other estimators sum each answer's token rewards into one score first (core_algos.py
        # compute_<estimator>_outcome_advantage: token_level_rewards.sum(dim=-1)), or discount them as returns
        # (reinforce_plus_plus), so the penalties would stop being per token
        raise CreditConfigError(f"reward.credit=token needs per-token advantages, which it builds on verl's grpo "
                                f"({ESTIMATOR}); algo {algo['name']} uses adv_estimator={algo['adv_estimator']}, "
                                f"which sums (or discounts) each answer's rewards before the advantage: use a preset "
                                f"with adv_estimator grpo (algo=grpo, dapo, drgrpo, gspo, clip_cov, kl_cov, cispo, "
                                f"sapo, ...; docs/algorithms.md)")
    if algo.get("loss_mode") in SEQUENCE_LOSSES:
        raise CreditConfigError(f"reward.credit=token needs a policy loss that keeps per-token advantages; "
                                f"algo {algo['name']} uses loss_mode={algo['loss_mode']}, which "
                                f"{SEQUENCE_LOSSES[algo['loss_mode']]}: use another algo= preset (docs/algorithms.md)")
    if (((cfg.get("verl") or {}).get("algorithm") or {}).get("use_kl_in_reward")):
        # verl subtracts the KL per token from rm_scores (verl/trainer/ppo/v1/trainer_base.py _compute_advantage,
        # apply_kl_penalty): grpo_token would read it as error penalties
        raise CreditConfigError("reward.credit=token reads token penalties from the reward, and "
                                "verl.algorithm.use_kl_in_reward=true subtracts a KL term from every token of it: "
                                "drop it (the KL loss, algo.use_kl_loss, works with token credit)")
    use_v1 = ((cfg.get("verl") or {}).get("trainer") or {}).get("use_v1", True)
    if use_v1 is False:
        raise CreditConfigError("reward.credit=token needs verl's V1 trainer (its agent loop builds rm_scores): "
                                "drop verl.trainer.use_v1=false")
    try:
        tc = read_section(TokenCreditGroup, reward.get("token_credit") or {}, "reward.token_credit")
    except RewardConfigError as exc:
        raise CreditConfigError(str(exc)) from None
    scale = tc.scale
    if scale is None:
        scale = answer_range(kw)
        if scale <= 0:
            raise CreditConfigError(f"reward {reward['name']}: the training answer has no range to scale token "
                                    f"penalties by; set reward.token_credit.scale=1.0")
    source = "words" if (kw["train_weights"]["ok_ratio"] != 0.0 and kw["span"]["word_tag_source"] == "probs") \
        else "spans"
    checked = CreditSettings.from_kwargs({"severity_weights": dict(tc.severity_weights), "scale": scale,
                                          "source": source})
    return TokenCreditPlan(weight=tc.weight, scale=checked.scale, source=source,
                           severity_weights=dict(checked.severity_weights))


def adv_estimator(token_credit: Optional[TokenCreditPlan], algo_estimator: str) -> str:
    return token_credit.estimator if token_credit is not None else algo_estimator


def reward_kwargs(token_credit: Optional[TokenCreditPlan]) -> dict:
    """What compute_score needs (src/rewards/credit/ranges.py from_reward_kwargs)."""
    if token_credit is None:
        return {}
    # `weight` is the estimator's: verl's AlgoConfig takes no extra keys (its dataclass refuses
    # them), so the trainer process reads it here (estimator.configure)
    return {KWARGS_KEY: {"severity_weights": dict(token_credit.severity_weights), "scale": token_credit.scale,
                         "source": token_credit.source, "weight": token_credit.weight}}


def verl_overrides(token_credit: Optional[TokenCreditPlan]) -> list[tuple[str, Any]]:
    """verl keys beyond the estimator name and the reward kwargs."""
    if token_credit is None:
        return []
    return [
        # loaded by verl's TaskRunnerV1.init_agent_loop_manager in the trainer process
        # a field of verl's AgentLoopConfig (verl/workers/config/rollout.py) its yaml lacks: `+`
        ("+actor_rollout_ref.rollout.agent.agent_loop_manager_class", token_credit.agent_loop_manager_class),
        # the agent loop for rows without `agent_name` (src/data writes none)
        ("actor_rollout_ref.rollout.agent.default_agent_loop", token_credit.agent_loop),
    ]


def check(verl_cfg) -> None:
    """What verl resolves only on the GPU node, resolved now: the manager class loads the way
    verl loads it (verl.utils.import_utils.load_class_from_fqn) and the estimator is found by
    name through verl's registry (core_algos.get_adv_estimator_fn)."""
    agent = verl_cfg.actor_rollout_ref.rollout.agent
    if agent.get("agent_loop_manager_class") != MANAGER_CLASS:
        return
    import warnings

    from verl.trainer.ppo import core_algos
    from verl.utils.import_utils import load_class_from_fqn

    with warnings.catch_warnings():
        # importing verl's agent loop probes every training engine; on the launch host the GPU
        # engines are missing by design, and the dry run would show five lines saying so
        warnings.filterwarnings("ignore", message=r".* engine is not available")
        load_class_from_fqn(MANAGER_CLASS, "AgentLoopManager")
    from src.rewards.credit import estimator

    estimator.register(verl_cfg)
    core_algos.get_adv_estimator_fn(verl_cfg.algorithm.adv_estimator)
    if verl_cfg.algorithm.adv_estimator != ESTIMATOR:
        # verl's own estimators would read the token penalties as part of the sequence score
        raise CreditConfigError(f"reward.credit=token needs algorithm.adv_estimator={ESTIMATOR}, got "
                                f"{verl_cfg.algorithm.adv_estimator!r} (remove the verl.* override)")
    if agent.default_agent_loop != AGENT_LOOP:
        raise CreditConfigError(f"reward.credit=token needs actor_rollout_ref.rollout.agent.default_agent_loop="
                                f"{AGENT_LOOP}, got {agent.default_agent_loop!r} (remove the verl.* override)")

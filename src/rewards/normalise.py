"""reward.normalise: how the parts of the reward become GRPO's advantage.

sum (the default): verl's GRPO on the summed score, A_i = (s_i - mean_g s) / (std_g s + eps).
per_component: each part of the score is normalised within its group first, then weighted and
summed (GDPO, https://arxiv.org/abs/2601.05242):

    A_i = sum_k w_k (p_ik - mean_g p_k) / (std_g p_k + eps)  +  (r_i - mean_g r) / (std_g r + eps)

    p_ik  answer component k of response i as the answer counts it (normalised, discretised,
          clipped: src/rewards/combine.py); its lower clip bound when the answer was not scored
          (format broken, degenerate, a guard fired), the value answer_score gives a missing one
    w_k   reward.weights (training), components with weight 0 are no part
    r_i   the rest of the score, s_i - sum_k w_k p_ik: the format bonus or floor, the degenerate
          and guard penalties, and the overlong penalty verl's dapo manager adds to what it trains on
    mean, std, eps: verl's own compute_grpo_outcome_advantage, run once per part, with the run's
          norm_adv_by_std_in_grpo (verl/trainer/ppo/core_algos.py)

A part that is equal across a group adds nothing; a part with a narrow spread (BLEU/100 beside a
QE score) moves the advantage as much as one with a wide spread. The logged score (rm_scores,
critic/score, the DAPO filter's score_rounded) stays the summed one: only the advantage changes.

Why not verl's own `gdpo` estimator (core_algos.py, compute_gdpo_outcome_advantage, with
algorithm.gdpo_reward_keys): it reads the parts from the batch's non_tensor_batch, and verl
0.9.1's V1 trainer fills none. Its `_compute_advantage` (verl/trainer/ppo/v1/trainer_base.py)
fetches only uid, response_mask, rm_scores, log-probs and values from TransferQueue, so gdpo finds
no reward key (nor the `prompts` and `attention_mask` it also reads); and it whitens the summed
advantage over the whole batch, which GRPO does not.

The seam, through three processes:
1. reward workers: compute_score (src/rewards/compute.py) adds RESULT_KEY (the parts p_ik and the
   rest, JSON) to its result; verl's reward manager returns it in reward_extra_info, which the agent
   loop keeps in the trajectory's `extra_fields` in TransferQueue
   (verl/trainer/ppo/v1/agent_loop_tq.py, _agent_loop_postprocess).
2. trainer: src/trainer/parts.py, around verl's _compute_advantage, reads `extra_fields` for the
   batch's keys (the same keys, so the same rows in the same order) and holds them with `batch_parts`.
3. `grpo_per_component`, registered with verl's register_adv_est and called by verl's
   compute_advantage (verl/trainer/ppo/ray_trainer.py, the branch for estimators other than gae
   and grpo) with the batch's uids as `index`; it checks that they are the held rows' uids.

Launch side (`mode`, `adv_estimator`, `reward_kwargs`, `check_verl`): with reward.normalise=sum
they add nothing, so the verl config (and the run id hashed from it) is what it was.
Stdlib at import (the reward workers and the launcher import it); torch and verl at use.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from typing import Any, Iterator, Mapping, Sequence

from src.rewards.typed_settings import choice
from src.rewards.values import RewardConfigError

SUM, PER_COMPONENT = "sum", "per_component"
MODES = (SUM, PER_COMPONENT)
ESTIMATOR = "grpo_per_component"
KWARGS_KEY = "normalise"      # reward.custom_reward_function.reward_kwargs.normalise (per_component only)
RESULT_KEY = "reward_parts"   # compute_score's result, reward_extra_info: JSON {component: value, "rest": value}
REST = "rest"
# verl/experimental/reward_loop/reward_manager/dapo.py, DAPORewardManager.run_single: added to the
# score verl trains on, logged under this key when overlong_buffer_cfg.log (ours: whenever enabled)
OVERLONG_KEY = "overlong_reward"
# the summed parts and rm_scores (float32) may differ by this much before the rows are refused
TOLERANCE = 1e-3


class NormaliseConfigError(ValueError):
    """reward.normalise cannot work with the rest of the config; one line naming the keys."""


# ----------------------------------------------------------------------------------------------
# launch side
# ----------------------------------------------------------------------------------------------
def mode(cfg: Mapping[str, Any]) -> str:
    """The composed config's reward.normalise, checked against the rest (plan phase); one line
    (NormaliseConfigError) for a combination that cannot work."""
    reward, algo = cfg["reward"], cfg["algo"]
    try:  # the choice, as the reward group's typed definition reads it (src/rewards/group.py)
        value = choice("reward.normalise", reward.get("normalise", SUM), MODES)
    except RewardConfigError as exc:
        raise NormaliseConfigError(str(exc)) from None
    if value == SUM:
        return SUM
    credit = reward.get("credit", "sequence")
    if credit != "sequence":
        # both replace verl's grpo advantage with one of ours, and grpo_token reads the token
        # penalties out of rm_scores, where the parts' sum would no longer be the score
        raise NormaliseConfigError(f"reward.normalise=per_component cannot be combined with reward.credit={credit} "
                                   f"(each replaces the grpo advantage: {ESTIMATOR} or grpo_token); keep one")
    if algo["adv_estimator"] != "grpo":
        raise NormaliseConfigError(f"reward.normalise=per_component replaces the grpo advantage with {ESTIMATOR}; "
                                   f"algo {algo['name']} uses adv_estimator={algo['adv_estimator']} "
                                   f"(use a preset with adv_estimator grpo: algo=grpo, dapo, gspo, clip_cov, ...; "
                                   f"docs/algorithms.md)")
    if not algo.get("norm_adv_by_std_in_grpo", True):
        # without the division by each part's std the weighted sum of centred parts is the centred
        # score: exactly the grpo advantage of normalise=sum
        raise NormaliseConfigError(f"reward.normalise=per_component without algo.norm_adv_by_std_in_grpo is the "
                                   f"summed reward's advantage exactly (algo {algo['name']} sets it false): use "
                                   f"reward.normalise=sum, or algo.norm_adv_by_std_in_grpo=true")
    verl = cfg.get("verl") or {}
    if ((verl.get("trainer") or {}).get("use_v1", True)) is False:
        raise NormaliseConfigError("reward.normalise=per_component needs verl's V1 trainer (src/trainer reads the "
                                   "parts from its TransferQueue): drop verl.trainer.use_v1=false")
    if (verl.get("algorithm") or {}).get("use_kl_in_reward"):
        raise NormaliseConfigError("reward.normalise=per_component normalises the reward's parts, and "
                                   "verl.algorithm.use_kl_in_reward=true puts a KL term into the reward that is "
                                   "none of them: drop it (the KL loss, algo.use_kl_loss, works with it)")
    return PER_COMPONENT


def adv_estimator(cfg: Mapping[str, Any], otherwise: str) -> str:
    return ESTIMATOR if mode(cfg) == PER_COMPONENT else otherwise


def reward_kwargs(cfg: Mapping[str, Any]) -> dict:
    """What compute_score and the trainer read (`enabled`); nothing for sum."""
    return {KWARGS_KEY: PER_COMPONENT} if mode(cfg) == PER_COMPONENT else {}


def check_verl(verl_cfg: Any) -> None:
    """After verl's validation, in the launcher: a per_component reward has our estimator (found in
    verl's registry as the trainer will find it) and a reward verl adds nothing to but the parts."""
    kwargs = verl_cfg.reward.custom_reward_function.get("reward_kwargs") or {}
    if not enabled(kwargs):
        return
    register()
    estimator = verl_cfg.algorithm.adv_estimator
    if estimator != ESTIMATOR:
        raise NormaliseConfigError(f"reward.normalise=per_component needs algorithm.adv_estimator={ESTIMATOR}, got "
                                   f"{estimator!r} (remove the verl.* override)")
    if verl_cfg.algorithm.get("use_kl_in_reward"):
        raise NormaliseConfigError("reward.normalise=per_component needs algorithm.use_kl_in_reward=false "
                                   "(remove the verl.* override)")
    if not verl_cfg.trainer.get("use_v1", True):
        raise NormaliseConfigError("reward.normalise=per_component needs trainer.use_v1=true (remove the verl.* "
                                   "override)")


# ----------------------------------------------------------------------------------------------
# reward side (src/rewards/compute.py)
# ----------------------------------------------------------------------------------------------
def enabled(reward_kwargs: Mapping[str, Any]) -> bool:
    return reward_kwargs.get(KWARGS_KEY) == PER_COMPONENT


def parts(values: Mapping[str, float | None], s: Any, validation: bool, format_part: float, answer: float,
          scored: bool) -> dict[str, float]:
    """The parts of `format_part + answer`: each weighted component as answer_score counts it (the
    same function, given that one component at weight 1), and the rest. `scored`: the answer is
    answer_score's weighted sum (not a floor or a penalty)."""
    from src.rewards.combine import answer_score

    weights = {c: w for c, w in s.weights(validation).items() if w != 0.0}
    field = "validation_weights" if validation else "train_weights"
    out: dict[str, float] = {}
    for comp in weights:
        out[comp] = (answer_score(values, dataclasses.replace(s, **{field: {comp: 1.0}}), validation)
                     if scored else s.clip[comp][0])
    # summed in answer_score's order, so a scored answer leaves exactly nothing beside the format part
    weighted = 0.0
    for comp, w in weights.items():
        weighted += w * out[comp]
    out[REST] = format_part + (answer - weighted if not scored else 0.0)
    return out


def encode(row_parts: Mapping[str, float]) -> str:
    return json.dumps(dict(row_parts), sort_keys=True)


# ----------------------------------------------------------------------------------------------
# trainer side (src/trainer/parts.py, then verl's compute_advantage)
# ----------------------------------------------------------------------------------------------
def weights_of(reward_kwargs: Mapping[str, Any]) -> dict[str, float]:
    """The parts and their weights: the training reward's weighted components, then the rest at 1."""
    weights = {str(c): float(w) for c, w in dict(reward_kwargs["train_weights"]).items() if float(w) != 0.0}
    return {**weights, REST: 1.0}


def parts_matrix(reward_extra_infos: Sequence[Mapping[str, Any]], weights: Mapping[str, float],
                 scores: Sequence[float], padding: Sequence[bool] | None = None) -> list[list[float]]:
    """One row of parts per trajectory (in `weights`' order) from its reward_extra_info; the rest
    takes the overlong penalty verl's dapo manager added. `scores`: what verl trains on (rm_scores'
    row sums): rows whose weighted parts do not add up to it are refused, not trained on.
    `padding`: verl's padding rows (no response token, a group of their own): all parts 0."""
    rows = []
    padding = padding if padding is not None else [False] * len(scores)
    for i, (info, score, pad) in enumerate(zip(reward_extra_infos, scores, padding, strict=True)):
        if pad:
            rows.append([0.0] * len(weights))
            continue
        raw = (info or {}).get(RESULT_KEY)
        if not isinstance(raw, str):
            raise RuntimeError(f"{ESTIMATOR}: trajectory {i} has no {RESULT_KEY!r} in its reward_extra_info (the "
                               f"reward function must run with reward_kwargs.{KWARGS_KEY}={PER_COMPONENT})")
        given = json.loads(raw)
        if set(given) != set(weights):
            raise RuntimeError(f"{ESTIMATOR}: trajectory {i} has parts {sorted(given)}, the training reward weights "
                               f"{sorted(weights)}")
        row = [float(given[name]) for name in weights]
        overlong = (info or {}).get(OVERLONG_KEY)
        if overlong is not None:
            row[-1] += float(overlong)
        total = sum(w * v for w, v in zip(weights.values(), row))
        if not math.isfinite(total) or abs(total - float(score)) > TOLERANCE:
            raise RuntimeError(f"{ESTIMATOR}: trajectory {i}'s parts add up to {total}, its score is {score}: the "
                               f"reward manager added something that is no part (only dapo's "
                               f"{OVERLONG_KEY} is known)")
        rows.append(row)
    return rows


# the batch's parts in this process, held by the trainer around verl's _compute_advantage
_BATCH: dict[str, Any] = {}


@contextlib.contextmanager
def batch_parts(uids: Sequence[Any], rows: Sequence[Sequence[float]], weights: Mapping[str, float]
                ) -> Iterator[None]:
    _BATCH.update(uids=[str(u) for u in uids], rows=[list(r) for r in rows], weights=dict(weights))
    try:
        yield
    finally:
        _BATCH.clear()


def compute_per_component_advantage(token_level_rewards, response_mask, index, config: Any = None,
                                    **kwargs: Any):
    """verl's estimator signature (core_algos.py, register_adv_est): the weighted sum of verl's
    GRPO advantage of each part (module docstring)."""
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    if not _BATCH:
        raise RuntimeError(f"adv_estimator={ESTIMATOR} was called without the batch's reward parts: verl's trainer "
                           f"must be src.trainer's (src/trainer/parts.py holds them around _compute_advantage)")
    if [str(u) for u in index] != _BATCH["uids"]:
        raise RuntimeError(f"adv_estimator={ESTIMATOR}: the batch verl computes advantages for is not the one whose "
                           f"parts were read ({len(index)} rows, {len(_BATCH['uids'])} read)")
    norm_by_std = bool(config.get("norm_adv_by_std_in_grpo", True)) if config is not None else True
    parts_t = torch.tensor(_BATCH["rows"], dtype=torch.float32, device=token_level_rewards.device)
    advantages = torch.zeros_like(response_mask, dtype=torch.float32)
    for k, weight in enumerate(_BATCH["weights"].values()):
        # the part in column 0: verl's GRPO sums each row, so it reads the part itself
        one = torch.zeros_like(response_mask, dtype=torch.float32)
        one[:, 0] = parts_t[:, k]
        normalised, _ = compute_grpo_outcome_advantage(token_level_rewards=one, response_mask=response_mask,
                                                       index=index, norm_adv_by_std_in_grpo=norm_by_std,
                                                       config=config)
        advantages = advantages + weight * normalised
    return advantages, advantages


def register() -> None:
    """Registers `grpo_per_component` with verl in this process (idempotent)."""
    from verl.trainer.ppo import core_algos

    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR) is not compute_per_component_advantage:
        core_algos.register_adv_est(ESTIMATOR)(compute_per_component_advantage)


def register_for(verl_config: Any) -> None:
    """The training entry's call (src/trainer/entry.py, in the TaskRunner's process)."""
    if verl_config.algorithm.adv_estimator == ESTIMATOR:
        register()

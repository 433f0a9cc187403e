"""PlanError, Adjustment, and the range checks every part of the plan shares.

Types are the schema's (src/config/schema.py: Hydra refuses `gpus=four` at composition); what a
type cannot say, a count >= 1 or a size > 0, is checked here, with the key and an example:
`at_least`/`positive` where the plan derives from a value, and `RANGES`/`VERL_RANGES` (checked by
`check_ranges` at the start of every plan) for every other number a user sets: our keys' intervals
are declared on their schema fields (src/config/schema.py `setting`) and read from there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from src.config import schema
from src.config.dotted import flatten  # noqa: F401  (src.plan.flatten, batch.py, run_plan.py)


class PlanError(ValueError):
    """Bad input: the message is one line saying what is wrong and how to fix it."""


@dataclass(frozen=True)
class Adjustment:
    """An intent the plan changed to satisfy a rule: the key, the value asked for, the value used, why."""
    key: str
    intent: Any
    value: Any
    reason: str


def at_least(value, minimum: int, key: str, example: str):
    """`value` when it is >= `minimum` (a count: minimum 1 reads "a positive integer")."""
    if value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise PlanError(f"{key} must be {what}, got {value!r} (e.g. {example})")
    return value


def positive(value, key: str, example: str):
    """`value` when it is > 0 (a size or a duration)."""
    if value <= 0:
        raise PlanError(f"{key} must be a positive number, got {value!r} (e.g. {example})")
    return value


@dataclass(frozen=True)
class Range:
    """An interval a number must lie in, written as a user reads it: "(0, inf)", "[0, 1]".
    `integer`: a whole number; `null_ok`: null (None) means "unset" for this key."""
    interval: str
    example: str
    integer: bool = False
    null_ok: bool = False

    def refusal(self, value: Any) -> Optional[str]:
        """Why `value` is outside, or None."""
        if value is None:
            return None if self.null_ok else "must be set"
        kind = "an integer" if self.integer else "a number"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (self.integer and not isinstance(value, int)):
            return f"must be {kind}"
        lo_open, lo, hi, hi_open = self.interval[0] == "(", *self._bounds(), self.interval[-1] == ")"
        inside = (math.isfinite(value) and (value > lo if lo_open else value >= lo)
                  and (value < hi if hi_open else value <= hi))
        if inside:
            return None
        if hi == math.inf:
            return f"must be {kind} {'>' if lo_open else '>='} {lo:g}"
        if lo == -math.inf:
            return f"must be {kind} {'<' if hi_open else '<='} {hi:g}"
        return f"must be {kind} in {self.interval}"

    def _bounds(self) -> tuple[float, float]:
        lo, hi = (float(x) for x in self.interval[1:-1].split(","))
        return lo, hi


def _schema_ranges() -> tuple[dict[str, Range], dict[str, Range]]:
    """(our key -> its Range, its verl key -> the same Range) for every schema field with an interval
    (src/config/schema.py `setting`): the verl key holds the same value, so it lies in the same interval."""
    ours, theirs = {}, {}
    for s in schema.settings().values():
        if s.interval is None:
            continue
        ours[s.key] = Range(s.interval, f"{s.key}={s.example}{s.note}", integer=s.integer, null_ok=s.null_ok)
        if s.verl is not None:
            theirs[s.verl] = Range(s.interval, s.example, integer=s.integer, null_ok=s.null_ok)
    return ours, theirs


# every number of our config a user sets that no other plan step checks (those use at_least /
# positive where they derive from it), from the schema. Keys absent from a config (an older snapshot)
# are skipped.
RANGES, _VERL_KEYS_RANGES = _schema_ranges()

# Common verl numbers a user reaches through `+verl.<key>=` (keys under verl's ppo_trainer), each
# with the interval verl's code needs; verl's validate_config checks none of these ranges. The verl
# keys a schema field maps to take that field's interval (above); the rest are verl's own.
VERL_RANGES: dict[str, Range] = {
    **_VERL_KEYS_RANGES,
    "critic.optim.lr": Range("(0, inf)", "1e-5"),
    "actor_rollout_ref.actor.optim.weight_decay": Range("[0, inf)", "0.01"),
    # -1: take the warmup from lr_warmup_steps_ratio (verl/utils/torch_functional.py get_*_schedule_with_warmup)
    "actor_rollout_ref.actor.optim.lr_warmup_steps": Range("[-1, inf)", "10", integer=True),
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": Range("[0, 1]", "0.0"),
    "actor_rollout_ref.actor.optim.min_lr_ratio": Range("[0, 1]", "0.0"),
    "actor_rollout_ref.actor.grad_clip": Range("(0, inf)", "1.0"),
    "actor_rollout_ref.actor.clip_ratio": Range("[0, 1)", "0.2"),
    # dual-clip bound, asserted > 1 by verl/trainer/ppo/core_algos.py compute_policy_loss_vanilla
    "actor_rollout_ref.actor.clip_ratio_c": Range("(1, inf)", "3.0"),
    "algorithm.kl_ctrl.kl_coef": Range("[0, inf)", "0.001"),
    "algorithm.kl_ctrl.target_kl": Range("[0, inf)", "0.1"),
    "algorithm.kl_ctrl.horizon": Range("[1, inf)", "10000", integer=True),
    "algorithm.gamma": Range("[0, 1]", "1.0"),
    "algorithm.lam": Range("[0, 1]", "1.0"),
    "actor_rollout_ref.rollout.temperature": Range("[0, inf)", "1.0"),
    "actor_rollout_ref.rollout.top_p": Range("(0, 1]", "1.0"),
    # vLLM: -1 (or 0) = no top-k
    "actor_rollout_ref.rollout.top_k": Range("[-1, inf)", "-1", integer=True),
    "actor_rollout_ref.rollout.val_kwargs.temperature": Range("[0, inf)", "0"),
    "actor_rollout_ref.rollout.val_kwargs.top_p": Range("(0, 1]", "1.0"),
    "actor_rollout_ref.rollout.val_kwargs.n": Range("[1, inf)", "1", integer=True),
    "actor_rollout_ref.rollout.max_num_seqs": Range("[1, inf)", "1024", integer=True),
    "actor_rollout_ref.rollout.max_num_batched_tokens": Range("[1, inf)", "8192", integer=True),
    "data.max_prompt_length": Range("[1, inf)", "256", integer=True),
    "data.max_response_length": Range("[1, inf)", "1024", integer=True),
    # (other counts verl's own workers need >= 1 are checked on verl's config by
    # src/verl_config/checks.py POSITIVE_COUNTS, whichever key set them)
}

_MISSING = object()


def _at(tree: dict, dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def check_ranges(cfg: dict) -> None:
    """Every number in RANGES, and every `verl.` passthrough key in VERL_RANGES, inside its interval;
    PlanError naming the key, the value and an example otherwise."""
    for key, rng in RANGES.items():
        value = _at(cfg, key)
        if value is not _MISSING and (why := rng.refusal(value)) is not None:
            raise PlanError(f"{key} {why}, got {value!r} (e.g. {rng.example})")
    passthrough = flatten(cfg.get("verl") or {})
    for key, rng in VERL_RANGES.items():
        if key in passthrough and (why := rng.refusal(passthrough[key])) is not None:
            raise PlanError(f"verl.{key} {why}, got {passthrough[key]!r} (e.g. +verl.{key}={rng.example})")
    if _at(cfg, "algo.overlong_buffer.enable") is True and _at(cfg, "algo.overlong_buffer.len") == 0:
        raise PlanError("algo.overlong_buffer.len must be >= 1 when algo.overlong_buffer.enable=true, got 0 "
                        "(e.g. algo.overlong_buffer.len=512)")
    steps = _at(cfg, "profile.steps")
    if isinstance(steps, list) and any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in steps):
        raise PlanError(f"profile.steps must be training steps >= 1, got {steps!r} (e.g. profile.steps=[2,3])")

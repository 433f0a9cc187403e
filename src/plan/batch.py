"""Batch geometry: the verl batch sizes for the GPU count, from the batch intent and any pins.

Every verl 0.9.1 batch rule (src/plan/verl_rules.py, each with the verl line it mirrors) holds for
the derived values: unpinned values move to the nearest valid ones (each move is an Adjustment with
its reason); pinned values are kept or refused with the rule they break and the nearest valid pins.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from .values import Adjustment, PlanError, at_least, flatten
from .verl_rules import RULES, BatchValues, Rule, check

# where a batch value can be pinned explicitly: the batch intent key (config.yaml `batch.`; the plan's
# BatchPlan field of the same name) -> the verl key that pins it (under the `verl` passthrough; P by
# data.train_batch_size). A pinned value replaces the intent and is kept or refused, never adjusted.
PIN_KEYS = {
    "prompts_per_step": "data.train_batch_size",
    "samples_per_prompt": "actor_rollout_ref.rollout.n",
    "mini_batch_prompts": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "micro_batch_per_gpu": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "log_prob_micro_batch_per_gpu": "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "rollout_tp": "actor_rollout_ref.rollout.tensor_model_parallel_size",
}


@dataclass(frozen=True)
class BatchPlan:
    """The verl batch sizes of a run (each field named as its intent in config.yaml `batch.`; the
    formula symbols of src/plan/verl_rules.py in brackets)."""
    prompts_per_step: int                         # (P) data.train_batch_size
    samples_per_prompt: int                       # (n) rollout.n, the GRPO group size
    mini_batch_prompts: int                       # (m) actor.ppo_mini_batch_size
    micro_batch_per_gpu: Optional[int]            # (mu) actor.ppo_micro_batch_size_per_gpu; None: dynamic bsz
    log_prob_micro_batch_per_gpu: Optional[int]   # (lam) rollout/ref log_prob_micro_batch_size_per_gpu; idem
    rollout_tp: int                               # (tp) rollout.tensor_model_parallel_size
    dynamic_bsz: bool
    max_token_len_per_gpu: Optional[int]

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt


def _nearest_multiple(target: int, step: int) -> int:
    """Nearest positive multiple of `step` to `target` (ties go up)."""
    low = max(step, (target // step) * step)
    high = low if low >= target else low + step
    return low if target - low < high - target else high


def _largest_divisor_at_most(number: int, ceiling: int) -> int:
    return max(d for d in range(1, max(1, min(number, ceiling)) + 1) if number % d == 0)


def _rollout_tp(preferred: int, gpus_per_node: int, kv_heads: int) -> int:
    for tp in range(max(1, preferred), 0, -1):
        if gpus_per_node % tp == 0 and kv_heads % tp == 0:
            return tp
    return 1


def _refuse(values: BatchValues, broken: list[Rule], pins: dict, derive) -> PlanError:
    """One line: the pins, the first rule they break, and the nearest pin values that work
    (with everything unpinned re-derived for each candidate, as the plan would)."""
    rule = broken[0]
    pinned = ", ".join(f"{PIN_KEYS[a]}={v}" for a, v in pins.items())
    hints = []
    for attr, current in pins.items():
        ok = [v for v in range(1, max(4 * current, 256) + 1) if not check(derive({**pins, attr: v}))]
        near = [v for v in ok if v < current][-1:] + [v for v in ok if v > current][:1]
        if near:
            hints.append(f"{PIN_KEYS[attr]} in {{{', '.join(map(str, near))}}}")
    hint = "; nearest valid: " + " or ".join(hints) if hints else ""
    return PlanError(
        f"{pinned} breaks verl rule {rule.formula} for G={values.G} GPUs "
        f"(P={values.P}, n={values.n}, m={values.m}, mu={values.mu}, lam={values.lam}, "
        f"tp={values.tp}){hint}; or drop the pin and let the plan derive it"
    )


def plan_batch(cfg: dict, gpus_per_node: int, world_size: int,
               adjustments: list[Adjustment]) -> BatchPlan:
    intent = cfg["batch"]
    model = cfg["model"]
    data = cfg["data"]
    passthrough = flatten(cfg.get("verl") or {})
    pins = {}
    if data.get("train_batch_size") is not None:
        pins["prompts_per_step"] = data["train_batch_size"]
    for attr, key in PIN_KEYS.items():
        if key in passthrough:
            pins[attr] = passthrough[key]
    for attr, value in pins.items():
        # verl's keys are typed by verl, not by our schema: a pin is checked here before arithmetic
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlanError(f"{PIN_KEYS[attr]} must be a positive integer, got {value!r} (e.g. {PIN_KEYS[attr]}=8)")
        at_least(value, 1, PIN_KEYS[attr], f"{PIN_KEYS[attr]}=8")

    n = pins.get("samples_per_prompt", at_least(intent["samples_per_prompt"], 1, "batch.samples_per_prompt",
                               "batch.samples_per_prompt=8"))
    P0 = at_least(intent["prompts_per_step"], 1, "batch.prompts_per_step", "batch.prompts_per_step=48")
    m0 = at_least(intent["mini_batch_prompts"], 1, "batch.mini_batch_prompts", "batch.mini_batch_prompts=24")
    mu_max = at_least(intent["micro_batch_per_gpu"], 1, "batch.micro_batch_per_gpu", "batch.micro_batch_per_gpu=8")
    lam_max = at_least(intent["log_prob_micro_batch_per_gpu"], 1, "batch.log_prob_micro_batch_per_gpu",
                       "batch.log_prob_micro_batch_per_gpu=16")
    G = world_size
    kv_heads = model["num_kv_heads"]
    dynamic = bool(intent.get("dynamic_bsz", False))
    max_seq_len = data["max_prompt_length"] + data["max_response_length"]

    tp_pref = model["rollout_tp"]
    budget = intent.get("max_token_len_per_gpu")
    max_tokens = (budget if budget is not None else 2 * max_seq_len) if dynamic else None
    if dynamic:
        at_least(max_tokens, 1, "batch.max_token_len_per_gpu", f"batch.max_token_len_per_gpu={2 * max_seq_len}")

    def derive(pinned: dict) -> BatchValues:
        """Pinned values as given; everything else moved to the nearest value that fits."""
        tp = pinned.get("rollout_tp", _rollout_tp(tp_pref, gpus_per_node, kv_heads))
        # m*n % G == 0  <=>  m is a multiple of G / gcd(n, G)
        m = pinned.get("mini_batch_prompts", _nearest_multiple(m0, G // math.gcd(n, G)))
        P = pinned.get("prompts_per_step", _nearest_multiple(P0, m))
        mu = lam = None
        if not dynamic:
            per_gpu_mini = (m * n) // G if (m * n) % G == 0 else 1
            per_gpu_step = (P * n) // G if (P * n) % G == 0 else 1
            mu = pinned.get("micro_batch_per_gpu", _largest_divisor_at_most(per_gpu_mini, mu_max))
            lam = pinned.get("log_prob_micro_batch_per_gpu", _largest_divisor_at_most(per_gpu_step, lam_max))
        return BatchValues(G=G, gpus_per_node=gpus_per_node, P=P, n=n, m=m, mu=mu, lam=lam, tp=tp,
                           kv_heads=kv_heads, dynamic_bsz=dynamic, max_token_len_per_gpu=max_tokens,
                           max_seq_len=max_seq_len)

    values = derive(pins)
    broken = check(values)
    if broken:
        if not pins and broken[0] is RULES["token_budget"]:
            raise PlanError(
                f"batch.max_token_len_per_gpu={max_tokens} is below max prompt + response = {max_seq_len} "
                f"tokens; set batch.max_token_len_per_gpu>={max_seq_len}")
        if pins:
            raise _refuse(values, broken, pins, derive)
        raise PlanError(f"internal: derived batch breaks {broken[0].formula} ({values}); please report")

    def note(key: str, want: Any, got: Any, reason: str) -> None:
        # a pinned value is the user's explicit choice, not an adjustment of intent
        if want != got and key not in pins:
            adjustments.append(Adjustment(key, want, got, reason))

    note("rollout_tp", tp_pref, values.tp,
         f"must divide the {gpus_per_node} GPUs per node and the model's {kv_heads} KV heads")
    note("mini_batch_prompts", m0, values.m,
         f"m*n must divide by G={G} with n={n}: m must be a multiple of {G // math.gcd(n, G)}")
    note("prompts_per_step", P0, values.P, f"must be a multiple of the mini batch m={values.m} (P>=m, no padding)")
    if not dynamic:
        note("micro_batch_per_gpu", mu_max, values.mu,
             f"must divide the {values.m * n // G} samples each GPU gets per mini batch")
        note("log_prob_micro_batch_per_gpu", lam_max, values.lam,
             f"must divide the {values.P * n // G} samples each GPU gets per step")
    return BatchPlan(prompts_per_step=values.P, samples_per_prompt=values.n, mini_batch_prompts=values.m,
                     micro_batch_per_gpu=values.mu, log_prob_micro_batch_per_gpu=values.lam, rollout_tp=values.tp,
                     dynamic_bsz=dynamic, max_token_len_per_gpu=max_tokens)


def batch_for_rows(cfg: dict, gpus_per_node: int, world_size: int, rows: int) -> tuple[int, int] | None:
    """The largest batch intent (batch.prompts_per_step, batch.mini_batch_prompts) whose plan takes at most
    `rows` prompts per step, checked by planning it as a launch would (the mini batch rounds to the GPU
    count, the step to the mini batch); None when none does (a pin, or fewer rows than the smallest
    mini batch the GPU count allows)."""
    for m in range(min(rows, cfg["batch"]["mini_batch_prompts"]), 0, -1):
        P = (rows // m) * m
        intent = {**cfg["batch"], "prompts_per_step": P, "mini_batch_prompts": m}
        try:
            got = plan_batch({**cfg, "batch": intent}, gpus_per_node, world_size, [])
        except PlanError:
            continue
        if got.prompts_per_step <= rows:
            return got.prompts_per_step, got.mini_batch_prompts
    return None

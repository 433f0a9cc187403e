"""verl 0.9.1's batch-size rules, each mirroring an assert verl makes (file:line cited).

`check` returns every broken rule for a set of batch values; the plan uses it to derive
values and to refuse pins, and the tests use it to prove every emitted config would pass
verl's own checks at start-up *and* inside the workers (which a CPU test cannot reach).
Symbols: G world size, P data.train_batch_size, n rollout.n, m actor.ppo_mini_batch_size,
mu actor.ppo_micro_batch_size_per_gpu, lam rollout/ref log_prob_micro_batch_size_per_gpu,
tp rollout tensor_model_parallel_size (rollout DP = PP = 1 here).
"""
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Rule:
    name: str
    formula: str
    where: str


RULES = {
    "train_batch": Rule(
        "train_batch", "P*n % G == 0",
        "verl/utils/config.py:124 validate_config (real_train_batch_size % minimal_bsz)"),
    "mini_le_train": Rule(
        "mini_le_train", "P >= m",
        "verl/workers/config/actor.py:225 ActorConfig.validate"),
    "mini_batch": Rule(
        "mini_batch", "m*n % G == 0",
        "verl/workers/engine_workers.py:267 (mini_batch_size % data_parallel_size)"),
    "micro_batch": Rule(
        "micro_batch", "(m*n/G) % mu == 0",
        "verl/workers/engine/utils.py:125 prepare_micro_batches (data size % micro_batch_size_per_gpu)"),
    "log_prob_micro": Rule(
        "log_prob_micro", "(P*n/G) % lam == 0",
        "verl/workers/engine/utils.py:125 via compute_log_prob on each rank's P*n/G samples"),
    "rollout_tp": Rule(
        "rollout_tp", "G % (tp*dp*pp) == 0 and gpus_per_node % tp == 0",
        "verl/workers/engine_workers.py:660 (world_size % infer_world_size); vLLM TP stays in a node"),
    "tp_kv_heads": Rule(
        "tp_kv_heads", "kv_heads % tp == 0",
        "vLLM shards KV heads across TP ranks (Qwen2.5-3B has 2 KV heads)"),
    "no_padding": Rule(
        "no_padding", "P % m == 0",
        "verl/trainer/ppo/v1/trainer_base.py:1603 pads each batch to lcm(G, m*n); "
        "P % m keeps that padding at zero"),
    "positive": Rule("positive", "all sizes >= 1", "verl asserts > 0 sizes throughout"),
    "token_budget": Rule(
        "token_budget", "max_token_len_per_gpu >= max_prompt + max_response",
        "dynamic bsz packs whole sequences; one longer than the budget cannot be placed"),
}


@dataclass(frozen=True)
class BatchValues:
    G: int
    gpus_per_node: int
    P: int
    n: int
    m: int
    mu: Optional[int]
    lam: Optional[int]
    tp: int
    kv_heads: int
    dynamic_bsz: bool = False
    max_token_len_per_gpu: Optional[int] = None
    max_seq_len: int = 0


def check(v: BatchValues) -> list[Rule]:
    """Every rule these values break (empty list = verl will accept them)."""
    broken = []
    sizes = [v.G, v.P, v.n, v.m, v.tp] + ([] if v.dynamic_bsz else [v.mu or 0, v.lam or 0])
    if min(sizes) < 1:
        return [RULES["positive"]]
    if v.G % v.tp or v.gpus_per_node % v.tp:
        broken.append(RULES["rollout_tp"])
    if v.kv_heads % v.tp:
        broken.append(RULES["tp_kv_heads"])
    if (v.m * v.n) % v.G:
        broken.append(RULES["mini_batch"])
    if v.dynamic_bsz:
        # verl skips the static checks with dynamic bsz; only the token budget matters
        if (v.max_token_len_per_gpu or 0) < v.max_seq_len:
            broken.append(RULES["token_budget"])
        return broken
    if (v.P * v.n) % v.G:
        broken.append(RULES["train_batch"])
    if v.P < v.m:
        broken.append(RULES["mini_le_train"])
    if v.P % v.m:
        broken.append(RULES["no_padding"])
    if (v.m * v.n) % v.G == 0 and ((v.m * v.n) // v.G) % v.mu:
        broken.append(RULES["micro_batch"])
    if (v.P * v.n) % v.G == 0 and ((v.P * v.n) // v.G) % v.lam:
        broken.append(RULES["log_prob_micro"])
    return broken

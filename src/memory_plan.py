"""GPU memory plan of a run: what each GPU holds, per phase, and vLLM's share. Pure arithmetic.

src/plan.py calls `plan_memory` with numbers it read from the composed config (and the GPU size
the launcher passed in); nothing here reads files, the environment or devices.

Units: GiB (2^30 bytes). N = actor parameters (model.params_b x 1e9), G = world size (verl's FSDP
shards every actor/ref tensor over all G ranks: fsdp_size -1), tp = rollout tensor parallel,
T = tokens. Per GPU:

  actor params     4 N / G   fp32 (verl 0.9.1 builds the actor with fsdp_config.model_dtype fp32;
                             FSDP computes in bf16); 2 N / G with model_dtype bf16
  actor grads      4 N / G   same dtype as the params; update phase only (zero_grad(set_to_none))
  actor Adam       8 N / G   exp_avg + exp_avg_sq in fp32
  ref model        4 N / G   fp32 by default (ref.fsdp_config.model_dtype); only with a KL loss (grpo)
  update activations, one micro batch of T = mu x (prompt + response) tokens (dynamic bsz:
                   T = max_token_len_per_gpu): logits T x vocab x (2 + 4) bytes (bf16 logits and
                   the fp32 copy log-softmax/entropy make) + T x hidden x 2 bytes x layers (gradient
                   checkpointing keeps each layer's input)
  vLLM             share x GPU. Inside it: weights 2 N / tp (bf16), 2 GiB for its activation peak
                   and CUDA graphs, the rest KV cache. The step needs, per rollout replica (G / tp
                   of them), min(P n / (G / tp), max_num_seqs) sequences x (prompt + response)
                   tokens x 2 (K, V) x layers x ceil(kv_heads / tp) x head_dim x 2 bytes
  scorer (shared placement, on one training GPU; dedicated: on its own GPU)
                   weights sum over its models of params x b (b = 2 for bf16/fp16, 4 for fp32; the
                   small heads stay fp32 and are ignored) + activations of one batch (the service
                   runs one batch at a time, so the largest model counts) at its budget
                   T_s = scorer.batch_tokens: T_s x b x (hidden x (layers + 1) + 2 x ffn) (COMET
                   keeps every layer's hidden states for its layer-wise mix, plus one FFN) +
                   T_s x heads x 512 x 4 bytes (one layer's attention probabilities) + 1 GiB CUDA
                   context of its process
  reserve          memory.reserve_gb: CUDA contexts of the training and vLLM processes, NCCL
                   buffers, allocator fragmentation

A GPU must hold each phase (verl's hybrid engine runs them one after the other):
  rollout  actor params (0 with actor param_offload) + Adam (0 with optimizer_offload) + ref (0 with
           ref param_offload) + vLLM share + scorer + reserve
  update   actor params + grads + Adam (offloaded states come back for the step) + ref (0 with ref
           param_offload) + update activations + scorer + reserve; vLLM sleeps (verl frees its
           weights and KV cache, free_cache_engine)
vLLM's share is derived: the configured share (model.gpu_memory_utilization) is a ceiling, lowered
to what the rollout phase leaves free on the busiest GPU (the shared scorer's), rounded down to
0.01. A plan is refused when that share leaves vLLM a KV cache smaller than the step needs, when
the update phase does not fit, or when a dedicated scorer does not fit its GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

GIB = 2 ** 30
VLLM_OVERHEAD_GB = 2.0          # vLLM's activation peak (max_num_batched_tokens) and CUDA graphs
SCORER_CONTEXT_GB = 1.0         # the scorer process's CUDA context and allocator
SCORER_MAX_LEN = 512            # COMET encoders: 512 positions
SHARE_STEP = 0.01


def _gib(n_bytes: float) -> float:
    return n_bytes / GIB


def _dtype_bytes(dtype: str) -> int:
    return 4 if dtype in ("fp32", "float32") else 2


@dataclass(frozen=True)
class ActorShape:
    params_b: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int


@dataclass(frozen=True)
class ScorerModel:
    name: str
    params_b: float
    layers: int
    hidden: int
    ffn: int
    heads: int


@dataclass(frozen=True)
class MemoryInputs:
    gpu_gb: float
    reserve_gb: float
    actor: ActorShape
    world_size: int
    tp: int
    samples_per_step: int            # P x n
    max_seq_len: int                 # prompt + response
    micro_tokens: int                # tokens of one update micro batch
    max_num_seqs: int
    use_ref: bool
    actor_param_offload: bool
    actor_optimizer_offload: bool
    ref_param_offload: bool
    actor_dtype: str
    ref_dtype: str
    vllm_share_ceiling: float
    scorer_placement: Optional[str]  # None: no scorer runs
    scorer_dtype: str
    scorer_batch_tokens: int
    scorer_models: tuple[ScorerModel, ...]


@dataclass(frozen=True)
class MemoryPlan:
    """One GPU's budget in GiB (the shared scorer's GPU: the fullest one)."""
    gpu_gb: float
    reserve_gb: float
    actor_params_gb: float
    actor_grads_gb: float
    actor_optimizer_gb: float
    ref_gb: float
    update_activations_gb: float
    scorer_weights_gb: float
    scorer_activations_gb: float
    scorer_gb: float                 # weights + activations + context
    scorer_on_training_gpu: bool
    vllm_share: float
    vllm_share_ceiling: float
    vllm_gb: float
    vllm_weights_gb: float
    kv_cache_gb: float
    kv_needed_gb: float
    rollout_seqs_per_replica: int
    rollout_gb: float
    update_gb: float
    problems: tuple[str, ...]

    @property
    def fits(self) -> bool:
        return not self.problems


def scorer_need_gb(models: tuple[ScorerModel, ...], dtype: str, batch_tokens: int) -> tuple[float, float, float]:
    """(weights, activations, total incl. its CUDA context) of a scorer hosting `models` on a GPU."""
    if not models:
        return 0.0, 0.0, 0.0
    b = _dtype_bytes(dtype)
    weights = _gib(sum(m.params_b * 1e9 * b for m in models))
    acts = max(_gib(batch_tokens * b * (m.hidden * (m.layers + 1) + 2 * m.ffn)
                    + batch_tokens * m.heads * SCORER_MAX_LEN * 4) for m in models)
    return weights, acts, weights + acts + SCORER_CONTEXT_GB


def plan_memory(x: MemoryInputs) -> MemoryPlan:
    a, G = x.actor, x.world_size
    N = a.params_b * 1e9
    pb = _dtype_bytes(x.actor_dtype)
    params = _gib(pb * N / G)
    grads = _gib(pb * N / G)
    adam = _gib(8 * N / G)
    ref = _gib(_dtype_bytes(x.ref_dtype) * N / G) if x.use_ref else 0.0
    ref_resident = 0.0 if x.ref_param_offload else ref
    update_acts = _gib(x.micro_tokens * a.vocab * (2 + 4) + x.micro_tokens * a.hidden * 2 * a.layers)

    s_weights, s_acts, s_total = scorer_need_gb(x.scorer_models, x.scorer_dtype, x.scorer_batch_tokens)
    on_training_gpu = x.scorer_placement == "shared" and bool(x.scorer_models)
    scorer_here = s_total if on_training_gpu else 0.0

    resident = (0.0 if x.actor_param_offload else params) + (0.0 if x.actor_optimizer_offload else adam) + ref_resident
    free = x.gpu_gb - x.reserve_gb - resident - scorer_here
    share = min(x.vllm_share_ceiling, math.floor(free / x.gpu_gb / SHARE_STEP + 1e-9) * SHARE_STEP)
    share = round(max(share, 0.0), 2)
    vllm = share * x.gpu_gb
    vllm_weights = _gib(2 * N / x.tp)
    kv = vllm - vllm_weights - VLLM_OVERHEAD_GB
    replicas = max(1, G // x.tp)
    seqs = min(math.ceil(x.samples_per_step / replicas), x.max_num_seqs)
    head_dim = a.hidden // a.heads
    kv_per_token = 2 * a.layers * math.ceil(a.kv_heads / x.tp) * head_dim * 2
    kv_needed = _gib(seqs * x.max_seq_len * kv_per_token)

    rollout = resident + vllm + scorer_here + x.reserve_gb
    update = params + grads + adam + ref_resident + update_acts + scorer_here + x.reserve_gb

    problems = []
    if kv < kv_needed:
        problems.append(
            f"rollout: vLLM's share {share:.2f} x {x.gpu_gb:g} = {vllm:.1f} GiB (what is left beside actor "
            f"{resident - ref_resident:.1f} + ref {ref_resident:.1f} + scorer {scorer_here:.1f} + reserve "
            f"{x.reserve_gb:g}) leaves a KV cache of {kv:.1f} GiB after its weights {vllm_weights:.1f} + "
            f"{VLLM_OVERHEAD_GB:g}, below the {kv_needed:.1f} GiB for {seqs} sequences x {x.max_seq_len} tokens")
    if update > x.gpu_gb:
        problems.append(
            f"update: actor params {params:.1f} + grads {grads:.1f} + Adam {adam:.1f} + ref {ref_resident:.1f} "
            f"+ activations {update_acts:.1f} + scorer {scorer_here:.1f} + reserve {x.reserve_gb:g} = "
            f"{update:.1f} GiB > {x.gpu_gb:g} GiB")
    if x.scorer_placement == "dedicated" and s_total > x.gpu_gb:
        problems.append(f"dedicated scorer: {s_total:.1f} GiB (weights {s_weights:.1f} + activations "
                        f"{s_acts:.1f} + {SCORER_CONTEXT_GB:g}) > {x.gpu_gb:g} GiB")
    return MemoryPlan(
        gpu_gb=x.gpu_gb, reserve_gb=x.reserve_gb, actor_params_gb=params, actor_grads_gb=grads,
        actor_optimizer_gb=adam, ref_gb=ref, update_activations_gb=update_acts, scorer_weights_gb=s_weights,
        scorer_activations_gb=s_acts, scorer_gb=s_total, scorer_on_training_gpu=on_training_gpu,
        vllm_share=share, vllm_share_ceiling=x.vllm_share_ceiling, vllm_gb=vllm, vllm_weights_gb=vllm_weights,
        kv_cache_gb=kv, kv_needed_gb=kv_needed, rollout_seqs_per_replica=seqs, rollout_gb=rollout,
        update_gb=update, problems=tuple(problems))

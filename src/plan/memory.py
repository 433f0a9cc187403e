"""GPU memory plan of a run: what each GPU holds, per phase, and vLLM's share. Pure arithmetic.

src/plan/run_plan.py calls `plan_memory` with numbers read (src/plan/memory_inputs.py) from the composed config (and the GPU size
the launcher passed in); nothing here reads files, the environment or devices.

Units: GiB (2^30 bytes). N = actor parameters (model.params_b x 1e9), G = world size (verl's FSDP
shards every actor/ref tensor over all G ranks: fsdp_size -1 gives a 1-D mesh of all ranks in
verl/workers/engine/fsdp/utils.py create_device_mesh, and get_sharding_strategy picks FULL_SHARD for it;
the FSDP2 tracker's shards confirm 4 N / G bytes), tp = rollout tensor parallel, T = tokens. Per GPU:

  actor params     4 N / G   fp32 (verl 0.9.1 builds the actor with fsdp_config.model_dtype fp32;
                             FSDP computes in bf16); 2 N / G with model_dtype bf16
  actor grads      4 N / G   same dtype as the params; update phase only (zero_grad(set_to_none))
  actor Adam       8 N / G   exp_avg + exp_avg_sq in fp32
  ref model        4 N / G   fp32 by default (ref.fsdp_config.model_dtype); only with a KL loss (grpo)
  update micro batch, T = mu x (prompt + response) tokens (dynamic bsz: T = max_token_len_per_gpu):
                   what FSDP holds above the sharded params and grads while a micro batch runs forward
                   + backward (unsharded units in flight, all-gather / reduce-scatter buffers,
                   activations, the log-prob temporaries), measured with torch's FSDP2 memory tracker
                   (src/plan/memory_measured.py POLICY_UPDATE_PEAKS, benches/memory.py policy): a line in T
                   per measured model (found by its shapes), for other models a fit over all of them,
                   T x (a x vocab + b x hidden x layers) + c x vocab x hidden; with or without gradient
                   checkpointing (actor_rollout_ref.model.enable_gradient_checkpointing). The
                   AdamW step instead holds foreach temporaries of the shard's size (measured); the
                   larger of the two counts
  vLLM             share x GPU. Inside it: weights 2 N / tp (bf16), its profile run's activation peak
                   (measured) + CUDA graphs + non-torch memory (published; src/plan/memory_measured.py), the
                   rest KV cache. The step needs, per rollout replica (G / tp
                   of them), min(P n / (G / tp), max_num_seqs) sequences x (prompt + response)
                   tokens x 2 (K, V) x layers x ceil(kv_heads / tp) x head_dim x 2 bytes
  scorer (shared placement, on one training GPU; dedicated: on its own GPU)
                   weights sum over its models of params x b (b = 2 for bf16/fp16, 4 for fp32) + what
                   the model's backend holds above that (its descriptor's memory.weights_extra_gb:
                   the comet backend's fp32 heads and allocator rounding, H200) + activations of one
                   batch (the service runs one batch at a time, so the largest model counts) at its
                   budget T_s = scorer.batch_tokens, by the backend's own measured formula (its
                   descriptor's memory.activation_bytes, src/scorer/backends/<name>/: the comet
                   backend's T_s x hidden x (layers + 1) x c, an mT5 backend's attention-bound
                   max(T_s, L) x heads x L x c') + the CUDA context of its process (CUDA_CONTEXT_GB,
                   cited there)
  LoRA (model.lora.rank r > 0): the base weights are frozen, only the adapters train. With A = the adapters'
                   parameters (r x (in + out) per targeted linear: q, k, v, o, gate, up, down for all-linear,
                   lora_parameters below, the count peft's get_peft_model makes, tests/launcher/test_lora.py):
                   actor params (N + A) x dtype / G (verl casts the adapters to the base's dtype:
                   verl/workers/engine/fsdp/transformer_impl.py), grads and Adam of A only, no ref model (verl
                   computes the reference log-probs with the adapter off: verl/trainer/ppo/v1/trainer_base.py
                   ref_in_actor), vLLM's weights + one adapter slot at vLLM's rank (max_loras 1:
                   verl/workers/rollout/vllm_rollout/vllm_async_server.py). The micro batch's transient is the
                   full model's measured one, an upper bound (the frozen weights' gradients are not made)
  reserve          memory.reserve_gb: CUDA contexts of the training and vLLM processes, NCCL
                   buffers, allocator fragmentation

A GPU must hold each phase (verl's hybrid engine runs them one after the other):
  rollout  actor params (0 with actor param_offload) + Adam (0 with optimizer_offload) + ref (0 with
           ref param_offload) + vLLM share + scorer + reserve
  update   actor params + grads + Adam (offloaded states come back for the step) + ref (0 with ref
           param_offload) + max(micro batch, AdamW step temporaries) + scorer + reserve; vLLM sleeps
           (verl frees its weights and KV cache, free_cache_engine)
vLLM's share is derived: the configured share (model.gpu_memory_utilization) is a ceiling, lowered
to what the rollout phase leaves free on the busiest GPU (the shared scorer's), rounded down to
0.01. A plan is refused when that share leaves vLLM a KV cache smaller than the step needs, when
the update phase does not fit, or when a dedicated scorer does not fit its GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from src.config.schema import Placement
from src.scorer.backends import BACKENDS

from .memory_measured import (ADAM_STEP_TEMP_RATIO, CUDA_CONTEXT_GB, VLLM_CUDA_GRAPH_GB, VLLM_NON_TORCH_GB,
                              VLLM_PROFILE_PEAK_GB, policy_update_transient_bytes)

GIB = 2 ** 30
# What vLLM subtracts from its share before the KV cache (vllm/v1/worker/gpu_worker.py
# determine_available_memory): its profile run's activation peak (measured, src/plan/memory_measured.py), the
# CUDA graphs it captures and non-torch allocations (published figures, cited there)
VLLM_OVERHEAD_GB = VLLM_PROFILE_PEAK_GB + VLLM_CUDA_GRAPH_GB + VLLM_NON_TORCH_GB
SCORER_CONTEXT_GB = CUDA_CONTEXT_GB
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
    intermediate: int = 0            # the MLP's size (LoRA's adapters on gate, up, down)


# the LoRA ranks vLLM serves: verl's own list for a vLLM without vllm.config.lora.MaxLoRARanks
# (verl/workers/rollout/vllm_rollout/utils.py get_vllm_max_lora_rank, which rounds a rank up to one of them);
# tests/loop/test_vllm_lora_ranks.py checks it against the loop env's vLLM
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_lora_rank(rank: int) -> int:
    """The rank verl asks vLLM to reserve for an adapter of rank `rank` (0: none; above the largest: the largest,
    which the verl check refuses)."""
    return 0 if rank <= 0 else next((r for r in VLLM_LORA_RANKS if r >= rank), VLLM_LORA_RANKS[-1])


# a decoder layer's linears (Qwen2/Llama names, as peft matches them): name -> (in, out) in units the shape gives
LORA_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_targets(target_modules: str) -> tuple[str, ...]:
    """The decoder linears `target_modules` names (peft's all-linear: every one of them); a pattern naming none
    of them counts all (an upper bound)."""
    named = tuple(n for n in LORA_LINEARS if n in target_modules)
    return named or LORA_LINEARS


def lora_parameters(a: ActorShape, rank: int, targets: tuple[str, ...] = LORA_LINEARS) -> int:
    """Parameters of the LoRA adapters of rank `rank` on `targets` of every layer: r x (in + out) each."""
    head_dim = a.hidden // a.heads
    kv = a.kv_heads * head_dim
    dims = {"q_proj": (a.hidden, a.hidden), "k_proj": (a.hidden, kv), "v_proj": (a.hidden, kv),
            "o_proj": (a.hidden, a.hidden), "gate_proj": (a.hidden, a.intermediate),
            "up_proj": (a.hidden, a.intermediate), "down_proj": (a.intermediate, a.hidden)}
    return a.layers * rank * sum(sum(dims[t]) for t in targets)


@dataclass(frozen=True)
class ScorerModel:
    name: str
    params_b: float
    layers: int
    hidden: int
    ffn: int
    heads: int
    backend: str = "comet"  # the scorer backend serving its kind (src/scorer/backends KINDS): its memory formula


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
    scorer_placement: Optional[Placement]  # None: no scorer runs
    scorer_dtype: str
    scorer_batch_tokens: int
    scorer_models: tuple[ScorerModel, ...]
    gradient_checkpointing: bool     # actor_rollout_ref.model.enable_gradient_checkpointing
    lora_rank: int = 0               # model.lora.rank: 0 trains the whole model
    lora_targets: tuple[str, ...] = LORA_LINEARS


@dataclass(frozen=True)
class MemoryPlan:
    """One GPU's budget in GiB (the shared scorer's GPU: the fullest one)."""
    gpu_gb: float
    reserve_gb: float
    actor_params_gb: float
    actor_grads_gb: float
    actor_optimizer_gb: float
    ref_gb: float
    lora_params: int                 # adapter parameters (0: no LoRA)
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
    weights = sum(_gib(m.params_b * 1e9 * b) + BACKENDS[m.backend].memory.weights_extra_gb for m in models)
    acts = max(_gib(scorer_activation_bytes(m, "fp32" if b == 4 else "bf16", batch_tokens)) for m in models)
    return weights, acts, weights + acts + SCORER_CONTEXT_GB


def scorer_activation_bytes(m: ScorerModel, dtype: str, batch_tokens: int) -> float:
    """One batch of `batch_tokens` padded tokens through `m` (dtype bf16 or fp32), by its backend's
    measured formula (its descriptor's memory.activation_bytes)."""
    return BACKENDS[m.backend].memory.activation_bytes(m, dtype, batch_tokens)


def plan_memory(x: MemoryInputs) -> MemoryPlan:
    a, G = x.actor, x.world_size
    N = a.params_b * 1e9
    pb = _dtype_bytes(x.actor_dtype)
    lora = lora_parameters(a, x.lora_rank, x.lora_targets) if x.lora_rank > 0 else 0
    trained = lora if lora else N
    params = _gib(pb * (N + lora) / G)
    grads = _gib(pb * trained / G)
    adam = _gib(8 * trained / G)
    # with LoRA verl's reference is the actor with its adapter off: no second model
    ref = _gib(_dtype_bytes(x.ref_dtype) * N / G) if x.use_ref and not lora else 0.0
    ref_resident = 0.0 if x.ref_param_offload else ref
    # measured (benches/memory.py policy, FSDP2 tracker): what one micro batch's forward + backward holds
    # above the sharded state; the AdamW step instead holds foreach temporaries the size of the shard
    update_acts = _gib(policy_update_transient_bytes(x.micro_tokens, a.vocab, a.hidden, a.layers,
                                                     x.gradient_checkpointing))
    step_temps = ADAM_STEP_TEMP_RATIO * _gib(pb * trained / G)

    s_weights, s_acts, s_total = scorer_need_gb(x.scorer_models, x.scorer_dtype, x.scorer_batch_tokens)
    on_training_gpu = x.scorer_placement == Placement.shared and bool(x.scorer_models)
    scorer_here = s_total if on_training_gpu else 0.0

    resident = (0.0 if x.actor_param_offload else params) + (0.0 if x.actor_optimizer_offload else adam) + ref_resident
    free = x.gpu_gb - x.reserve_gb - resident - scorer_here
    share = min(x.vllm_share_ceiling, math.floor(free / x.gpu_gb / SHARE_STEP + 1e-9) * SHARE_STEP)
    share = round(max(share, 0.0), 2)
    vllm = share * x.gpu_gb
    # vLLM's adapter slot, at the rank verl asks it to reserve (rounded up to one vLLM serves)
    vllm_lora = lora_parameters(a, vllm_lora_rank(x.lora_rank), x.lora_targets) if lora else 0
    vllm_weights = _gib(2 * (N + vllm_lora) / x.tp)
    kv = vllm - vllm_weights - VLLM_OVERHEAD_GB
    replicas = max(1, G // x.tp)
    seqs = min(math.ceil(x.samples_per_step / replicas), x.max_num_seqs)
    head_dim = a.hidden // a.heads
    kv_per_token = 2 * a.layers * math.ceil(a.kv_heads / x.tp) * head_dim * 2
    kv_needed = _gib(seqs * x.max_seq_len * kv_per_token)

    rollout = resident + vllm + scorer_here + x.reserve_gb
    update = params + grads + adam + ref_resident + max(update_acts, step_temps) + scorer_here + x.reserve_gb

    problems = []
    # the scorer's share, as measured (benches/memory.py), so a refusal shows where the GiB go
    scorer_txt = (f"scorer {scorer_here:.1f} (weights {s_weights:.1f} + activations {s_acts:.1f} at "
                  f"{x.scorer_batch_tokens} tokens as measured in benches/RESULTS.md + context {SCORER_CONTEXT_GB:g})"
                  if scorer_here else "scorer 0.0")
    if kv < kv_needed:
        problems.append(
            f"rollout: vLLM's share {share:.2f} x {x.gpu_gb:g} = {vllm:.1f} GiB (what is left beside actor "
            f"{resident - ref_resident:.1f} + ref {ref_resident:.1f} + {scorer_txt} + reserve "
            f"{x.reserve_gb:g}) leaves a KV cache of {kv:.1f} GiB after its weights {vllm_weights:.1f} + "
            f"{VLLM_OVERHEAD_GB:.1f} (profile peak, CUDA graphs), below the {kv_needed:.1f} GiB for {seqs} "
            f"sequences x {x.max_seq_len} tokens")
    if update > x.gpu_gb:
        problems.append(
            f"update: actor params {params:.1f} + grads {grads:.1f} + Adam {adam:.1f} + ref {ref_resident:.1f} "
            f"+ micro batch {max(update_acts, step_temps):.1f} ({x.micro_tokens} tokens, FSDP buffers + "
            f"activations as measured in benches/RESULTS.md) + {scorer_txt} + reserve {x.reserve_gb:g} = "
            f"{update:.1f} GiB > {x.gpu_gb:g} GiB" + (f" (LoRA rank {x.lora_rank}: grads and Adam of its "
                                                       f"{lora / 1e6:.0f} M adapter parameters)" if lora else ""))
    if x.scorer_placement == Placement.dedicated and s_total > x.gpu_gb:
        problems.append(f"dedicated scorer: {s_total:.1f} GiB (weights {s_weights:.1f} + activations "
                        f"{s_acts:.1f} + {SCORER_CONTEXT_GB:g}) > {x.gpu_gb:g} GiB")
    return MemoryPlan(
        gpu_gb=x.gpu_gb, reserve_gb=x.reserve_gb, actor_params_gb=params, actor_grads_gb=grads,
        actor_optimizer_gb=adam, ref_gb=ref, lora_params=lora, update_activations_gb=update_acts, scorer_weights_gb=s_weights,
        scorer_activations_gb=s_acts, scorer_gb=s_total, scorer_on_training_gpu=on_training_gpu,
        vllm_share=share, vllm_share_ceiling=x.vllm_share_ceiling, vllm_gb=vllm, vllm_weights_gb=vllm_weights,
        kv_cache_gb=kv, kv_needed_gb=kv_needed, rollout_seqs_per_replica=seqs, rollout_gb=rollout,
        update_gb=update, problems=tuple(problems))

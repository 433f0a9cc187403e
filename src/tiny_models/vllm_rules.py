"""What vLLM 0.24.0 (the rollout engine verl[vllm]==0.9.1 pins) needs of a model it serves, checked
before a tiny model is written, so a build that vLLM would refuse (or serve wrongly) fails at the
builder with one line instead of on a GPU node minutes into a run.

Read in vLLM's source (the stored github.com/vllm-project/vllm snapshot, main branch; the v0.24.0 tag
itself could not be fetched here, so every rule below holds across the releases read):
- head size, per CUDA attention backend (`supports_head_size` / `get_supported_head_sizes`):
  vllm/v1/attention/backends/flash_attn.py FlashAttentionBackend: `head_size % 8 == 0 and
  head_size <= 256` (older releases list [32, 64, 96, 128, 160, 192, 224, 256]);
  vllm/v1/attention/backends/triton_attn.py TritonAttentionBackend: `head_size >= 32`;
  vllm/v1/attention/backends/flashinfer.py FlashInferBackend: [64, 128, 256] in the releases that
  list sizes. vLLM picks the backend by GPU and install, so the tiny policy uses a size every one of
  them takes (64) and the check refuses what FlashAttention or Triton would.
- KV cache block size: FlashAttentionBackend.get_kv_cache_shape raises "Block size must be a
  multiple of 16" (newer: get_supported_kernel_block_sizes -> MultipleOf(16)). verl 0.9.1 leaves
  the block size to vLLM's default (16) unless `actor_rollout_ref.rollout.engine_kwargs.vllm.block_size`
  is set (verl/workers/rollout/vllm_rollout/vllm_async_server.py passes engine_kwargs through).
- vocabulary: vllm/model_executor/layers/vocab_parallel_embedding.py pads the embedding to a multiple
  of DEFAULT_VOCAB_PADDING_SIZE = 64 itself, so a multiple of 64 is what vLLM would allocate anyway
  (no hidden padding rows that differ between the FSDP actor and vLLM's copy of the weights). A
  tokenizer id at or above the model's vocab_size makes vLLM refuse the prompt (out-of-vocabulary
  token) and a sampled id above len(tokenizer) cannot be decoded, so the tiny policy has exactly
  one embedding row per token: vocab_size == len(tokenizer). (Real Qwen2.5 checkpoints have
  151936 rows for 151665 tokens; that is fine for vLLM, the equality is the tiny model's choice.)

Pure: numbers in, problems out. No import of vllm (not installed on CPU machines).
"""
from __future__ import annotations

HEAD_SIZE_MULTIPLE = 8
HEAD_SIZE_MAX = 256
HEAD_SIZE_MIN_TRITON = 32
BLOCK_SIZE_MULTIPLE = 16
DEFAULT_BLOCK_SIZE = 16
VOCAB_PADDING = 64


class VllmConstraintError(ValueError):
    """A model (or cache setting) vLLM would refuse; the message is one line naming the fix."""


def problems(*, hidden_size: int, num_attention_heads: int, num_kv_heads: int, vocab_size: int,
             tokenizer_len: int, block_size: int = DEFAULT_BLOCK_SIZE) -> list[str]:
    """Every rule the model breaks, one clause each (empty: vLLM can serve it)."""
    out = []
    if num_attention_heads < 1 or hidden_size % num_attention_heads:
        return [f"hidden_size {hidden_size} is not a multiple of num_attention_heads {num_attention_heads}"]
    head = hidden_size // num_attention_heads
    if head % HEAD_SIZE_MULTIPLE or head > HEAD_SIZE_MAX:
        out.append(f"head size {head} (hidden_size/num_attention_heads) must be a multiple of "
                   f"{HEAD_SIZE_MULTIPLE} and at most {HEAD_SIZE_MAX} (vLLM FlashAttention backend)")
    elif head < HEAD_SIZE_MIN_TRITON:
        out.append(f"head size {head} is below {HEAD_SIZE_MIN_TRITON}, which vLLM's Triton backend needs")
    if num_kv_heads < 1 or num_attention_heads % num_kv_heads:
        out.append(f"num_attention_heads {num_attention_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    if vocab_size % VOCAB_PADDING:
        out.append(f"vocab_size {vocab_size} is not a multiple of {VOCAB_PADDING} (vLLM pads the embedding to one)")
    if vocab_size != tokenizer_len:
        out.append(f"vocab_size {vocab_size} != len(tokenizer) {tokenizer_len} (one embedding row per token)")
    if block_size % BLOCK_SIZE_MULTIPLE:
        out.append(f"KV cache block size {block_size} is not a multiple of {BLOCK_SIZE_MULTIPLE} "
                   f"(vLLM FlashAttention backend)")
    return out


def check(**kwargs) -> None:
    """Raise VllmConstraintError naming every broken rule."""
    found = problems(**kwargs)
    if found:
        raise VllmConstraintError("vLLM 0.24.0 cannot serve this model: " + "; ".join(found))

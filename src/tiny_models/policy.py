"""A tiny random-weight policy of the Qwen2 architecture, built from config, offline (train env).

`Qwen2ForCausalLM` from a `Qwen2Config` with the shape given (conf/model/tiny_qwen2.yaml holds the
one used by experiment=smoke_tiny), random weights from a fixed seed, the byte-level BPE tokenizer
of tokenizer.py padded to exactly `vocab_size` tokens, and a generation config whose stop tokens
are the chat template's `<|im_end|>` and the pad token, as Qwen2.5-Instruct's. What verl needs of
it: `AutoConfig`/`AutoTokenizer`/`AutoModelForCausalLM.from_pretrained(dir)` (verl/workers/config/
model.py HFModelConfig, verl/workers/engine/fsdp/transformer_impl.py _build_module) and a chat
template for RLHFDataset. What vLLM needs of it is checked before anything is written
(vllm_rules.py). Weights are saved in bf16 (config dtype), as Qwen2.5 ships them.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

from . import vllm_rules
from .atomic import ensure
from .tokenizer import PAD_TOKEN, IM_END, build_tiny_tokenizer

SEED = 1234


@dataclass(frozen=True)
class PolicySpec:
    """The model's shape (the names of conf/model/*.yaml). Head size 64 = 128 / 2: a size every vLLM
    CUDA attention backend takes (vllm_rules.py)."""
    num_layers: int = 2
    hidden_size: int = 128
    intermediate_size: int = 256
    num_attention_heads: int = 2
    num_kv_heads: int = 1
    vocab_size: int = 640
    max_position_embeddings: int = 4096


def builder_hash() -> str:
    here = Path(__file__).parent
    return hashlib.sha256(b"".join((here / f).read_bytes() for f in ("policy.py", "tokenizer.py"))).hexdigest()[:16]


def build_key(spec: PolicySpec) -> dict:
    return {"builder": "policy", "hash": builder_hash(), "spec": asdict(spec)}


def check(spec: PolicySpec, tokenizer_len: int, block_size: int = vllm_rules.DEFAULT_BLOCK_SIZE) -> None:
    vllm_rules.check(hidden_size=spec.hidden_size, num_attention_heads=spec.num_attention_heads,
                     num_kv_heads=spec.num_kv_heads, vocab_size=spec.vocab_size, tokenizer_len=tokenizer_len,
                     block_size=block_size)


def build(out: Path, spec: PolicySpec) -> None:
    """Tokenizer, config, weights and generation config into `out` (which exists)."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    build_tiny_tokenizer(out, vocab_size=spec.vocab_size)
    tok = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    check(spec, len(tok))
    eos, pad = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(PAD_TOKEN)
    cfg = Qwen2Config(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_kv_heads, max_position_embeddings=spec.max_position_embeddings,
        max_window_layers=spec.num_layers, use_sliding_window=False,
        # tied like Qwen2.5-0.5B/3B: the one embedding matrix is also the output head
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=eos, pad_token_id=pad,
        architectures=["Qwen2ForCausalLM"],
    )
    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad, bos_token_id=None)
    model.save_pretrained(str(out))


def ensure_built(out: Path, spec: PolicySpec = PolicySpec(),
                 block_size: int = vllm_rules.DEFAULT_BLOCK_SIZE) -> str:
    """'reused' when `out` already holds this spec built by this builder, else 'built'. The vLLM
    rules are checked before any work (`block_size`: the KV cache block size the run gives vLLM),
    the tokenizer's length once it is trained."""
    check(spec, spec.vocab_size, block_size)
    return ensure(Path(out), build_key(spec), lambda tmp: build(tmp, spec))

"""Packages a GPU node cannot do without, each seen missing on a real one (an H200 installed from a
trimmed offline wheelhouse, benches/gpu/smoke_tiny.md) and each in the GPU locks, so a lock edit or a
trimmed install list that drops one fails here, not an hour into a node's setup.

- llguidance, xgrammar: vllm 0.24.0 v1/structured_output/__init__.py imports backend_guidance and
  backend_xgrammar at module level; their dataclasses annotate fields with llguidance.LLMatcher and
  xgr.GrammarMatcher, which Python evaluates at class creation, so the LazyLoaders import both as soon
  as verl imports vllm.LLM (verl/third_party/vllm/__init__.py). Missing: verl's TaskRunner dies before
  any GPU work (smoke attempt 1).
- apache-tvm-ffi: xgrammar 0.2.3's first import (`from tvm_ffi import register_error`; attempt 2).
- fugashi, unidic-lite: the scorer's span models warm up on a Japanese segment at start
  (src/scorer/backends/comet/words.py warm_up); without them an XCOMET service refuses to start ("warm-up batch failed").
What a node CAN lack is in docs/environments.md (flashinfer: the plan turns vLLM's sampler off it)."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pins(lock: str) -> dict[str, str]:
    out = {}
    for line in (ROOT / "envs" / "lock" / lock).read_text().splitlines():
        line = line.split("#")[0].strip().rstrip("\\").strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[name.strip().lower()] = version.split(";")[0].strip()
    return out


@pytest.mark.parametrize("lock", ["train-gpu.txt", "train-gpu-flash-attn.txt"])
@pytest.mark.parametrize("package", ["llguidance", "xgrammar", "apache-tvm-ffi"])
def test_the_train_gpu_locks_keep_what_vllm_imports_at_start(lock, package):
    assert package in pins(lock), f"{lock} lacks {package}: vllm 0.24.0 cannot be imported without it"


@pytest.mark.parametrize("package", ["fugashi", "unidic-lite", "jieba"])
def test_the_scorer_gpu_lock_keeps_the_span_segmenters(package):
    assert package in pins("scorer-gpu.txt")


def test_vllm_is_the_version_these_facts_were_read_in():
    # a vllm upgrade must re-check the list above (and benches/gpu/smoke_tiny.md)
    assert pins("train-gpu.txt")["vllm"] == "0.24.0"

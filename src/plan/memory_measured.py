"""Measured GPU memory figures the plan (src/plan/memory.py) is built on, and the published
constants it cannot measure. Data only, plus the fits derived from it (policy update,
vLLM's profile run; each section below names the command that regenerates its rows).

The QE scorer's figures are each backend's own: its descriptor's memory formula (src/scorer/backends/).
"""
from __future__ import annotations

# Published constants the fake-tensor measurement cannot see:
# - CUDA context + allocator of a process: PyTorch's CUDA semantics notes put the context at
#   "hundreds of MiB" to ~1 GiB depending on the device and the kernels loaded (lazy loading,
#   CUDA >= 11.7: https://pytorch.org/docs/stable/notes/cuda.html); 1 GiB per process.
CUDA_CONTEXT_GB = 1.0
# - An "80 GB" H100 (SXM5 / PCIe, HBM3/HBM2e) shows 81559 MiB total in nvidia-smi = 79.65 GiB, which is
#   also torch.cuda.get_device_properties().total_memory; an A100 80GB shows 81920 MiB. NVIDIA's "80 GB" is
#   the marketing size; what the driver exposes is the figure above (memory.gpu_gb's default stays below it).
H100_80GB_TOTAL_GIB = 81559 / 1024

# ---------------------------------------------------------------------------------------------------
# Policy update. Measured by
#     .venv/bin/python benches/memory.py policy --json        (about 15 minutes on 2 shared cores)
# (table and method in benches/RESULTS.md, "Memory (issue 12)"): rank 0 of the actor as verl 0.9.1
# builds it with strategy fsdp2 (fp32 weights, verl.utils.fsdp_utils.apply_fsdp2 over each decoder layer
# and the root, MixedPrecisionPolicy bf16 compute / fp32 reduce, gradient checkpointing), on the full
# layer count, under torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker with fake tensors and a
# fake process group of G ranks; the second micro batch of T packed tokens (grads accumulated from the
# first, as over a verl mini batch) through verl's log-prob path and backward. verl's default strategy fsdp (FSDP1, verl/workers/engine/fsdp/transformer_impl.py
# _build_fsdp_module, FULL_SHARD over the fsdp_size=-1 mesh of all G ranks) shards the same bytes.
# (model, G, T, gradient checkpointing): (sharded params, sharded grads, peak) in GiB at the peak
POLICY_UPDATE_PEAKS = {
    ("qwen2.5_0.5b", 2, 4096, True): (0.920, 0.920, 4.367),
    ("qwen2.5_0.5b", 2, 4096, False): (0.920, 0.920, 10.474),
    ("qwen2.5_0.5b", 2, 10240, True): (0.920, 0.920, 8.215),
    ("qwen2.5_0.5b", 2, 10240, False): (0.920, 0.920, 26.238),
    ("qwen2.5_0.5b", 4, 4096, True): (0.460, 0.460, 3.447),
    ("qwen2.5_0.5b", 8, 4096, True): (0.230, 0.230, 2.987),
    ("qwen2.5_3b", 2, 4096, True): (5.748, 5.748, 14.616),
    ("qwen2.5_3b", 2, 4096, False): (5.748, 5.748, 34.017),
    ("qwen2.5_3b", 2, 10240, True): (5.748, 5.748, 18.957),
    ("qwen2.5_3b", 2, 10240, False): (5.748, 5.748, 71.619),
    ("qwen2.5_3b", 4, 4096, True): (2.874, 2.874, 8.868),
    ("qwen2.5_3b", 8, 4096, True): (1.437, 1.437, 5.994),
    ("qwen2.5_7b", 2, 4096, True): (14.185, 14.185, 33.758),
    ("qwen2.5_7b", 2, 4096, False): (14.185, 14.185, 59.239),
    ("qwen2.5_7b", 2, 10240, True): (14.185, 14.185, 36.665),
    ("qwen2.5_7b", 2, 10240, False): (14.185, 14.185, 103.388),
    ("qwen2.5_7b", 4, 4096, True): (7.093, 7.093, 19.248),
    ("qwen2.5_7b", 8, 4096, True): (3.546, 3.546, 12.155),
}
# (model, G): (param shard, Adam state, AdamW step temporaries) in GiB, the full model's shards through
# verl's build_optimizer (torch.optim.AdamW, foreach as on CUDA)
POLICY_STEP_PEAKS = {
    ("qwen2.5_0.5b", 2): (0.920, 1.840, 0.920),
    ("qwen2.5_0.5b", 4): (0.460, 0.920, 0.460),
    ("qwen2.5_0.5b", 8): (0.230, 0.460, 0.230),
    ("qwen2.5_3b", 2): (5.748, 11.496, 5.748),
    ("qwen2.5_3b", 4): (2.874, 5.748, 2.874),
    ("qwen2.5_3b", 8): (1.437, 2.874, 1.437),
    ("qwen2.5_7b", 2): (14.185, 28.370, 14.185),
    ("qwen2.5_7b", 4): (7.093, 14.185, 7.093),
    ("qwen2.5_7b", 8): (3.546, 7.093, 3.546),
}
# (layers, hidden, vocab) of the measured policies (conf/model/*.yaml, benches/memory.py POLICIES)
POLICY_SHAPES = {"qwen2.5_0.5b": (24, 896, 151936), "qwen2.5_3b": (36, 2048, 151936),
                 "qwen2.5_7b": (28, 3584, 152064)}


def policy_transient_gib(row: tuple) -> float:
    """What a measured update row holds above the sharded state (params + grads, which the plan counts in
    full): unsharded parameters and gradients of the FSDP units in flight, all-gather / reduce-scatter
    buffers, activations and the log-prob temporaries."""
    params, grads, peak = POLICY_UPDATE_PEAKS[row]
    return peak - params - grads


def _slopes() -> dict:
    """(model, ckpt) -> bytes per token between the two measured budgets (world size 2)."""
    out = {}
    for (name, g, t, ckpt) in POLICY_UPDATE_PEAKS:
        others = [t2 for (n2, g2, t2, c2) in POLICY_UPDATE_PEAKS if (n2, g2, c2) == (name, g, ckpt) and t2 > t]
        if g == 2 and others:
            t2 = max(others)
            out[(name, ckpt)] = (policy_transient_gib((name, g, t2, ckpt))
                                 - policy_transient_gib((name, g, t, ckpt))) * 2 ** 30 / (t2 - t)
    return out


def _lines() -> dict:
    """(model, ckpt) -> (bytes per token, bytes at T = 0): the straight line through the model's two measured
    budgets on 2 GPUs (activations are linear in T), raised to cover its rows on 4 and 8 GPUs."""
    out = {}
    for (name, ckpt), slope in _slopes().items():
        rows = [r for r in POLICY_UPDATE_PEAKS if r[0] == name and r[3] == ckpt]
        out[(name, ckpt)] = (slope, max(policy_transient_gib(r) * 2 ** 30 - slope * r[2] for r in rows))
    return out


def _fit_policy() -> dict:
    """For a policy outside the table: bytes = T x (vocab_b x vocab + layer_b[ckpt] x hidden x layers)
    + fixed_b x vocab x hidden. vocab_b and layer_b by least squares over the measured slopes (layer_b kept
    >= 0: with checkpointing the log-prob temporaries dwarf the per-layer inputs), then both raised by the
    largest measured/fitted slope ratio and fixed_b set to the largest remainder, so the formula is at or
    above every measured row and grows with T at least as fast as every measured model."""
    slopes = _slopes()
    coef = {"layer_b": {}}
    for ckpt in (True, False):
        pts = [(POLICY_SHAPES[n], s) for (n, c), s in slopes.items() if c == ckpt]
        sxx = sum(v * v for (_, _, v), _ in pts)
        syy = sum((h * n) ** 2 for (n, h, _), _ in pts)
        sxy = sum(v * h * n for (n, h, v), _ in pts)
        sxs = sum(v * s for (_, _, v), s in pts)
        sys_ = sum(h * n * s for (n, h, _), s in pts)
        if ckpt:
            det = sxx * syy - sxy * sxy
            coef["vocab_b"] = (sxs * syy - sys_ * sxy) / det
            layer = (sys_ * sxx - sxs * sxy) / det
            if layer < 0:
                layer, coef["vocab_b"] = 0.0, sxs / sxx
        else:
            layer = max(0.0, (sys_ - coef["vocab_b"] * sxy) / syy)
        coef["layer_b"][ckpt] = layer

    def per_token(name, ckpt):
        n, h, v = POLICY_SHAPES[name]
        return coef["vocab_b"] * v + coef["layer_b"][ckpt] * h * n

    raise_by = max(s / per_token(name, ckpt) for (name, ckpt), s in slopes.items())
    coef["vocab_b"] *= raise_by
    coef["layer_b"] = {k: b * raise_by for k, b in coef["layer_b"].items()}
    coef["fixed_b"] = max(0.0, max(
        (policy_transient_gib(r) * 2 ** 30 - r[2] * per_token(r[0], r[3])) / (POLICY_SHAPES[r[0]][2] * POLICY_SHAPES[r[0]][1])
        for r in POLICY_UPDATE_PEAKS))
    return coef


POLICY_LINES = _lines()
POLICY_BYTES = _fit_policy()
_MEASURED_BY_SHAPE = {shape: name for name, shape in POLICY_SHAPES.items()}


def policy_update_transient_bytes(tokens: int, vocab: int, hidden: int, layers: int, checkpointing: bool) -> float:
    """Bytes a micro batch of `tokens` holds above the sharded params and grads: the measured line of a
    policy with these shapes (below the smallest measured budget, that budget's figure: the line's
    intercept is not measured and the figure only grows with T), else the fit over all measured policies."""
    name = _MEASURED_BY_SHAPE.get((layers, hidden, vocab))
    if name is not None:
        slope, at_zero = POLICY_LINES[(name, checkpointing)]
        return at_zero + slope * max(tokens, min(t for _, _, t, _ in POLICY_UPDATE_PEAKS))
    return policy_fit_bytes(tokens, vocab, hidden, layers, checkpointing)


def policy_fit_bytes(tokens: int, vocab: int, hidden: int, layers: int, checkpointing: bool) -> float:
    c = POLICY_BYTES
    return tokens * (c["vocab_b"] * vocab + c["layer_b"][checkpointing] * hidden * layers) + c["fixed_b"] * vocab * hidden


# AdamW's foreach step keeps a temporary list the size of the parameters it updates (the sqrt of exp_avg_sq;
# torch.optim docs: foreach "uses more peak memory" than the single-tensor loop): measured ratio to the shard
ADAM_STEP_TEMP_RATIO = max(t / p for p, _, t in POLICY_STEP_PEAKS.values())

# ---------------------------------------------------------------------------------------------------
# vLLM (vllm==0.24.0, what verl[vllm]==0.9.1 pins; envs/lock/train-gpu.txt). Before sizing its KV cache,
# vLLM takes from its share (gpu_memory_utilization x card) the weights, the activation peak of a profile
# run, the CUDA graphs it captures and non-torch allocations (vllm/v1/worker/gpu_worker.py
# determine_available_memory).
# Profile-run activation peak, measured by
#     .venv/bin/python benches/memory.py rollout --json       (about 1 minute)
# one forward of verl's max_num_batched_tokens 8192 tokens + fp32 logits and softmax for max_num_seqs 256
# rows, each tensor-parallel rank's shapes, FakeTensorMode + MemTracker.
# (model, tp): (weights GiB, activation peak GiB)
ROLLOUT_PROFILE_PEAKS = {
    ("qwen2.5_0.5b", 1): (0.920, 0.342),
    ("qwen2.5_0.5b", 2): (0.587, 0.304),
    ("qwen2.5_3b", 1): (5.748, 0.695),
    ("qwen2.5_3b", 2): (3.164, 0.443),
    ("qwen2.5_7b", 1): (14.185, 1.152),
    ("qwen2.5_7b", 2): (8.108, 0.719),
}
VLLM_PROFILE_PEAK_GB = max(peak for _, peak in ROLLOUT_PROFILE_PEAKS.values())
# CUDA graphs: counted inside gpu_memory_utilization since vLLM 0.21 ("CUDA graph memory profiling is
# enabled (default since v0.21.0)"); the published estimates are 0.36 GiB ("Estimated CUDA graph memory:
# 0.36 GiB total", vLLM 0.27.1 log in https://github.com/gpustack/runner/pull/251) and 0.21 GiB for
# Llama-3.2-1B ("Graph capturing finished in 14 secs, took 0.21 GiB",
# https://github.com/vllm-project/vllm/pull/11349); the larger one.
VLLM_CUDA_GRAPH_GB = 0.36
# Non-torch allocations (NCCL, cuBLAS workspaces) vLLM measures during its profile run: "non_torch_memory
# takes 0.15GiB" (vLLM's memory-profiling log in https://github.com/vllm-project/vllm/issues/15340).
VLLM_NON_TORCH_GB = 0.15

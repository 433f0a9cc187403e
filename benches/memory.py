"""Measured peak memory of the QE scorer's forward and of the policy update (issue 12, part 3).

Nothing is computed and no real weight is allocated: the stock model classes are built inside
torch's FakeTensorMode (tensors with shapes, dtypes and byte sizes but no storage) and run under
torch.distributed._tools.mem_tracker.MemTracker, which counts every tensor's bytes as the
allocator would see them (peak over the whole forward / step). A CPU torch build refuses fake
CUDA tensors, so the fake tensors live on "cpu": byte counts per tensor are the same as on CUDA.
What this cannot see (CUDA context, cuBLAS workspaces, allocator rounding/fragmentation, NCCL
buffers, vLLM's own overhead) is not in these numbers; src/plan/memory.py adds those from
published figures.

  scorer (scorer env):  .venv-scorer/bin/python benches/memory.py scorer
  metricx (scorer env): .venv-scorer/bin/python benches/memory.py metricx    # the metricx backend, mT5-XL/XXL
  policy (train env):   .venv/bin/python benches/memory.py policy     # FSDP2 update, AdamW step
  rollout (train env):  .venv/bin/python benches/memory.py rollout    # vLLM's profile-run peak

Each prints a markdown table (benches/RESULTS.md, "Memory (issue 12)") and, with --json, the
rows src/plan/memory_measured.py holds (policy, rollout) or the scorer backend's package does
(src/scorer/backends/comet/memory.py, src/scorer/backends/metricx/__init__.py).

--device cuda (scorer, policy): the same models and inputs with real tensors on a GPU (random
weights), measured by the caching allocator (torch.cuda.max_memory_allocated over the forward /
the second micro batch; reserved and the CUDA context beside it). The policy keeps the fake process
group: rank 0 of G ranks on one GPU, its collectives moving no data (issue 22 part 3).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GIB = 2 ** 30

# Encoder shapes of the real checkpoints (their config.json: XLM-R large / InfoXLM large,
# facebook/xlm-roberta-xl, facebook/xlm-roberta-xxl).
ENCODERS = {
    "xlmr-large": dict(xl=False, num_hidden_layers=24, hidden_size=1024, intermediate_size=4096,
                       num_attention_heads=16, vocab_size=250002),
    "xlmr-xl": dict(xl=True, num_hidden_layers=36, hidden_size=2560, intermediate_size=10240,
                    num_attention_heads=32, vocab_size=250880),
    "xlmr-xxl": dict(xl=True, num_hidden_layers=48, hidden_size=4096, intermediate_size=16384,
                     num_attention_heads=32, vocab_size=250880),
}
# conf/scorer/default.yaml name -> (comet class, encoder, extra hparams). Head sizes are those of
# the tiny fixture scaled up; the heads are <0.5% of the parameters either way.
SCORERS = {
    "cometkiwi_da": ("UnifiedMetric", "xlmr-large", dict(
        encoder_model="XLM-RoBERTa", sent_layer="mix", layer_transformation="sparsemax", layer_norm=True,
        word_layer=24, input_segments=["mt", "src"], word_level_training=False)),
    "comet_da": ("RegressionMetric", "xlmr-large", dict(
        encoder_model="XLM-RoBERTa", pool="avg", layer="mix", layer_transformation="softmax", layer_norm=False)),
    "xcomet_xl": ("XCOMETMetric", "xlmr-xl", dict(
        encoder_model="XLM-RoBERTa-XL", sent_layer="mix", layer_transformation="softmax", layer_norm=False,
        word_layer=36, error_labels=["minor", "major", "critical"])),
    # Unbabel/wmt23-cometkiwi-da-xl: CometKiwi's UnifiedMetric on the XL encoder
    "cometkiwi_xl": ("UnifiedMetric", "xlmr-xl", dict(
        encoder_model="XLM-RoBERTa-XL", sent_layer="mix", layer_transformation="sparsemax", layer_norm=True,
        word_layer=36, input_segments=["mt", "src"], word_level_training=False)),
    "xcomet_xxl": ("XCOMETMetric", "xlmr-xxl", dict(
        encoder_model="XLM-RoBERTa-XL", sent_layer="mix", layer_transformation="softmax", layer_norm=False,
        word_layer=48, error_labels=["minor", "major", "critical"])),
}
SEQ_LEN = 512          # COMET's max positions: the worst case of a padded batch
BUDGETS = (2048, 4096, 8192, 16384)


def _peak_bytes(fn, modules) -> int:
    from torch.distributed._tools.mem_tracker import MemTracker

    mt = MemTracker()
    for m in modules:
        mt.track_external(m)
    with mt:
        fn()
    snap = mt.get_tracker_snapshot("peak")
    return max(per_dev["Total"] for per_dev in snap.values())


def _cast_fake(module, dtype) -> None:
    """module.to(dtype) for fake parameters (Module._apply cannot swap a FakeTensor in place)."""
    import torch

    for m in module.modules():
        for name, p in list(m._parameters.items()):
            if p is not None and p.is_floating_point():
                m._parameters[name] = torch.nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
        for name, b in list(m._buffers.items()):
            if b is not None and b.is_floating_point():
                m._buffers[name] = b.to(dtype)


def _encoder_dir(tmp: Path, encoder: str) -> str:
    """Tokenizer of the tiny fixture + config.json with the real encoder's shapes: comet builds the
    encoder from this config (load_pretrained_weights=False), never from weights."""
    from transformers import XLMRobertaConfig, XLMRobertaXLConfig

    sys.path.insert(0, str(REPO))
    from tests.fixtures.build_tiny_comet import ensure_built

    tiny = ensure_built() / "encoders" / "xlmr-xl"
    out = tmp / encoder
    out.mkdir()
    for f in tiny.iterdir():
        if f.name not in ("config.json", "model.safetensors"):
            shutil.copy(f, out / f.name)
    shape = dict(ENCODERS[encoder])
    cls = XLMRobertaXLConfig if shape.pop("xl") else XLMRobertaConfig
    cls(max_position_embeddings=514, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        **shape).save_pretrained(str(out))
    return str(out)


def _each_scorer(models, tmp: Path):
    """(name, comet class name, encoder dir, hparams) per model, each encoder's dir written once."""
    dirs = {}
    for name in models:
        cls_name, encoder, kw = SCORERS[name]
        if encoder not in dirs:
            dirs[encoder] = _encoder_dir(tmp, encoder)
        yield name, cls_name, dirs[encoder], kw


def _comet_model(cm, cls_name: str, encoder_dir: str, kw: dict):
    """The stock comet class on the encoder dir's config (no pretrained weights loaded)."""
    return getattr(cm, cls_name)(
        nr_frozen_epochs=0.0, keep_embeddings_frozen=True, dropout=0.1, batch_size=8,
        load_pretrained_weights=False, local_files_only=True, pretrained_model=encoder_dir,
        hidden_sizes=[3072, 1024], activations="Tanh", final_activation=None, **kw)


def measure_scorer(models, budgets, dtypes) -> list[dict]:
    import comet.models as cm
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, cls_name, encoder_dir, kw in _each_scorer(models, Path(tmp)):
            for dtype in dtypes:
                with FakeTensorMode():
                    t0 = time.time()
                    model = _comet_model(cm, cls_name, encoder_dir, kw)
                    model.eval()
                    # as src/scorer/backends/comet/runner.py ModelRunner: encoder weights in 16 bit, heads fp32 + autocast
                    if dtype != "fp32":
                        _cast_fake(model.encoder, torch.bfloat16)
                    params = sum(p.numel() * p.element_size() for p in model.parameters())
                    for budget in budgets:
                        rows.append(dict(model=name, dtype=dtype, tokens=budget, seq_len=SEQ_LEN,
                                         weights_gib=params / GIB,
                                         peak_gib=_scorer_peak(model, cls_name, budget, dtype) / GIB,
                                         seconds=round(time.time() - t0, 1)))
                        rows[-1]["activations_gib"] = rows[-1]["peak_gib"] - rows[-1]["weights_gib"]
                        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                        t0 = time.time()
    return rows


def measure_scorer_cuda(models, budgets, dtypes, device: str = "cuda") -> list[dict]:
    """The rows of measure_scorer measured on a GPU: the model built there with random weights, the
    encoder cast as ModelRunner does, one padded batch of `tokens` tokens in rows of 512 (every row
    with one padded position, so the [B, 1, L, L] mask is materialised as in a service batch) under
    inference_mode + autocast; peak allocated minus the weights."""
    import comet.models as cm
    import torch

    torch.cuda.init()
    free0, total = torch.cuda.mem_get_info()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, cls_name, encoder_dir, kw in _each_scorer(models, Path(tmp)):
            for dtype in dtypes:
                t0 = time.time()
                with torch.device(device):
                    model = _comet_model(cm, cls_name, encoder_dir, kw)
                # comet makes some tensors on the CPU whatever the default device (the layer mix's)
                model.to(device).eval()
                if dtype != "fp32":
                    model.encoder.to(torch.bfloat16)
                torch.cuda.synchronize()
                weights = torch.cuda.memory_allocated()
                for budget in budgets:
                    b = max(1, budget // ((3 if cls_name == "RegressionMetric" else 1) * SEQ_LEN))
                    ids = torch.randint(5, 900, (b, SEQ_LEN), device=device)
                    mask = torch.ones_like(ids)
                    mask[:, -1] = 0
                    if cls_name == "RegressionMetric":
                        kw_in = {f"{sg}_{k}": v for sg in ("src", "mt", "ref")
                                 for k, v in (("input_ids", ids), ("attention_mask", mask))}
                    else:
                        kw_in = dict(input_ids=ids, attention_mask=mask)
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    with torch.inference_mode(), torch.autocast(torch.device(device).type, dtype=torch.bfloat16,
                                                                enabled=dtype != "fp32"):
                        model(**kw_in)
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated()
                    free, _ = torch.cuda.mem_get_info()
                    rows.append(dict(model=name, dtype=dtype, tokens=budget, seq_len=SEQ_LEN,
                                     weights_gib=weights / GIB, peak_gib=peak / GIB,
                                     activations_gib=(peak - weights) / GIB,
                                     reserved_gib=torch.cuda.max_memory_reserved() / GIB,
                                     # the process's device memory outside PyTorch's pool: context, cuBLAS
                                     outside_pool_gib=((free0 - free) - torch.cuda.memory_reserved()) / GIB,
                                     seconds=round(time.time() - t0, 1)))
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                    t0 = time.time()
                    del kw_in
                del model
                torch.cuda.empty_cache()
    return rows


def _scorer_peak(model, cls_name: str, budget: int, dtype: str) -> int:
    import contextlib

    import torch

    autocast = (contextlib.nullcontext() if dtype == "fp32"
                else torch.autocast(device_type="cpu", dtype=torch.bfloat16))
    if cls_name == "RegressionMetric":
        # one batch = src, mt and ref passes; the service's budget counts all three
        b = max(1, budget // (3 * SEQ_LEN))
        ids = torch.ones(b, SEQ_LEN, dtype=torch.long)
        kw = {f"{s}_{k}": v for s in ("src", "mt", "ref") for k, v in
              (("input_ids", ids), ("attention_mask", torch.ones_like(ids)))}
    else:
        # UnifiedMetric / XCOMET: one concatenated pass per input layout; predict_step runs the
        # layouts one after another, so one pass of `budget` tokens is the peak
        b = max(1, budget // SEQ_LEN)
        ids = torch.ones(b, SEQ_LEN, dtype=torch.long)
        kw = dict(input_ids=ids, attention_mask=torch.ones_like(ids))

    # MemTracker hooks every parameter's grad; frozen embeddings would refuse the hook. Under
    # inference_mode no grad is ever made, so this changes no byte.
    for prm in model.parameters():
        prm.requires_grad_(True)

    # transformers drops the SDPA mask when every token is real (`torch.all(mask == 1)`, a value a
    # fake tensor does not have); a service batch is padded, so take the padded branch, which
    # materialises the [B, 1, L, L] additive mask as a real batch does.
    import transformers.modeling_attn_mask_utils as mask_utils

    def run():
        saved = mask_utils.is_torchdynamo_compiling
        mask_utils.is_torchdynamo_compiling = lambda: True
        try:
            with torch.inference_mode(), autocast:
                model(**kw)
        finally:
            mask_utils.is_torchdynamo_compiling = saved
    return _peak_bytes(run, [model])


# MetricX-24 (the scorer's metricx backend): mT5 shapes of google/mt5-xl and google/mt5-xxl (config.json),
# which google/metricx-24-hybrid-{xl,xxl}-v2p6 are fine-tuned from
METRICX = {
    "metricx24_xl": dict(d_model=2048, d_kv=64, d_ff=5120, num_layers=24, num_decoder_layers=24, num_heads=32),
    "metricx24_xxl": dict(d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_decoder_layers=24, num_heads=64),
}
# MetricX-24's longest input (1536 tokens less the </s> its predict.py removes): the worst case of a padded
# batch, because mT5's eager attention holds [rows, heads, L, L] scores
METRICX_SEQ_LEN = 1535


def measure_metricx(models, budgets, dtypes) -> list[dict]:
    """One forward of src/scorer/backends/metricx/backend.py's MT5ForRegression (the encoder, one decoder step, the
    prediction's logit) on the real shapes, every weight in the dtype as the backend loads them, one padded
    batch of max(1, budget // 1535) rows of 1535 tokens, under inference_mode: FakeTensorMode + MemTracker."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import MT5Config

    sys.path.insert(0, str(REPO))
    from src.scorer.backends.metricx.backend import regression_model_class

    rows = []
    for name in models:
        for dtype in dtypes:
            with FakeTensorMode():
                t0 = time.time()
                cfg = MT5Config(vocab_size=250112, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                                dropout_rate=0.0, **METRICX[name])
                model = regression_model_class()(cfg).eval()
                if dtype != "fp32":
                    _cast_fake(model, torch.bfloat16)
                for prm in model.parameters():  # MemTracker hooks grads (none are made under inference_mode)
                    prm.requires_grad_(True)
                params = sum(p.numel() * p.element_size() for p in model.parameters())
                for budget in budgets:
                    ids = torch.ones(max(1, budget // METRICX_SEQ_LEN), METRICX_SEQ_LEN, dtype=torch.long)
                    mask = torch.ones_like(ids)

                    def run():
                        with torch.inference_mode():
                            model(ids, mask)
                    peak = _peak_bytes(run, [model])
                    rows.append(dict(model=name, dtype=dtype, tokens=budget, seq_len=METRICX_SEQ_LEN,
                                     weights_gib=params / GIB, peak_gib=peak / GIB,
                                     activations_gib=(peak - params) / GIB, seconds=round(time.time() - t0, 1)))
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                    t0 = time.time()
    return rows


# conf/model/*.yaml shapes (each model's config.json)
POLICIES = {
    "qwen2.5_0.5b": dict(num_hidden_layers=24, hidden_size=896, intermediate_size=4864, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5_3b": dict(num_hidden_layers=36, hidden_size=2048, intermediate_size=11008, num_attention_heads=16,
                       num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5_7b": dict(num_hidden_layers=28, hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
}
# (world size, micro-batch tokens, gradient checkpointing) measured per model, every row on the full layer
# count: with scaled layer counts the peak moves between the log-prob backward and the lm_head's
# unsharded weight + fp32 reduce-scatter from one row to the next, so a per-layer extrapolation is not
# linear. Two budgets per model (4096 and the plan's default 10240 = mu 8 x 1280) give the per-token
# slope; world sizes 4 and 8 show the part above the sharded state does not depend on G.
POLICY_GRID = ([(2, t, ckpt) for t in (4096, 10240) for ckpt in (True, False)]
               + [(g, 4096, True) for g in (4, 8)])
POLICY_COLS = ["model", "world_size", "layers", "tokens", "checkpointing", "sharded_param_gib", "sharded_grad_gib",
               "fsdp_buffers_gib", "activations_gib", "above_shards_gib", "peak_gib"]
STEP_COLS = ["model", "world_size", "params_b", "param_shard_gib", "grad_shard_gib", "adam_state_gib",
             "step_temp_gib", "step_peak_gib"]


def _fake_process_group(world_size: int, device: str = "cpu"):
    """Rank 0 of a `world_size` process group whose collectives do nothing (torch's "fake" backend), and a
    1-D "fsdp" mesh over it: what verl's create_device_mesh(world_size, fsdp_size=-1) builds
    (verl/workers/engine/fsdp/utils.py), on "cpu" because verl's own helper asks for "cuda" here."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    return init_device_mesh(device, (world_size,), mesh_dim_names=["fsdp"])


def _sharded_policy(name: str, layers, mesh, ckpt: bool):
    """The actor as verl 0.9.1 builds it (verl/workers/engine/fsdp/transformer_impl.py, _build_module and
    _build_fsdp_module with strategy fsdp2): fp32 weights (fsdp_config.model_dtype fp32), gradient
    checkpointing without reentrancy, verl's own apply_fsdp2 (each decoder layer, then the root) with
    MixedPrecisionPolicy(bf16 params, fp32 reduce) and reshard_after_forward=True. Call inside FakeTensorMode."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.utils.fsdp_utils import apply_fsdp2

    shape = dict(POLICIES[name], **({"num_hidden_layers": layers} if layers else {}))
    model = Qwen2ForCausalLM(Qwen2Config(attn_implementation="sdpa", **shape))
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True)
    apply_fsdp2(model, {"mesh": mesh, "mp_policy": mp, "offload_policy": None, "reshard_after_forward": True}, {})
    return model


def _categories(snapshot: dict) -> dict:
    (per_dev,) = snapshot.values()
    return {str(k).split(".")[-1].lower(): v for k, v in per_dev.items()}


def measure_policy_update(name: str, world_size: int, layers: int, tokens: int, ckpt: bool) -> dict:
    """Peak of a micro batch's forward + backward on rank 0 of an FSDP2 actor, under
    torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker with fake tensors and fake collectives.
    The step is verl's remove-padding path (FSDPEngineWithLMHead.prepare_model_outputs): one packed [1, T]
    sequence, logits [T, vocab] in bf16, verl.utils.torch_functional.logprobs_from_logits (here its torch
    fallback logprobs_from_logits_v2; a GPU node with flash-attn takes the in-place Triton cross-entropy,
    which keeps less, so this is the upper bound), the logits out of scope before backward as in verl."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from verl.utils.torch_functional import logprobs_from_logits

    mesh = _fake_process_group(world_size)
    t0 = time.time()
    with FakeTensorMode():
        model = _sharded_policy(name, layers, mesh, ckpt)
        ids = torch.ones(1, tokens, dtype=torch.long)
        pos = torch.arange(tokens).unsqueeze(0)

        def loss():
            logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits.squeeze(0)
            return -logprobs_from_logits(logits=logits, labels=ids.squeeze(0), inplace_backward=True).mean()

        # verl accumulates gradients over the micro batches of a mini batch, so from the second one on the
        # sharded grads exist during the whole forward + backward: measure that one (a short first one
        # outside the tracker leaves the grads behind)
        short = torch.ones(1, 256, dtype=torch.long)
        first = model(input_ids=short, position_ids=torch.arange(256).unsqueeze(0), use_cache=False).logits
        (-logprobs_from_logits(logits=first.squeeze(0), labels=short.squeeze(0)).mean()).backward()
        del first
        mt = FSDPMemTracker(model)
        mt.track_inputs((ids, pos))
        with mt:
            loss().backward()
        c = _categories(mt.get_tracker_snapshot("peak"))
    buffers = sum(c.get(k, 0) for k in ("unsharded_param", "unsharded_grad", "all_gather", "reduce_scatter"))
    return dict(model=name, world_size=world_size, layers=layers or POLICIES[name]["num_hidden_layers"],
                tokens=tokens, checkpointing=ckpt,
                sharded_param_gib=c.get("sharded_param", 0) / GIB, sharded_grad_gib=c.get("sharded_grad", 0) / GIB,
                fsdp_buffers_gib=buffers / GIB,
                activations_gib=sum(c.get(k, 0) for k in ("act", "temp", "inp")) / GIB,
                above_shards_gib=(c["total"] - c.get("sharded_param", 0) - c.get("sharded_grad", 0)) / GIB,
                peak_gib=c["total"] / GIB, seconds=round(time.time() - t0, 1))


def measure_optimizer_step(name: str, world_size: int) -> dict:
    """Peak of rank 0's AdamW step over its shards of the full model. verl's build_optimizer
    (verl/workers/config/optimizer.py) makes torch.optim.AdamW with foreach left to torch, which takes the
    foreach path for CUDA tensors; foreach=True here. The shards are plain tensors of each parameter's
    local FSDP shard (what verl's default strategy fsdp, FSDP1 flat parameters, hands the optimizer): under
    fake tensors the DTensor step of FSDP2 reports temporaries of ~13x the shard (DTensor's foreach
    sharding propagation), which a real step does not allocate."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from verl.workers.config.optimizer import FSDPOptimizerConfig, build_optimizer

    mesh = _fake_process_group(world_size)
    with FakeTensorMode():
        sharded = _sharded_policy(name, None, mesh, ckpt=False)
        n = sum(p.numel() for p in sharded.parameters())
        shards = [torch.nn.Parameter(torch.empty_like(p.to_local())) for p in sharded.parameters()]
        del sharded
        for p in shards:
            p.grad = torch.zeros_like(p)
        opt = build_optimizer(shards, FSDPOptimizerConfig(lr=1e-6, override_optimizer_config={"foreach": True}))
        opt.step()  # states exist from the first step on; the steady-state step is the second
        mt = MemTracker()
        mt.track_external(*shards, *[p.grad for p in shards], opt)  # grads count only when named
        with mt:
            opt.step()
        c = _categories(mt.get_tracker_snapshot("peak"))
        shard_bytes = sum(p.numel() * p.element_size() for p in shards)
        state_bytes = sum(v.numel() * v.element_size() for s in opt.state.values() for k, v in s.items()
                          if k != "step")
    return dict(model=name, world_size=world_size, params_b=round(n / 1e9, 3), param_shard_gib=shard_bytes / GIB,
                grad_shard_gib=shard_bytes / GIB, adam_state_gib=state_bytes / GIB,
                step_temp_gib=(c["total"] - 2 * shard_bytes - state_bytes) / GIB, step_peak_gib=c["total"] / GIB)


ROLLOUT_COLS = ["model", "tp", "tokens", "seqs", "weights_gib", "activation_peak_gib"]


def measure_rollout_profile(name: str, tp: int, tokens: int = 8192, seqs: int = 256) -> dict:
    """Activation peak of vLLM's memory profile, which it subtracts from its share before sizing the KV
    cache (vllm/v1/worker/gpu_worker.py determine_available_memory: profile_run = one dummy forward of
    max_num_batched_tokens tokens, then the sampler on max_num_seqs rows of fp32 logits). verl 0.9.1's
    rollout defaults: max_num_batched_tokens 8192, max_num_seqs 256 (trainer/config/rollout/rollout.yaml).
    vLLM is not installed on CPU: the same math runs through transformers' Qwen2 in bf16 under
    inference_mode with each tensor-parallel rank's shapes (heads, KV heads and FFN divided by tp)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = dict(POLICIES[name])
    for k in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        shape[k] = max(1, shape[k] // tp)
    shape["head_dim"] = POLICIES[name]["hidden_size"] // POLICIES[name]["num_attention_heads"]
    with FakeTensorMode():
        torch.set_default_dtype(torch.bfloat16)
        try:
            model = Qwen2ForCausalLM(Qwen2Config(attn_implementation="sdpa", **shape)).eval()
        finally:
            torch.set_default_dtype(torch.float32)
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        ids = torch.ones(1, tokens, dtype=torch.long)
        pos = torch.arange(tokens).unsqueeze(0)

        def profile_run():
            with torch.inference_mode():
                hidden = model.model(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state
                logits = model.lm_head(hidden[0, -seqs:]).float()
                torch.softmax(logits, dim=-1)

        mt = MemTracker()
        mt.track_external(model)
        with mt:
            profile_run()
        c = _categories(mt.get_tracker_snapshot("peak"))
    return dict(model=name, tp=tp, tokens=tokens, seqs=seqs, weights_gib=weights / GIB,
                activation_peak_gib=(c["total"] - weights) / GIB)


def measure_policy_update_cuda(name: str, world_size: int, tokens: int, ckpt: bool, device: str = "cuda") -> dict:
    """measure_policy_update with real tensors on a GPU: rank 0 of the same FSDP2 actor (fake process
    group, random weights), the same packed micro batch after a short first one, peak allocated over
    the second micro batch's forward + backward."""
    import torch
    from verl.utils.torch_functional import logprobs_from_logits

    mesh = _fake_process_group(world_size, device)
    t0 = time.time()
    torch.cuda.empty_cache()
    with torch.device(device):
        model = _sharded_policy(name, None, mesh, ckpt)
    vocab = POLICIES[name]["vocab_size"]
    ids = torch.randint(0, vocab, (1, tokens), device=device)
    pos = torch.arange(tokens, device=device).unsqueeze(0)
    short = torch.randint(0, vocab, (1, 256), device=device)
    first = model(input_ids=short, position_ids=torch.arange(256, device=device).unsqueeze(0), use_cache=False).logits
    (-logprobs_from_logits(logits=first.squeeze(0), labels=short.squeeze(0)).mean()).backward()
    del first
    torch.cuda.synchronize()
    shard_p = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    shard_g = sum(p.grad.to_local().numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    torch.cuda.reset_peak_memory_stats()
    logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits.squeeze(0)
    loss = -logprobs_from_logits(logits=logits, labels=ids.squeeze(0), inplace_backward=True).mean()
    del logits
    loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    row = dict(model=name, world_size=world_size, layers=POLICIES[name]["num_hidden_layers"], tokens=tokens,
               checkpointing=ckpt, sharded_param_gib=shard_p / GIB, sharded_grad_gib=shard_g / GIB,
               above_shards_gib=(peak - shard_p - shard_g) / GIB, peak_gib=peak / GIB,
               reserved_gib=torch.cuda.max_memory_reserved() / GIB, seconds=round(time.time() - t0, 1))
    del model, loss
    torch.cuda.empty_cache()
    return row


def measure_optimizer_step_cuda(name: str, world_size: int, device: str = "cuda") -> dict:
    """measure_optimizer_step on a GPU: plain shards of each parameter's rank-0 FSDP shard, verl's
    build_optimizer (AdamW, foreach as torch picks on CUDA), peak allocated over the second step."""
    import torch
    from verl.workers.config.optimizer import FSDPOptimizerConfig, build_optimizer

    mesh = _fake_process_group(world_size, device)
    with torch.device(device):
        sharded = _sharded_policy(name, None, mesh, ckpt=False)
    n = sum(p.numel() for p in sharded.parameters())
    shards = [torch.nn.Parameter(p.to_local().detach().clone()) for p in sharded.parameters()]
    del sharded
    torch.cuda.empty_cache()
    for p in shards:
        p.grad = torch.randn_like(p) * 1e-3
    opt = build_optimizer(shards, FSDPOptimizerConfig(lr=1e-6))
    opt.step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    opt.step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    shard_bytes = sum(p.numel() * p.element_size() for p in shards)
    state_bytes = sum(v.numel() * v.element_size() for s in opt.state.values() for k, v in s.items() if k != "step")
    row = dict(model=name, world_size=world_size, params_b=round(n / 1e9, 3), param_shard_gib=shard_bytes / GIB,
               grad_shard_gib=shard_bytes / GIB, adam_state_gib=state_bytes / GIB,
               step_temp_gib=(peak - 2 * shard_bytes - state_bytes) / GIB, step_peak_gib=peak / GIB)
    del opt, shards
    torch.cuda.empty_cache()
    return row


def measure_policy(models, grid=POLICY_GRID, world_sizes=(2, 4, 8)) -> tuple[list[dict], list[dict]]:
    updates, steps = [], []
    for name in models:
        for g, t, ckpt in grid:
            updates.append(measure_policy_update(name, g, None, t, ckpt))
            print(json.dumps(updates[-1]), file=sys.stderr, flush=True)
        for g in world_sizes:
            steps.append(measure_optimizer_step(name, g))
            print(json.dumps(steps[-1]), file=sys.stderr, flush=True)
    return updates, steps


def _table(rows, cols) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=("scorer", "metricx", "policy", "rollout"))
    p.add_argument("--models", nargs="*", default=None)
    p.add_argument("--budgets", nargs="*", type=int, default=list(BUDGETS), help="scorer: batch token budgets")
    p.add_argument("--dtypes", nargs="*", default=["bf16", "fp32"])
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.add_argument("--device", default="cpu", help="cpu: fake tensors (no GPU); cuda: real tensors on the GPU")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    p.add_argument("--grid", nargs="*", default=None,
                   help="policy: G:T:ckpt triples, e.g. 2:10240:1 (default: the measured grid)")
    a = p.parse_args(argv)
    if a.what == "scorer":
        if a.device == "cpu":
            rows = measure_scorer(a.models or list(SCORERS), a.budgets, a.dtypes)
            cols = ["model", "dtype", "tokens", "weights_gib", "activations_gib", "peak_gib"]
        else:
            rows = measure_scorer_cuda(a.models or list(SCORERS), a.budgets, a.dtypes, a.device)
            cols = ["model", "dtype", "tokens", "weights_gib", "activations_gib", "peak_gib", "reserved_gib",
                    "outside_pool_gib"]
        print(json.dumps(rows, indent=1) if a.json else _table(rows, cols))
        return 0
    if a.what == "metricx":
        rows = measure_metricx(a.models or list(METRICX), a.budgets, a.dtypes)
        print(json.dumps(rows, indent=1) if a.json else
              _table(rows, ["model", "dtype", "tokens", "weights_gib", "activations_gib", "peak_gib"]))
        return 0
    grid = ([tuple(int(x) for x in g.split(":")) for g in a.grid] if a.grid else POLICY_GRID)
    grid = [(g, t, bool(c)) for g, t, c in grid]
    if a.what == "policy" and a.device != "cpu":
        if a.one:  # one row in this process (the caller below starts one process per row)
            kind, name, g, t, ckpt = a.one.split(":")
            row = (measure_policy_update_cuda(name, int(g), int(t), ckpt == "1", a.device) if kind == "update"
                   else measure_optimizer_step_cuda(name, int(g), a.device))
            print(json.dumps(row))
            return 0
        # Each row in a fresh process: in one process the rows after the first two held ~11.5 GiB more
        # per earlier model (its shards outlived `del`), so later peaks read high (seen on an H200).
        updates, steps = [], []
        for name in a.models or ["qwen2.5_3b"]:
            jobs = ([("update", g, t, ckpt) for g, t, ckpt in grid]
                    + [("step", g, 0, False) for g in sorted({g for g, _, _ in grid})])
            for kind, g, t, ckpt in jobs:
                res = subprocess.run([sys.executable, __file__, "policy", "--device", a.device,
                                      "--one", f"{kind}:{name}:{g}:{t}:{int(ckpt)}"], capture_output=True, text=True)
                lines = res.stdout.strip().splitlines()
                row = (json.loads(lines[-1]) if res.returncode == 0 and lines else
                       dict(model=name, world_size=g, tokens=t, checkpointing=ckpt, error=res.stderr.strip()[-300:]))
                (updates if kind == "update" else steps).append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        print(json.dumps({"updates": updates, "steps": steps}, indent=1))
        return 0
    if a.what == "rollout":
        rows = [measure_rollout_profile(name, tp) for name in a.models or list(POLICIES) for tp in (1, 2)]
        print(json.dumps(rows, indent=1) if a.json else _table(rows, ROLLOUT_COLS))
        return 0
    updates, steps = measure_policy(a.models or list(POLICIES))
    if a.json:
        print(json.dumps({"updates": updates, "steps": steps}, indent=1))
    else:
        print(_table(updates, POLICY_COLS) + "\n\n" + _table(steps, STEP_COLS))
    return 0


if __name__ == "__main__":
    sys.exit(main())

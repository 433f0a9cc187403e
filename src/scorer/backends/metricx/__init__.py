"""The MetricX-24 backend (kind `metricx`): google/metricx-24-hybrid-*-v2p6, an mT5 regression model.

Its descriptor (below, stdlib only): an error score in [0, 25], lower is better, QE mode without
`ref` and reference mode with it; the plan's memory formula from the figures measured here.
backend.py resolves, loads and runs the model (torch and transformers imported only to load it).
"""
from __future__ import annotations

from src.scorer.backends.descriptor import Descriptor, KindInfo, OwnMetric, ScorerMemory
from src.scorer.vocabulary import Scale

# Peak of one forward of this backend's MT5ForRegression (backend.py) (the mT5 encoder, one decoder step, one logit) on the real mT5-XL and mT5-XXL
# shapes (google/mt5-xl, google/mt5-xxl config.json: d_model 2048 / 4096, d_ff 5120 / 10240, 24 + 24
# layers, 32 / 64 heads, vocab 250112), all weights in the dtype (the backend loads the whole model in
# it); one padded batch of max(1, tokens // 1535) rows of METRICX_SEQ_LEN tokens, FakeTensorMode +
# MemTracker (byte counts of every live tensor at the peak). Regenerate (about 6 minutes on 2 cores) with
#     .venv-scorer/bin/python benches/memory.py metricx
# Rows of the longest input are the worst case for a budget: mT5's attention is eager (transformers
# 4.57 MT5Attention has no SDPA path) and materialises [rows, heads, L, L] scores, their fp32 softmax and
# the position bias, so per token the activations grow with L x heads. Measured they are exactly
# tokens x heads x L x c (c below, the same for XL and XXL at every budget). The same forward on an H200
# with real tensors and random weights (torch 2.11, transformers 5.17, issue 25) allocated 8.74 GiB (XL,
# bf16, 16384 tokens), 10.25 GiB (XL, fp32) and 17.39 GiB (XXL, bf16) above the weights.
# (model, dtype, tokens): (weights GiB, activations GiB at the forward's peak)
METRICX_PEAKS = {
    ("metricx24_xl", "bf16", 4096): (6.971, 1.756),
    ("metricx24_xl", "bf16", 8192): (6.971, 4.389),
    ("metricx24_xl", "bf16", 16384): (6.971, 8.778),
    ("metricx24_xl", "fp32", 2048): (13.942, 1.194),
    ("metricx24_xl", "fp32", 4096): (13.942, 2.388),
    ("metricx24_xl", "fp32", 8192): (13.942, 5.969),
    ("metricx24_xl", "fp32", 16384): (13.942, 11.938),
    ("metricx24_xxl", "bf16", 4096): (24.067, 3.511),
    ("metricx24_xxl", "bf16", 8192): (24.067, 8.778),
    ("metricx24_xxl", "bf16", 16384): (24.067, 17.556),
    ("metricx24_xxl", "fp32", 2048): (48.135, 2.388),
    ("metricx24_xxl", "fp32", 4096): (48.135, 4.775),
    ("metricx24_xxl", "fp32", 8192): (48.135, 11.938),
    ("metricx24_xxl", "fp32", 16384): (48.135, 23.876),
}
# the measured rows' length: MetricX-24's longest input, 1536 tokens with </s> less the </s> it removes
# (backend.py MAX_INPUT_LENGTH - 1)
METRICX_SEQ_LEN = 1535
# attention heads of the measured models (benches/memory.py METRICX)
METRICX_HEADS = {"metricx24_xl": 32, "metricx24_xxl": 64}


def _metricx_bytes_per_head_position(dtype: str) -> float:
    ratios = [acts * 2 ** 30 / (max(1, tokens // METRICX_SEQ_LEN) * METRICX_SEQ_LEN * METRICX_HEADS[name]
                                * METRICX_SEQ_LEN)
              for (name, d, tokens), (_, acts) in METRICX_PEAKS.items() if d == dtype]
    return max(ratios)


# bytes per token per head per position of its row: about 12.5 B in bf16, 17.0 B in fp32
METRICX_BYTES_PER_HEAD_POSITION = {"bf16": _metricx_bytes_per_head_position("bf16"),
                                   "fp32": _metricx_bytes_per_head_position("fp32")}


def activation_bytes(shape, dtype: str, batch_tokens: int) -> float:
    """max(T_s, L) x heads x L x c: the batcher keeps rows x longest row <= the budget, except a
    lone longest item, and mT5's eager attention holds [rows, heads, L, L] scores."""
    return max(batch_tokens, METRICX_SEQ_LEN) * shape.heads * METRICX_SEQ_LEN * METRICX_BYTES_PER_HEAD_POSITION[dtype]


DESCRIPTOR = Descriptor(
    name="metricx",
    # the hybrid models read the reference when an item has one: "optional"; the worst score for an empty MT
    kinds={"metricx": KindInfo("MT5ForRegression", "optional", False, empty_mt_score=25.0)},
    # weights: the whole model in the dtype, nothing above params x bytes (METRICX_PEAKS)
    memory=ScorerMemory(weights_extra_gb=0.0, activation_bytes=activation_bytes),
    # models.<name>.tokenizer: the mT5 tokenizer (google/mt5-xl for every MetricX-24 size, as
    # metricx24/predict.py --tokenizer); unset, the model dir must hold one
    spec_keys=("tokenizer",),
    # an HF model dir: its config (the weights' file names vary: backend.WEIGHT_FILES, checked at load)
    model_files=("config.json",),
    # MetricX-24 predicts an MQM-like error score, clipped to [0, 25] (metricx24/models.py
    # MT5ForRegression.forward: `torch.clamp(predictions, 0, 25)`): 0 is no error, LOWER IS BETTER.
    # The service returns it raw; the reward turns it into 1 - score/25 (backends.unit_score).
    # Not evaluated unless asked: its checkpoints (3.7B / 13B, plus the mT5 tokenizer) are optional downloads.
    metric=OwnMetric(name="metricx", label="MetricX-24", scale=Scale(0.0, 25.0, False),
                     example_model="metricx24_xl", evaluated_by_default=False),
)

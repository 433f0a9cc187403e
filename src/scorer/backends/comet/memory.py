"""The comet backend's memory formula for the plan, from measured figures (benches/memory.py scorer).

SCORER_PEAKS: peak of one forward of the stock unbabel-comet 2.2.7 model classes (UnifiedMetric
for CometKiwi, RegressionMetric for COMET-DA, XCOMETMetric) on the real encoder shapes, under
torch.inference_mode, encoder weights in bf16 + autocast (what runner.py does) or all
fp32; one padded batch of `tokens` tokens in rows of 512 (COMET's max positions: the worst case
for a budget). Measured without a GPU and without materialising a weight: FakeTensorMode +
torch.distributed._tools.mem_tracker.MemTracker (byte counts of every live tensor at the peak).
Regenerate (about 5 minutes on 2 cores) with
    .venv-scorer/bin/python benches/memory.py scorer
The table is in benches/RESULTS.md, "Memory (issue 12)".

Activations are linear in the token budget for every model (the table doubles with the budget),
and per token they are hidden x (layers + 1) x c bytes: comet keeps every encoder layer's hidden
states and its layer mix builds an fp32 copy of each (comet/modules/layerwise_attention.py).
SCORER_BYTES_PER_HIDDEN fits c as the largest ratio measured, so the fit is never below a
measured row; scorer_bytes_per_hidden gives a measured encoder shape its own ratio.

The bf16 rows at 4096, 8192 and 16384 tokens marked "H200" were measured on an NVIDIA H200 (issue 22,
benches/RESULTS.md "Measured on a GPU"; benches/gpu/scorer_memory.json) with real tensors and the
caching allocator's peak:
    .venv-scorer/bin/python benches/memory.py scorer --device cuda --dtypes bf16 --budgets 4096 8192 16384 --json
They replace the fake-tensor rows: for XLM-R large (CometKiwi, COMET-DA) the GPU's activations were 32%
above the fake-tensor count (more than the 10% the issue allows), for XLM-R XL/XXL within 2.3%. The
fake-tensor bf16 rows at 2048 tokens went with them (not run on the GPU; activations are linear in
the budget, so 2048 is half of 4096); every fp32 row is still the fake-tensor measurement.
"""
from __future__ import annotations

# (model, dtype, tokens): (weights GiB, activations GiB at the forward's peak)
SCORER_PEAKS = {
    ("cometkiwi_da", "bf16", 4096): (1.098, 0.813),  # H200
    ("cometkiwi_da", "bf16", 8192): (1.098, 1.625),  # H200
    ("cometkiwi_da", "bf16", 16384): (1.098, 3.250),  # H200
    ("cometkiwi_da", "fp32", 2048): (2.105, 0.406),
    ("cometkiwi_da", "fp32", 4096): (2.105, 0.813),
    ("cometkiwi_da", "fp32", 8192): (2.105, 1.625),
    ("cometkiwi_da", "fp32", 16384): (2.105, 3.250),
    ("comet_da", "bf16", 4096): (1.156, 0.203),  # H200
    ("comet_da", "bf16", 8192): (1.156, 0.509),  # H200
    ("comet_da", "bf16", 16384): (1.156, 1.016),  # H200
    ("comet_da", "fp32", 2048): (2.164, 0.102),
    ("comet_da", "fp32", 4096): (2.164, 0.203),
    ("comet_da", "fp32", 8192): (2.164, 0.508),
    ("comet_da", "fp32", 16384): (2.164, 1.016),
    ("xcomet_xl", "bf16", 4096): (6.586, 2.298),  # H200
    ("xcomet_xl", "bf16", 8192): (6.586, 4.564),  # H200
    ("xcomet_xl", "bf16", 16384): (6.586, 9.095),  # H200
    ("xcomet_xl", "fp32", 2048): (12.990, 1.484),
    ("xcomet_xl", "fp32", 4096): (12.990, 2.969),
    ("xcomet_xl", "fp32", 8192): (12.990, 5.938),
    ("xcomet_xl", "fp32", 16384): (12.990, 11.875),
    ("xcomet_xxl", "bf16", 4096): (20.014, 4.750),  # H200
    ("xcomet_xxl", "bf16", 8192): (20.014, 9.500),  # H200
    ("xcomet_xxl", "bf16", 16384): (20.014, 19.000),  # H200
    ("xcomet_xxl", "fp32", 2048): (39.904, 3.125),
    ("xcomet_xxl", "fp32", 4096): (39.904, 6.250),
    ("xcomet_xxl", "fp32", 8192): (39.904, 12.500),
    ("xcomet_xxl", "fp32", 16384): (39.904, 25.000),
}
# encoder (layers, hidden) of the measured models (benches/memory.py ENCODERS)
SCORER_ENCODERS = {"cometkiwi_da": (24, 1024), "comet_da": (24, 1024), "xcomet_xl": (36, 2560),
                   "xcomet_xxl": (48, 4096)}


def _bytes_per_hidden(dtype: str) -> float:
    ratios = [acts * 2 ** 30 / (tokens * hidden * (layers + 1))
              for (name, d, tokens), (_, acts) in SCORER_PEAKS.items() if d == dtype
              for layers, hidden in [SCORER_ENCODERS[name]]]
    return max(ratios)


# What a comet model's weights hold on a GPU beyond params x bytes (conf/scorer params_b): its fp32
# heads (the estimator's 3072 x 1024 MLP over 1 to 6 pooled features, the word-level tag head) and the
# caching allocator's rounding. H200 rows minus params_b x 2 B: COMET-DA 1.156 - 1.080 = 0.076,
# CometKiwi 1.098 - 1.062 = 0.036, XCOMET-XL 6.586 - 6.519 = 0.067, XXL 20.014 - 19.930 = 0.084 GiB;
# the largest, rounded up, per model.
SCORER_WEIGHTS_EXTRA_GB = 0.085

# bytes per token per hidden unit per kept layer (embeddings + each layer); 16-bit runs use bf16's row
SCORER_BYTES_PER_HIDDEN = {"bf16": _bytes_per_hidden("bf16"), "fp32": _bytes_per_hidden("fp32")}


def scorer_bytes_per_hidden(dtype: str, layers: int, hidden: int) -> float:
    """c for an encoder of `layers` x `hidden`: the largest ratio measured on that shape (the models
    sharing an encoder differ in their heads), else the largest over every measured shape. One constant
    for all would size XCOMET-XL by XLM-R large's ratio, 32% above its measured activations."""
    ratios = [acts * 2 ** 30 / (tokens * hidden * (layers + 1))
              for (name, d, tokens), (_, acts) in SCORER_PEAKS.items()
              if d == dtype and SCORER_ENCODERS[name] == (layers, hidden)]
    return max(ratios) if ratios else SCORER_BYTES_PER_HIDDEN[dtype]


def activation_bytes(shape, dtype: str, batch_tokens: int) -> float:
    """One batch of `batch_tokens` padded tokens through a comet model of `shape` (its encoder's
    layers and hidden): T_s x hidden x (layers + 1) x c, c measured (scorer_bytes_per_hidden)."""
    return batch_tokens * shape.hidden * (shape.layers + 1) * scorer_bytes_per_hidden(dtype, shape.layers, shape.hidden)

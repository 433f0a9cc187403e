"""The unbabel-comet backend: every comet kind, scored by comet's own model classes.

Its descriptor (below, stdlib only); backend.py resolves and loads a checkpoint (loading.py), runner.py
scores with it, decode.py decodes xCOMET's error spans, words.py tags words OK/BAD; memory.py holds
the measured figures the plan sizes it by.
"""
from __future__ import annotations

from src.scorer.backends.comet import memory
from src.scorer.backends.descriptor import Descriptor, KindInfo, ScorerMemory

DESCRIPTOR = Descriptor(
    name="comet",
    # what each kind of comet checkpoint can do; its metric follows from what it reads (KindInfo.metric)
    kinds={
        "comet-da": KindInfo("regression_metric", "required", False),  # wmt22-comet-da
        "referenceless": KindInfo("referenceless_regression_metric", "ignored", False),
        "cometkiwi": KindInfo("unified_metric", "ignored", False),  # wmt22/23-cometkiwi-da(-xl)
        "unified": KindInfo("unified_metric", "optional", True),  # unified + word-level head
        "xcomet": KindInfo("xcomet_metric", "optional", True),  # XCOMET-XL / XCOMET-XXL
    },
    memory=ScorerMemory(weights_extra_gb=memory.SCORER_WEIGHTS_EXTRA_GB,
                        activation_bytes=memory.activation_bytes),
    # models.<name>.encoder: the encoder's config + tokenizer dir, overriding the checkpoint's own
    spec_keys=("encoder",),
    # a checkpoint dir as comet saves it (a path may also name the .ckpt itself): loading.resolve_checkpoint
    model_files=("checkpoints/model.ckpt", "hparams.yaml"),
)

"""The comet backend's entry (its descriptor's `entry`): resolve and load for every comet kind.

loading.py finds and loads the checkpoint with comet's own classes, offline; runner.py (ModelRunner)
is the persistent inference loop (comet's prepare_for_inference and predict_step per batch, the
fixed span decoding of decode.py, word tags of words.py).
"""
from __future__ import annotations

from pathlib import Path

from src.scorer.config import ModelSpec
from src.scorer.backends.comet.loading import load_comet_model, resolve_checkpoint


def resolve(name: str, spec: ModelSpec) -> Path:
    """The model.ckpt file (hparams.yaml two levels up); stdlib + huggingface_hub only."""
    return resolve_checkpoint(name, spec)


def load(name: str, spec: ModelSpec, files: Path, device: str, dtype: str):
    from src.scorer.backends.comet.runner import ModelRunner

    return ModelRunner(name, spec, load_comet_model(name, spec, files), device=device, dtype=dtype)

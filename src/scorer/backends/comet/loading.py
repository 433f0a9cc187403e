"""The comet backend's loading: finding and loading comet checkpoints, offline, with one-line errors.

`resolve_checkpoint` is stdlib-only (plus huggingface_hub for "hf:" paths) so a missing model
is reported before the ~10 s comet/torch import. The caller must have set HF_HUB_OFFLINE=1
before anything imports transformers: without it a missing encoder retries the hub for
minutes and then fails with an unrelated AttributeError.
"""
from __future__ import annotations

import os
from pathlib import Path
import yaml

from src.scorer.backends import KINDS
from src.scorer.backends.files import hf_cache_hint, local_model_dir
from src.scorer.backends.interface import StartupError
from src.scorer.config import HF_PREFIX, ModelSpec


def resolve_checkpoint(name: str, spec: ModelSpec) -> Path:
    """models.<name>.path -> the model.ckpt file (with hparams.yaml two levels up)."""
    raw = spec.path
    base = local_model_dir(name, spec)
    if raw.startswith(HF_PREFIX):
        ckpt = base / "checkpoints" / "model.ckpt"
    else:
        ckpt = base if base.suffix == ".ckpt" else base / "checkpoints" / "model.ckpt"
    if not ckpt.is_file():
        looked = str(ckpt) if ckpt == base else f"{ckpt} (models.{name}.path: {raw})"
        raise StartupError(f"model {name!r}: checkpoint not found: {looked}")
    hparams = ckpt.parents[1] / "hparams.yaml"
    if not hparams.is_file():
        raise StartupError(f"model {name!r}: {hparams} is missing (comet needs it next to "
                           f"checkpoints/ to know the model class)")
    return ckpt


def _read_hparams(name: str, ckpt: Path) -> dict:
    hp_file = ckpt.parents[1] / "hparams.yaml"
    try:
        hp = yaml.safe_load(hp_file.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise StartupError(f"model {name!r}: cannot read {hp_file}: {e}") from None
    if not isinstance(hp, dict) or "class_identifier" not in hp:
        raise StartupError(f"model {name!r}: {hp_file} has no class_identifier")
    return hp


def _looks_like_path(s: str) -> bool:
    return os.path.isabs(s) or s.startswith((".", "~")) or os.path.exists(os.path.expanduser(s))


def _check_encoder(name: str, encoder: str, source: str) -> str:
    """The encoder's config + tokenizer must be local: a directory, or a hub name whose files
    are already in the HF cache."""
    if _looks_like_path(encoder):
        path = Path(encoder).expanduser()
        if not (path / "config.json").is_file():
            raise StartupError(f"model {name!r}: encoder directory not found or has no "
                               f"config.json: {path} ({source})")
        return str(path)
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(encoder, "config.json"), str):
        raise StartupError(
            f"model {name!r}: encoder {encoder!r} ({source}) is not in the local Hugging Face "
            f"cache ({hf_cache_hint()}); set models.{name}.encoder to a local directory "
            f"with its config.json and tokenizer files")
    return encoder


def load_comet_model(name: str, spec: ModelSpec, ckpt: Path):
    """Loads the checkpoint on CPU with comet's own classes, never fetching anything."""
    hp = _read_hparams(name, ckpt)
    expected = KINDS[spec.kind].class_identifier
    if hp["class_identifier"] != expected:
        raise StartupError(f"model {name!r}: kind {spec.kind!r} expects a {expected} checkpoint "
                           f"but {ckpt} is a {hp['class_identifier']}")
    if spec.encoder:
        encoder = _check_encoder(name, spec.encoder, f"models.{name}.encoder")
    else:
        encoder = _check_encoder(name, str(hp.get("pretrained_model", "")),
                                 "the checkpoint's pretrained_model")

    from comet.models import str2model

    kwargs = dict(checkpoint_path=str(ckpt), load_pretrained_weights=False, hparams_file=None,
                  map_location="cpu", strict=False, local_files_only=True)
    if hp.get("layer_transformation") == "sparsemax_patch":
        kwargs["layer_transformation"] = "softmax"  # same workaround as comet.load_from_checkpoint
    if spec.encoder:
        kwargs["pretrained_model"] = encoder
    try:
        model = str2model[hp["class_identifier"]].load_from_checkpoint(**kwargs)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise StartupError(f"model {name!r}: loading {ckpt} failed: {type(e).__name__}: "
                           f"{first}") from None
    _check_kind_matches(name, spec, model)
    return model


def _check_kind_matches(name: str, spec: ModelSpec, model) -> None:
    word_level = bool(getattr(model, "word_level", False))
    if word_level != spec.word_level:
        other = "unified" if word_level else "cometkiwi"
        raise StartupError(f"model {name!r}: kind {spec.kind!r} but the checkpoint "
                           f"{'has' if word_level else 'has no'} word-level head; use kind {other!r}")


"""Where a model's files are, for every backend: models.<name>.path as a local path, "hf:Org/Name"
from the local Hugging Face cache only (the service runs with HF_HUB_OFFLINE=1).

Stdlib, plus huggingface_hub for "hf:" paths: a missing model is reported before torch is imported.
"""
from __future__ import annotations

import os
from pathlib import Path

from src.scorer.backends.interface import StartupError
from src.scorer.config import HF_PREFIX, ModelSpec


def hf_cache_hint() -> str:
    """The Hugging Face cache dir as the user set it, for error lines."""
    return os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME") or "~/.cache/huggingface"


def local_model_dir(name: str, spec: ModelSpec) -> Path:
    """models.<name>.path as a local path: "hf:Org/Name" from the local Hugging Face cache only
    (StartupError when it is not there), anything else as written. Every backend resolves with it."""
    raw = spec.path
    if not raw.startswith(HF_PREFIX):
        return Path(raw).expanduser()
    repo = raw[len(HF_PREFIX):]
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id=repo, local_files_only=True))
    except Exception:
        raise StartupError(
            f"model {name!r}: {repo} is not in the local Hugging Face cache "
            f"({hf_cache_hint()}); download it beforehand or point models.{name}.path "
            f"at a local directory") from None

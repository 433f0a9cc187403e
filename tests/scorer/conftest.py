"""Fixtures for the scorer tests (scorer env only: .venv-scorer/bin/python -m pytest tests/scorer).

Everything is real unbabel-comet code on tiny random-weight checkpoints built offline by
tests/fixtures/build_tiny_comet.py (cached under .cache/tiny-comet/). Network access is refused
in this process and in every service subprocess (netguard/sitecustomize.py).
"""
from __future__ import annotations

import importlib.util
import os
import signal
import warnings
from pathlib import Path

import pytest

from tests.helpers.scorer_service import NETGUARD, start_service, stop_service

_spec = importlib.util.spec_from_file_location("scorer_netguard", NETGUARD / "sitecustomize.py")
netguard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(netguard)  # installs the guard for this process

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", message=".*pkg_resources.*")


def pytest_configure(config):
    # Noise from comet's own dependencies on the comet.predict reference path.
    for pattern in ("ignore:pkg_resources is deprecated:UserWarning",
                    "ignore:The `srun` command is available",
                    "ignore:.*LeafSpec.*is deprecated"):
        config.addinivalue_line("filterwarnings", pattern)

# Names the service config uses for the tiny checkpoints.
SERVICE_MODELS = {
    "da": ("comet-da", "comet-da", {}),
    "qe": ("referenceless", "referenceless", {}),
    "kiwi": ("cometkiwi", "cometkiwi", {}),
    "uni": ("unified-wl", "unified", {}),
    "xc": ("xcomet", "xcomet", {}),
    "xc-thr": ("xcomet", "xcomet", {"decoding_threshold": 0.85}),
}


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    from tests.fixtures import build_tiny_comet

    return build_tiny_comet.ensure_built()


def ckpt(tiny_dir: Path, fixture_name: str) -> Path:
    return tiny_dir / "models" / fixture_name / "checkpoints" / "model.ckpt"


@pytest.fixture(scope="session")
def comet_models(tiny_dir):
    """Fixture name -> model loaded with stock comet.load_from_checkpoint (reference side)."""
    import logging

    from comet import load_from_checkpoint

    for name in ("pytorch_lightning", "lightning", "lightning_fabric", "comet"):
        logging.getLogger(name).setLevel(logging.ERROR)
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load_from_checkpoint(str(ckpt(tiny_dir, name)), local_files_only=True)
        return cache[name]

    return get


def comet_predict(model, samples, batch_size=8):
    """Stock comet.predict on CPU, as a reward function would call it."""
    out = model.predict(samples, batch_size=batch_size, gpus=0, progress_bar=False)
    return out


def write_config(path: Path, tiny_dir: Path, models=None, **knobs) -> Path:
    from src.scorer.config import ModelSpec, ScorerConfig, dump_config

    models = models or SERVICE_MODELS
    specs = {name: ModelSpec(path=str(tiny_dir / "models" / fx), kind=kind, **extra)
             for name, (fx, kind, extra) in models.items()}
    dump_config(ScorerConfig(models=specs, **knobs), path)
    return path


def make_hub_cache(tiny_dir: Path, hub: Path, fixture: str, repo: str, encoder_repo: str) -> None:
    """A pre-filled Hugging Face cache (HF_HUB_CACHE layout) holding `repo` (a tiny comet
    model whose pretrained_model is the hub name `encoder_repo`) and that encoder, as a user
    who downloaded Unbabel/wmt22-cometkiwi-da + xlm-roberta-large beforehand would have."""
    import shutil

    import torch
    import yaml

    def snapshot(name: str) -> Path:
        base = hub / ("models--" + name.replace("/", "--"))
        commit = "0" * 40
        (base / "refs").mkdir(parents=True)
        (base / "refs" / "main").write_text(commit)
        return base / "snapshots" / commit

    shutil.copytree(tiny_dir / "encoders" / "xlmr", snapshot(encoder_repo))
    model_dir = snapshot(repo)
    shutil.copytree(tiny_dir / "models" / fixture, model_dir)
    ck = model_dir / "checkpoints" / "model.ckpt"
    state = torch.load(ck, map_location="cpu", weights_only=False)
    state["hyper_parameters"]["pretrained_model"] = encoder_repo
    torch.save(state, ck)
    hp = yaml.safe_load((model_dir / "hparams.yaml").read_text())
    hp["pretrained_model"] = encoder_repo
    (model_dir / "hparams.yaml").write_text(yaml.safe_dump(hp))


@pytest.fixture(scope="session")
def service(tiny_dir, tmp_path_factory):
    """All tiny models behind one service. Small queue and request limits so the 503 and 413
    paths are reachable; SIGINT at the end must be a clean exit. Two inference threads, as on
    any CPU with 2 cores or more, so every service test (the concurrency test's scores against
    predict included) runs batches on two threads at once even on a 1-core machine."""
    d = tmp_path_factory.mktemp("service")
    cfg = write_config(d / "scorer.yaml", tiny_dir, max_queue=64, max_items_per_request=100,
                       max_body_bytes=256 * 1024, max_wait_ms=3.0, inference_threads=2)
    svc = start_service(cfg, d / "ready.json")
    yield svc
    rc = stop_service(svc, signal.SIGINT)
    assert rc == 0, svc.log.read_text()[-3000:]
    assert not svc.ready_file.exists()

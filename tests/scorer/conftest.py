"""Fixtures for the scorer tests (scorer env only: .venv-scorer/bin/python -m pytest tests/scorer).

Everything is real unbabel-comet code on tiny random-weight checkpoints built offline by
tests/fixtures/build_tiny_comet.py (cached under .cache/tiny-comet/). Network access is refused
in this process and in every service subprocess (netguard/sitecustomize.py).
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GUARD_DIR = HERE / "netguard"

_spec = importlib.util.spec_from_file_location("scorer_netguard", GUARD_DIR / "sitecustomize.py")
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

TOKEN = "test-token-5f2c"
# Names the service config uses for the tiny checkpoints.
SERVICE_MODELS = {
    "da": ("comet-da", "comet-da", {}),
    "qe": ("referenceless", "referenceless", {}),
    "kiwi": ("cometkiwi", "cometkiwi", {}),
    "uni": ("unified-wl", "unified", {}),
    "xc": ("xcomet", "xcomet", {}),
    "xc-thr": ("xcomet", "xcomet", {"decoding_threshold": 0.85}),
}


def service_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(GUARD_DIR), str(REPO)])
    env.update(extra)
    return env


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


@dataclass
class Service:
    proc: subprocess.Popen
    url: str
    ready_file: Path
    log: Path

    def request(self, method: str, path: str, body=None, token: str | None = TOKEN,
                headers=None, timeout: float = 60.0):
        """-> (status, parsed JSON body, response headers). `body` may be bytes or an object."""
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=body, method=method)
        req.add_header("Content-Type", "application/json")
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read()), dict(r.headers)
        except urllib.error.HTTPError as e:
            raw = e.read()
            return e.code, json.loads(raw) if raw else None, dict(e.headers)

    def score(self, model: str, items, want=None, **extra):
        body = {"model": model, "items": items, **extra}
        if want is not None:
            body["want"] = want
        return self.request("POST", "/score", body)


def start_service(config: Path, ready_file: Path, env=None, timeout: float = 180.0):
    # stderr goes to a file: a pipe nobody reads would block the service once it fills up.
    log = config.with_suffix(".stderr.log")
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "src.scorer.serve", "--config", str(config),
             "--ready-file", str(ready_file)],
            cwd=REPO, env=env or service_env(QE_SCORER_TOKEN=TOKEN),
            stdout=subprocess.PIPE, stderr=err, text=True)
    deadline = time.time() + timeout
    while not ready_file.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"service exited {proc.returncode}: {log.read_text()[-3000:]}")
        if time.time() > deadline:
            proc.kill()
            raise RuntimeError("service did not become ready")
        time.sleep(0.1)
    line = proc.stdout.readline().strip()
    info = json.loads(ready_file.read_text())
    assert line == f"scorer ready url={info['url']}"
    return Service(proc=proc, url=info["url"], ready_file=ready_file, log=log)


def stop_service(svc: Service, sig=signal.SIGTERM, timeout: float = 60.0) -> int:
    if svc.proc.poll() is None:
        svc.proc.send_signal(sig)
    try:
        return svc.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        svc.proc.kill()
        svc.proc.wait()
        raise


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

"""Fixtures for the reward tests (train env: .venv/bin/python -m pytest tests/rewards).

The QE scoring service is the real one (src/scorer, real unbabel-comet code) on the tiny
random-weight checkpoints of tests/fixtures/build_tiny_comet.py, started once per session in
`.venv-scorer` exactly as the runner will start it: `python -m src.scorer.serve --config X
--ready-file Y` with the token in its environment. Its models carry the names conf/scorer gives
the real checkpoints (cometkiwi_da, comet_da, xcomet_xl), so the reward kwargs built from the real
composed config talk to it unchanged. Its scores are random but deterministic; the tests check
the reward's components against what the service itself answers for the same input.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCORER_PYTHON = REPO / ".venv-scorer" / "bin" / "python"
NETGUARD = REPO / "tests" / "scorer" / "netguard"  # sitecustomize that refuses non-loopback connects
TOKEN = "reward-tests-token-91c3"
# service model name (as in conf/scorer/default.yaml) -> (tiny checkpoint, scorer kind)
TINY_MODELS = {
    "cometkiwi_da": ("cometkiwi", "cometkiwi"),
    "comet_da": ("comet-da", "comet-da"),
    "xcomet_xl": ("xcomet", "xcomet"),
}


@dataclass
class Service:
    proc: subprocess.Popen
    url: str
    log: Path

    def score(self, model: str, items: list[dict], want=None, **options) -> list[dict]:
        """Ask the service directly (the expected values of the reward's components)."""
        body = {"model": model, "items": items, **options}
        if want:
            body["want"] = want
        req = urllib.request.Request(f"{self.url}/score", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())["results"]

    def items_by_model(self) -> dict:
        """How many items each model has scored since the service started (GET /metrics)."""
        req = urllib.request.Request(f"{self.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return dict(json.loads(resp.read()).get("items_by_model") or {})


@pytest.fixture(scope="session")
def tiny_comet_dir() -> Path:
    if not SCORER_PYTHON.exists():
        pytest.fail(f"{SCORER_PYTHON} is missing: run `make setup` (the scorer env runs the QE service)")
    out = subprocess.run([str(SCORER_PYTHON), "tests/fixtures/build_tiny_comet.py"], cwd=REPO,
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        pytest.fail(f"building the tiny COMET models failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def scorer_service(tiny_comet_dir, tmp_path_factory):
    from src.scorer.config import ModelSpec, ScorerConfig, dump_config

    d = tmp_path_factory.mktemp("scorer")
    config, ready, log = d / "scorer.yaml", d / "ready.json", d / "scorer.log"
    specs = {name: ModelSpec(path=str(tiny_comet_dir / "models" / fx), kind=kind)
             for name, (fx, kind) in TINY_MODELS.items()}
    dump_config(ScorerConfig(models=specs, max_wait_ms=2.0), config)
    env = dict(os.environ, QE_SCORER_TOKEN=TOKEN,
               PYTHONPATH=os.pathsep.join([str(NETGUARD), str(REPO)]))
    with open(log, "w") as err:
        proc = subprocess.Popen([str(SCORER_PYTHON), "-m", "src.scorer.serve", "--config", str(config),
                                 "--ready-file", str(ready)], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 240
    while not ready.exists():
        if proc.poll() is not None:
            pytest.fail(f"scorer service exited {proc.returncode}: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"scorer service not ready after 240s: {log.read_text()[-3000:]}")
        time.sleep(0.1)
    svc = Service(proc=proc, url=json.loads(ready.read_text())["url"], log=log)
    yield svc
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def scorer_env(scorer_service, monkeypatch):
    """The environment the runner gives verl's reward workers."""
    monkeypatch.setenv("QE_SCORER_URL", scorer_service.url)
    monkeypatch.setenv("QE_SCORER_TOKEN", TOKEN)
    monkeypatch.setenv("QE_SCORER_LOG", str(scorer_service.log))
    monkeypatch.delenv("QE_REWARD_COMPONENTS_DIR", raising=False)
    return scorer_service


@pytest.fixture
def no_scorer_env(monkeypatch):
    """No service configured: any scorer call raises, so a passing test proves none was made."""
    for name in ("QE_SCORER_URL", "QE_SCORER_TOKEN", "QE_SCORER_LOG", "QE_REWARD_COMPONENTS_DIR"):
        monkeypatch.delenv(name, raising=False)


@lru_cache(maxsize=None)
def _composed(overrides: tuple[str, ...]) -> dict:
    from src.config import compose_config

    return compose_config(list(overrides))


def kwargs_for(reward: str, *overrides: str) -> dict:
    """The reward kwargs the launcher puts into verl's config for this reward group."""
    from src.rewards.group_kwargs import reward_kwargs

    cfg = _composed((f"reward={reward}", *overrides))
    return reward_kwargs(cfg["reward"], cfg["scorer"]["models"])


@pytest.fixture
def loop():
    """One event loop per test, its scorer sessions closed at the end (as a worker's would be)."""
    from src.rewards.client import close_clients

    ev = asyncio.new_event_loop()
    yield ev
    ev.run_until_complete(close_clients())
    ev.close()


def extra_info(src: str, src_lang: str = "zh", tgt_lang: str = "en", template: str = "chat",
               split: str = "train", **more) -> dict:
    """extra_info as src.data.prepare writes it."""
    return {"split": split, "src": src, "src_lang": src_lang, "tgt_lang": tgt_lang,
            "lang_pair": f"{src_lang}-{tgt_lang}", "template": template, "index": 0, **more}

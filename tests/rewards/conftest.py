"""Fixtures for the reward tests (train env: .venv/bin/python -m pytest tests/rewards).

The QE scoring service is the real one (src/scorer, real unbabel-comet code) on the tiny
random-weight checkpoints of tests/fixtures/build_tiny_comet.py, started once per session by
tests/conftest.py (`scorer_service`, `metricx_service`) in `.venv-scorer` exactly as the runner
starts it. Its models carry the names conf/scorer gives the real checkpoints (cometkiwi_da,
comet_da, xcomet_xl), so the reward kwargs built from the real composed config talk to it
unchanged. Its scores are random but deterministic; the tests check the reward's components
against what the service itself answers for the same input.
"""
from __future__ import annotations

import asyncio

import pytest

from tests.helpers.scorer_service import TOKEN


def _workers_env(service, monkeypatch):
    """The environment the runner gives verl's reward workers, pointing at `service`."""
    monkeypatch.setenv("QE_SCORER_URL", service.url)
    monkeypatch.setenv("QE_SCORER_TOKEN", TOKEN)
    monkeypatch.setenv("QE_SCORER_LOG", str(service.log))
    monkeypatch.delenv("QE_REWARD_COMPONENTS_DIR", raising=False)
    return service


@pytest.fixture
def scorer_env(scorer_service, monkeypatch):
    return _workers_env(scorer_service, monkeypatch)


@pytest.fixture
def metricx_env(metricx_service, monkeypatch):
    return _workers_env(metricx_service, monkeypatch)


@pytest.fixture
def no_scorer_env(monkeypatch):
    """No service configured: any scorer call raises, so a passing test proves none was made."""
    for name in ("QE_SCORER_URL", "QE_SCORER_TOKEN", "QE_SCORER_LOG", "QE_REWARD_COMPONENTS_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def loop():
    """One event loop per test, its scorer sessions closed at the end (as a worker's would be)."""
    from src.rewards.client import close_clients

    ev = asyncio.new_event_loop()
    yield ev
    ev.run_until_complete(close_clients())
    ev.close()


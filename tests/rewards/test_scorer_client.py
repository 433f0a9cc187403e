"""The scorer client's failure behaviour: a service that stays unreachable stops the step with a
clear error naming the URL and its log (never a silent zero); transient failures are retried; 4xx
answers are not."""
from __future__ import annotations

import socket

import pytest

from src.rewards.client import ScorerNotConfigured, ScorerRefused, ScorerUnavailable
from src.rewards.compute import compute_score
from tests.helpers.reward_config import extra_info, kwargs_for
from tests.helpers.reward_example import REF, RESPONSE, SRC

FAST = ("reward.client.retries=2", "reward.client.backoff_s=0.01", "reward.client.timeout_s=0.5")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(loop, kw):
    return loop.run_until_complete(compute_score("wmt/zh-en", RESPONSE, REF, extra_info(SRC), **kw))


def test_unreachable_service_raises_naming_url_and_log(loop, monkeypatch, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("QE_SCORER_URL", url)
    monkeypatch.setenv("QE_SCORER_TOKEN", "t")
    monkeypatch.setenv("QE_SCORER_LOG", str(tmp_path / "scorer-0.log"))
    with pytest.raises(ScorerUnavailable) as err:
        call(loop, kwargs_for("comet", *FAST))
    msg = str(err.value)
    assert url in msg and str(tmp_path / "scorer-0.log") in msg and "3 attempts" in msg
    assert "cometkiwi_da" in msg


def test_unset_url_is_a_clear_error(loop, no_scorer_env):
    with pytest.raises(ScorerNotConfigured, match="QE_SCORER_URL is not set"):
        call(loop, kwargs_for("comet"))


def test_wrong_token_is_refused_without_retries(loop, scorer_env, monkeypatch):
    monkeypatch.setenv("QE_SCORER_TOKEN", "not-the-token")
    with pytest.raises(ScorerRefused, match=r"HTTP 401.*QE_SCORER_TOKEN in the reward workers' environment"):
        call(loop, kwargs_for("comet", "reward.client.retries=50", "reward.client.backoff_s=10"))


class FlakyService:
    """A loopback HTTP server answering 503 (queue full) a few times, then like the service."""

    def __init__(self, failures: int, delay_s: float = 0.0):
        self.failures, self.delay_s, self.calls = failures, delay_s, 0

    async def handle(self, request):
        import asyncio

        from aiohttp import web

        self.calls += 1
        body = await request.json()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.calls <= self.failures:
            return web.json_response({"error": "queue full"}, status=503, headers={"Retry-After": "0"})
        return web.json_response({"model": body["model"], "results": [{"score": 0.5} for _ in body["items"]]})

    async def start(self):
        from aiohttp import web

        app = web.Application()
        app.router.add_post("/score", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"


def test_transient_503_is_retried(loop, monkeypatch):
    svc = FlakyService(failures=2)
    monkeypatch.setenv("QE_SCORER_URL", loop.run_until_complete(svc.start()))
    monkeypatch.setenv("QE_SCORER_TOKEN", "t")
    # FAST's retries and backoff, with a timeout a loaded machine keeps: this is about the 503s (at 0.5 s, a
    # first answer slowed by other jobs was a timeout, which spent a retry: CI red once)
    out = call(loop, kwargs_for("comet", *FAST[:2], "reward.client.timeout_s=30"))
    assert svc.calls == 3 and out["kiwi"] == 0.5
    loop.run_until_complete(svc.runner.cleanup())


def test_request_deadline(loop, monkeypatch):
    svc = FlakyService(failures=0, delay_s=2.0)  # answers after the 0.5 s deadline
    monkeypatch.setenv("QE_SCORER_URL", url := loop.run_until_complete(svc.start()))
    monkeypatch.setenv("QE_SCORER_TOKEN", "t")
    with pytest.raises(ScorerUnavailable, match=rf"{url} is unreachable: 3 attempts.*TimeoutError"):
        call(loop, kwargs_for("comet", *FAST))
    loop.run_until_complete(svc.runner.cleanup())

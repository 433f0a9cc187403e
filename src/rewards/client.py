"""HTTP client to the QE scoring service (src/scorer, docs/scorer-api.md), one per worker process.

verl runs `reward.num_workers` reward worker processes; each calls compute_score once per
trajectory, many at a time on its event loop. They share one aiohttp session per process and
event loop (a connection pool), and the service batches the single-sample requests of all workers.

Where the service is comes from the environment the runner sets for verl's processes, never from
the verl config (which must not vary per launch) and never from a file:
    QE_SCORER_URL    e.g. http://127.0.0.1:41234 (this node's service)
    QE_SCORER_TOKEN  the bearer token the service was started with
    QE_SCORER_LOG    the service's log file, named in errors (optional)
    QE_SCORER_READY_TIMEOUT_S  scorer.ready_timeout_s (src/node/scorer_service.py sets it): how long a
                     restarting service may take to load its models

Transient failures (timeouts, 5xx, 503 queue full) are retried with exponential backoff. A refused
or reset connection means the service is down: the runner restarts it on the same URL and token
(src/node/scorer_service.py), so the call polls GET /health until the service answers again, for up to
QE_SCORER_READY_TIMEOUT_S per outage, then sends the request again. A restart costs time, never a
sample: verl's V1 agent loop tags a prompt's whole group `failure` when one reward call raises
(verl/trainer/ppo/v1/agent_loop_tq.py AgentLoopWorkerTQ._run_prompt). Such a lost group stops the
run, or, within scorer.lost_groups_allowed, is dropped whole (all its trajectories) before the step
trains on the groups left (src/trainer/guard.py; verl alone would train on its survivors). When the
service stays unreachable the call raises ScorerUnavailable naming the URL and the log: a reward is
never silently zero.
"""
from __future__ import annotations

import asyncio
import math
import os
import random
import time
import weakref
from typing import Any

from src.rewards.settings import ClientSettings

ENV_URL = "QE_SCORER_URL"
ENV_TOKEN = "QE_SCORER_TOKEN"
ENV_LOG = "QE_SCORER_LOG"
ENV_READY_TIMEOUT = "QE_SCORER_READY_TIMEOUT_S"
# how often a call waiting for a restarting service asks /health
HEALTH_POLL_S = 0.5
RETRY_STATUSES = (500, 502, 503, 504)


class ScorerError(RuntimeError):
    """The QE scoring service could not give a score; training must stop, not go on with zeros."""


class ScorerNotConfigured(ScorerError):
    pass


class ScorerUnavailable(ScorerError):
    pass


class ScorerRefused(ScorerError):
    """A 4xx answer: retrying cannot help (wrong token, unknown model, bad request)."""


def _log_hint() -> str:
    log = os.environ.get(ENV_LOG)
    return f"service log: {log}" if log else f"service log: unknown ({ENV_LOG} not set)"


class ScorerClient:
    def __init__(self, url: str, token: str, settings: ClientSettings, ready_timeout_s: float = 0.0):
        self.url = url.rstrip("/")
        self._token = token
        self.settings = settings
        # 0: nobody restarts the service (no runner), so there is nothing to wait for
        self.ready_timeout_s = ready_timeout_s
        self._session = None  # created on first use, inside the event loop that uses it

    def _get_session(self):
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.settings.max_connections),
                timeout=aiohttp.ClientTimeout(total=self.settings.timeout_s),
                headers={"Authorization": f"Bearer {self._token}"},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def score(self, model: str, items: list[dict], want: list[str] | None = None,
                    **options: Any) -> list[dict]:
        """POST /score; the service's `results`, one per item, in order."""
        import aiohttp

        body = {"model": model, "items": items, **options}
        if want:
            body["want"] = want
        attempts = self.settings.retries + 1
        started = time.monotonic()
        last = "no attempt"
        # one wait per outage; a service dying again and again is stopped by the runner
        # (scorer.restarts), so the number of outages one call sits through is bounded too
        outages_left = attempts
        attempt = sent = 0
        while attempt < attempts:
            down = False
            sent += 1
            try:
                async with self._get_session().post(f"{self.url}/score", json=body) as resp:
                    if resp.status == 200:
                        try:
                            data = await resp.json(content_type=None)
                        except ValueError:
                            data = None
                        return self._results(data, model, len(items))
                    detail = await _error_text(resp)
                    if resp.status not in RETRY_STATUSES:
                        hint = (f" ({ENV_TOKEN} in the reward workers' environment does not match the service's)"
                                if resp.status == 401 else "")
                        raise ScorerRefused(f"QE scorer at {self.url} refused a /score request for model "
                                            f"{model!r}: HTTP {resp.status}: {detail}{hint}; {_log_hint()}")
                    last = f"HTTP {resp.status}: {detail}"
                    retry_after = _retry_after(resp.headers.get("Retry-After"))
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError) as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                retry_after = 0.0
                # refused, reset, or cut mid-answer: the process is gone (a timeout is a slow service)
                down = isinstance(exc, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError))
            if down and self.ready_timeout_s > 0 and outages_left > 0:
                outages_left -= 1
                waited = await self._wait_healthy(time.monotonic() + self.ready_timeout_s)
                if waited is not None:
                    continue  # back up: the request goes again without spending a retry
                last += f"; /health did not answer within {self.ready_timeout_s:g}s ({ENV_READY_TIMEOUT})"
                break
            attempt += 1
            if attempt < attempts:
                # exponential backoff with jitter: 8 workers retrying in lockstep would hit a
                # restarting service all at once
                delay = self.settings.backoff_s * (2 ** (attempt - 1))
                await asyncio.sleep(max(retry_after, delay + random.uniform(0, self.settings.backoff_s)))
        raise ScorerUnavailable(
            f"QE scorer at {self.url} is unreachable: {sent} attempts over {time.monotonic() - started:.1f}s "
            f"for model {model!r}, last error: {last}; {_log_hint()}")

    async def _wait_healthy(self, deadline: float) -> float | None:
        """Poll GET /health until the service says ok (seconds waited) or `deadline` passes (None)."""
        import aiohttp

        started = time.monotonic()
        while time.monotonic() < deadline:
            try:
                async with self._get_session().get(f"{self.url}/health",
                                                   timeout=aiohttp.ClientTimeout(total=HEALTH_POLL_S * 4)) as resp:
                    if resp.status == 200 and (await resp.json(content_type=None) or {}).get("status") == "ok":
                        return time.monotonic() - started
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, AttributeError):
                pass  # still down or still loading
            await asyncio.sleep(HEALTH_POLL_S)
        return None

    def _results(self, data: Any, model: str, n: int) -> list[dict]:
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list) or len(results) != n:
            raise ScorerError(f"QE scorer at {self.url} answered model {model!r} with a malformed body "
                              f"(expected {n} results); {_log_hint()}")
        return results


async def _error_text(resp) -> str:
    try:
        data = await resp.json(content_type=None)
        if isinstance(data, dict) and "error" in data:
            return str(data["error"])[:500]
    except Exception:  # not JSON: show the text itself
        pass
    try:
        return (await resp.text())[:500]
    except Exception:
        return "(no body)"


def _retry_after(value: str | None) -> float:
    try:
        seconds = float(value) if value is not None else 0.0
    except ValueError:
        return 0.0
    return min(max(seconds, 0.0), 60.0) if math.isfinite(seconds) else 0.0


# One client per (event loop, URL, token, settings) in this process. Keyed by the loop because an
# aiohttp session belongs to the loop it was made on; the loop is held weakly so a closed loop
# (tests run several) does not keep its sessions alive.
_CLIENTS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict]" = weakref.WeakKeyDictionary()


def get_client(settings: ClientSettings) -> ScorerClient:
    url = os.environ.get(ENV_URL, "").strip()
    token = os.environ.get(ENV_TOKEN, "").strip()
    if not url:
        raise ScorerNotConfigured(
            f"{ENV_URL} is not set in the reward worker's environment: the runner starts the QE scoring "
            f"service and sets it (with {ENV_TOKEN}); {_log_hint()}")
    if not token:
        raise ScorerNotConfigured(f"{ENV_TOKEN} is not set in the reward worker's environment (needed for the "
                                  f"QE scorer at {url}); {_log_hint()}")
    loop = asyncio.get_running_loop()
    per_loop = _CLIENTS.setdefault(loop, {})
    ready_timeout_s = _ready_timeout()
    key = (url, token, settings, ready_timeout_s)
    if key not in per_loop:
        per_loop[key] = ScorerClient(url, token, settings, ready_timeout_s)
    return per_loop[key]


def _ready_timeout() -> float:
    raw = os.environ.get(ENV_READY_TIMEOUT, "").strip()
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        raise ScorerNotConfigured(f"{ENV_READY_TIMEOUT}={raw!r} in the reward worker's environment is not a "
                                  f"number of seconds (the runner sets it from scorer.ready_timeout_s)") from None
    return value if math.isfinite(value) and value > 0 else 0.0


async def close_clients() -> None:
    """Close this event loop's sessions (tests; a worker process keeps its own until it exits)."""
    loop = asyncio.get_running_loop()
    for client in list(_CLIENTS.pop(loop, {}).values()):
        await client.close()

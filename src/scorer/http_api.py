"""aiohttp application: POST /score, GET /health, GET /metrics, all behind a bearer token.

Every error is a JSON body {"error": "..."} with a 4xx/5xx status; a bad request never
touches the queue or the model, so the next good request is served normally.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

from aiohttp import web

from .batching import Batcher, BatchFailed, QueueFull, ShuttingDown
from .config import ScorerConfig
from .metrics import Metrics
from .runner import ModelRunner
from .schema import ModelInfo, RequestError, parse_score_request, results_for_empty_mt

log = logging.getLogger("scorer")


@dataclass
class ServiceState:
    token: bytes
    cfg: ScorerConfig
    runners: Dict[str, ModelRunner]
    batcher: Batcher
    metrics: Metrics
    peak_gpu_bytes: Callable[[], Optional[int]] = lambda: None
    draining: bool = False
    infos: Dict[str, ModelInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.infos = {name: r.info for name, r in self.runners.items()}


STATE = web.AppKey("scorer_state", ServiceState)


def json_error(status: int, message: str, headers: Optional[Dict[str, str]] = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


@web.middleware
async def observe(request: web.Request, handler) -> web.StreamResponse:
    """Outermost: turns every failure into a JSON error and counts statuses and latency."""
    t0 = time.monotonic()
    try:
        resp = await handler(request)
    except web.HTTPException as e:  # aiohttp's own: 404, 405, 413 from the body size limit...
        headers = {k: v for k, v in e.headers.items()
                   if k in ("Retry-After", "WWW-Authenticate", "Allow")}
        resp = json_error(e.status, e.text or e.reason, headers)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # a bug in a handler must not take the service down
        log.exception("unhandled error in %s %s", request.method, request.path)
        resp = json_error(500, f"internal error: {type(e).__name__}")
    request.app[STATE].metrics.record_request(resp.status, time.monotonic() - t0)
    return resp


@web.middleware
async def require_token(request: web.Request, handler) -> web.StreamResponse:
    state = request.app[STATE]
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode("utf-8", "replace"), state.token)
    if not ok:
        return json_error(401, "missing or wrong bearer token",
                          {"WWW-Authenticate": 'Bearer realm="qe-scorer"'})
    return await handler(request)


async def handle_score(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.draining:
        return json_error(503, "shutting down", {"Retry-After": "1"})
    body = await request.read()  # raises 413 past client_max_size
    try:
        req = parse_score_request(body, state.infos, state.cfg.max_items_per_request)
    except RequestError as e:
        return json_error(e.status, e.message)

    runner = state.runners[req.model]
    info = state.infos[req.model]
    empty_score = state.cfg.models[req.model].empty_mt_score
    todo = [i for i, it in enumerate(req.items) if it.mt.strip()]
    items = [req.items[i] for i in todo]
    measures = runner.measure(items)
    try:
        futures = state.batcher.submit(req.model, items, [req.options] * len(items), measures)
    except QueueFull:
        state.metrics.rejected_queue_full += 1
        return json_error(503, f"queue full ({state.batcher.depth} items waiting); retry later",
                          {"Retry-After": "1"})
    except ShuttingDown:
        return json_error(503, "shutting down", {"Retry-After": "1"})
    try:
        scored = [await futures[0]] if len(futures) == 1 else await asyncio.gather(*futures)
    except BatchFailed as e:
        return json_error(500, f"scoring failed: {e}")
    except ShuttingDown:
        return json_error(503, "shutting down", {"Retry-After": "1"})

    results = [None] * len(req.items)
    for i, res in zip(todo, scored):
        results[i] = res
    for i, res in enumerate(results):
        if res is None:
            results[i] = results_for_empty_mt(info, empty_score, req.options)
    state.metrics.record_items(req.model, len(req.items), len(req.items) - len(todo),
                               sum(m.truncated for m in measures))
    return web.json_response({"model": req.model, "results": results})


async def handle_health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.json_response({
        "status": "draining" if state.draining else "ok",
        "ready": not state.draining,
        "pid": os.getpid(),
        "device": state.cfg.device,
        "dtype": state.cfg.dtype,
        "queue_depth": state.batcher.depth,
        "models": {name: {"kind": i.kind, "class": i.model_class, "needs_ref": i.needs_ref,
                          "accepts_ref": i.accepts_ref, "word_level": i.word_level,
                          "mqm": i.has_mqm, "max_tokens": i.max_tokens}
                   for name, i in state.infos.items()},
    })


async def handle_metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.json_response(state.metrics.snapshot(state.batcher.depth, state.peak_gpu_bytes()))


def create_app(state: ServiceState) -> web.Application:
    app = web.Application(client_max_size=state.cfg.max_body_bytes,
                          middlewares=[observe, require_token])
    app[STATE] = state
    app.router.add_post("/score", handle_score)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/metrics", handle_metrics)
    return app

"""aiohttp application: POST /score, GET /health, GET /metrics, all behind a bearer token.

Every error is a JSON body {"error": "..."} with a 4xx/5xx status; a bad request never
touches the queue or the model, so the next good request is served normally.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import math
import os
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .batching import Batcher, BatchFailed, QueueFull, ShuttingDown
from .config import ScorerConfig, checkpoint_name
from .metrics import Metrics
from .backends.interface import Runner
from .schema import ModelInfo, RequestError, parse_score_request, results_for_empty_mt

log = logging.getLogger("scorer")
# Requests with larger bodies are measured (tokenised for their cost) on the measuring thread:
# tokenising runs at 1 MB/s of text or less (the tests' tiny tokenizer: ~0.4 MB/s on a busy 2-core
# machine, /health held 1.6 s by three 256 KiB bodies), so an 8 MB body would hold the event loop,
# and with it every other client, for seconds. The tokenizer releases the GIL (encode_batch), so
# the loop keeps serving meanwhile.
# Smaller ones (the reward workers' single items, a few KiB) are measured on the loop: they never
# queue behind a large one.
MEASURE_OFF_LOOP_BYTES = 64 * 1024


class MalformedHttpLog(logging.Filter):
    """For aiohttp's server logger. aiohttp logs every request it cannot parse as HTTP (a NUL
    or a non-ASCII byte in a header, a bad request line) at ERROR with a traceback
    (web_protocol.py RequestHandler.handle_error) and answers 400 itself: a client that keeps
    sending such requests would fill the service log. They are the client's error, so: one
    WARNING line without the traceback, at most one per `every_s` seconds, counting those left
    out. Only the parser's first line is kept: the rest quotes the offending header line, which
    may be the Authorization header with the token."""

    def __init__(self, every_s: float = 10.0) -> None:
        super().__init__()
        self.every_s = every_s
        self.last = -math.inf
        self.skipped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        now = time.monotonic()
        if now - self.last < self.every_s:
            self.skipped += 1
            return False
        what = (exc.message or type(exc).__name__).strip().splitlines()[0].rstrip(":")
        peer = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        record.msg = "malformed HTTP request from %s answered 400 (%s)%s"
        record.args = (peer, what[:120], f"; {self.skipped} more since the last such line"
                       if self.skipped else "")
        record.exc_info = record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self.last, self.skipped = now, 0
        return True


@dataclass
class ServiceState:
    token: bytes
    cfg: ScorerConfig
    runners: Dict[str, Runner]
    batcher: Batcher
    metrics: Metrics
    peak_gpu_bytes: Callable[[], Optional[int]] = lambda: None
    measure_executor: Optional[Executor] = None  # one thread; see MEASURE_OFF_LOOP_BYTES
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


async def read_body(request: web.Request, timeout_s: float) -> Optional[bytes]:
    """The whole body, or None when it has not arrived `timeout_s` after its headers. (A
    request's headers are bounded by aiohttp's keep-alive timer, set to the same value in
    serve.py: it closes a connection whose next request has not been parsed in time.)"""
    try:
        async with asyncio.timeout(timeout_s):
            return await request.read()
    except TimeoutError:
        return None


async def cut_stalled(request: web.Request, timeout_s: float) -> web.Response:
    """408, then the connection is closed at once. Returning the response alone would leave the
    socket open for aiohttp's lingering time (10 s), reading a body that is not coming."""
    resp = json_error(408, f"request body not received within read_timeout_s={timeout_s:g}s "
                           f"of its headers; connection closed")
    resp.force_close()
    await resp.prepare(request)
    await resp.write_eof()
    if request.transport is not None:
        request.transport.close()  # flushes the 408, then closes
    return resp


async def handle_score(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.draining:
        return json_error(503, "shutting down", {"Retry-After": "1"})
    body = await read_body(request, state.cfg.read_timeout_s)  # 413 past client_max_size
    if body is None:
        return await cut_stalled(request, state.cfg.read_timeout_s)
    try:
        req = parse_score_request(body, state.infos, state.cfg.max_items_per_request)
    except RequestError as e:
        return json_error(e.status, e.message)

    runner = state.runners[req.model]
    info = state.infos[req.model]
    empty_score = state.cfg.models[req.model].empty_score
    todo = [i for i, it in enumerate(req.items) if it.mt.strip()]
    items = [req.items[i] for i in todo]
    if len(body) > MEASURE_OFF_LOOP_BYTES and state.measure_executor is not None:
        measures = await asyncio.get_running_loop().run_in_executor(
            state.measure_executor, runner.measure, items, True)
    else:
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
        # "checkpoint": what the model's path names it by (XCOMET-XL), for a launcher on another machine to check
        # that it means the same checkpoint (src/node/scorer_service.py external_problem)
        "models": {name: {"kind": i.kind, "class": i.model_class, "needs_ref": i.needs_ref,
                          "accepts_ref": i.accepts_ref, "word_level": i.word_level,
                          "mqm": i.has_mqm, "max_tokens": i.max_tokens,
                          "checkpoint": checkpoint_name(state.cfg.models[name].path)}
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

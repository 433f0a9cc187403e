"""COMET-DA, CometKiwi, XCOMET (with error spans) and each backend's own metric from the QE scoring
service (docs/scorer-api.md). A metric on a scale of its own is kept raw (the tables say its scale).

One ScorerClient (src/rewards/client.py: retries, backoff, clear errors) for the whole evaluation.
Offline there is no per-trajectory latency to care about, so each request carries `batch_items`
segments and `concurrency` requests are in flight; the service batches them by length on its side.
"""
from __future__ import annotations

import asyncio
import math
import urllib.error
from dataclasses import dataclass

from src.node.scorer_service import read_health
from src.rewards.client import ScorerClient
from src.rewards.settings import ClientSettings
from src.scorer.backends import KINDS, METRICS
from src.scorer.vocabulary import SPAN_METRIC, request_item, severity_counts

from .options import EvalOptions, UsageError, model_option, reference_option

# metric -> the model kinds that can serve it (what each kind gives is the scorer's KINDS)
METRIC_KINDS = {m: tuple(k for k, info in KINDS.items() if info.metric == m) for m in METRICS}


@dataclass(frozen=True)
class QEInput:
    src: str
    mt: str
    ref: str
    tgt_lang: str


def model_names(opts: EvalOptions) -> dict[str, str]:
    """metric -> service model name, for the QE metrics asked for."""
    return {m: getattr(opts, model_option(m)) for m in opts.qe_metrics}


def check_service(url: str, token: str, models: dict[str, str], timeout_s: float = 30.0) -> dict:
    """GET /health before any generation: the URL answers, the token is right, every model is there
    and is of a kind that gives that metric. UsageError (one line) otherwise."""
    try:
        health = read_health(url, token, timeout_s)
    except urllib.error.HTTPError as exc:
        hint = " (QE_SCORER_TOKEN does not match the service's token)" if exc.code == 401 else ""
        raise UsageError(f"QE scorer at {url} answered /health with HTTP {exc.code}{hint}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise UsageError(f"QE scorer at {url} is not reachable: {getattr(exc, 'reason', exc)} "
                         f"(scorer_url=; or leave it out to start the service here)") from None
    available = health.get("models") or {}
    for metric, name in models.items():
        if name not in available:
            raise UsageError(f"QE scorer at {url} has no model {name!r} for {metric} (it has: "
                             f"{', '.join(available) or 'none'}); set {model_option(metric)}= or metrics=")
        kind = available[name].get("kind")
        if kind not in METRIC_KINDS[metric]:
            raise UsageError(f"QE scorer model {name!r} is a {kind} model; {metric} needs "
                             f"{' or '.join(METRIC_KINDS[metric])}")
    return health


def _finite(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def _request_items(metric: str, inputs: list[QEInput], opts: EvalOptions) -> tuple[list[dict], list[str]]:
    # a span model or a backend's own metric reads the reference when its option says so
    reads_ref = bool(getattr(opts, reference_option(metric), False))
    items = [request_item(metric, x.src, x.mt, ref=x.ref, lang=x.tgt_lang, span_reference=reads_ref,
                          own_reference=reads_ref)
             for x in inputs]
    return items, (["score", "spans"] if metric == SPAN_METRIC else ["score"])


async def _score_metric(client: ScorerClient, model: str, items: list[dict], want: list[str],
                        batch_items: int, gate: asyncio.Semaphore) -> list[dict]:
    async def one(chunk):
        async with gate:
            return await client.score(model, chunk, want)

    chunks = [items[i:i + batch_items] for i in range(0, len(items), batch_items)]
    answers = await asyncio.gather(*(one(c) for c in chunks))
    return [r for answer in answers for r in answer]


async def _score_all(url: str, token: str, inputs: list[QEInput], opts: EvalOptions) -> list[dict]:
    settings = ClientSettings(timeout_s=opts.request_timeout_s, retries=5, backoff_s=1.0,
                              max_connections=opts.concurrency)
    client = ScorerClient(url, token, settings)
    gate = asyncio.Semaphore(opts.concurrency)
    names = model_names(opts)
    try:
        jobs = {}
        for metric, model in names.items():
            items, want = _request_items(metric, inputs, opts)
            jobs[metric] = _score_metric(client, model, items, want, opts.batch_items, gate)
        results = dict(zip(jobs, await asyncio.gather(*jobs.values())))
    finally:
        await client.close()
    out = [dict() for _ in inputs]
    for metric, answers in results.items():
        for seg, answer in zip(out, answers):
            seg[metric] = _finite(answer.get("score"))
            seg[f"{metric}_truncated"] = bool(answer.get("truncated"))
            if metric == SPAN_METRIC:
                seg["xcomet_mqm"] = _finite(answer.get("mqm"))
                spans = [sp for sp in answer.get("spans") or [] if isinstance(sp, dict)]
                seg["spans"] = spans
                seg.update(severity_counts(spans))
    return out


def score_segments(url: str, token: str, inputs: list[QEInput], opts: EvalOptions) -> list[dict]:
    """Per segment: {comet, kiwi, xcomet, xcomet_mqm, spans, n_minor, n_major, n_critical, each
    backend's own metric, <metric>_truncated} for the QE metrics asked for, exactly as the service answered."""
    if not opts.qe_metrics or not inputs:
        return [dict() for _ in inputs]
    return asyncio.run(_score_all(url, token, inputs, opts))

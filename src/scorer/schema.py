"""Parsing and validating POST /score bodies into Items. Every problem -> RequestError (4xx)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional


WANTS = ("score", "spans", "word_tags")
ITEM_KEYS = ("src", "mt", "ref", "lang")
TOP_KEYS = ("model", "items", "want", "word_tag_source", "word_tag_threshold")
WORD_TAG_SOURCES = ("spans", "probs")


@dataclass
class Item:
    src: str
    mt: str
    ref: Optional[str] = None
    lang: Optional[str] = None  # MT language for word segmentation; None = guess from script


@dataclass
class ItemOptions:
    want: frozenset = frozenset({"score"})
    word_tag_source: str = "spans"  # "spans" | "probs"
    word_tag_threshold: float = 0.5


@dataclass
class Measure:
    cost: int  # padded-token cost estimate for the batch budget (sum over encoder passes)
    truncated: bool  # some input does not fit the encoder and will be cut
    # "mt"/"src"/"ref" -> where that text may be cut before comet tokenises it: a space past the
    # tokens the encoder can see (runner.measure), so comet's truncated input is unchanged
    cuts: Dict[str, int] = field(default_factory=dict)


@dataclass
class ModelInfo:
    """What the HTTP layer needs to validate a request, without touching the model."""
    name: str
    kind: str
    model_class: str
    needs_ref: bool
    accepts_ref: bool
    word_level: bool
    has_mqm: bool
    max_tokens: int


class RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class ScoreRequest:
    model: str
    items: List[Item]
    options: ItemOptions


def _bad(msg: str) -> RequestError:
    return RequestError(400, msg)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{where} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # JSON "\ud800" escapes decode to lone surrogates
        raise _bad(f"{where} is not valid Unicode (lone surrogate)") from None
    return value


def parse_score_request(body: bytes, models: Mapping[str, ModelInfo],
                        max_items: int) -> ScoreRequest:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(f"request body is not valid UTF-8 (byte {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise _bad(f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict):
        raise _bad("request body must be a JSON object {model, items, want?}")
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise _bad(f"unknown field {unknown[0]!r} (allowed: {', '.join(TOP_KEYS)})")

    name = data.get("model")
    if not isinstance(name, str):
        raise _bad("'model' is required and must be a string")
    if name not in models:
        raise RequestError(404, f"unknown model {name!r}; this service has: "
                                f"{', '.join(sorted(models))}")
    info = models[name]

    want = data.get("want", ["score"])
    if not isinstance(want, list) or not all(isinstance(w, str) for w in want):
        raise _bad(f"'want' must be a list of strings from {', '.join(WANTS)}")
    for w in want:
        if w not in WANTS:
            raise _bad(f"unknown want {w!r} (allowed: {', '.join(WANTS)})")
        if w in ("spans", "word_tags") and not info.word_level:
            raise _bad(f"model {name!r} ({info.kind}) has no word-level head, so it cannot give "
                       f"{w!r}; use a unified or xcomet model")
    source = data.get("word_tag_source", "spans")
    if source not in WORD_TAG_SOURCES:
        raise _bad(f"'word_tag_source' must be one of {', '.join(WORD_TAG_SOURCES)}")
    threshold = data.get("word_tag_threshold", 0.5)
    if (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
            or not math.isfinite(threshold) or not 0.0 <= threshold < 1.0):
        raise _bad("'word_tag_threshold' must be a number in [0, 1)")

    raw_items = data.get("items")
    if not isinstance(raw_items, list) or not raw_items:
        raise _bad("'items' is required and must be a non-empty list of {src, mt, ref?}")
    if len(raw_items) > max_items:
        raise RequestError(413, f"too many items: {len(raw_items)} > max_items_per_request "
                                f"{max_items}; split the request")
    items = [_item(raw, i, name, info) for i, raw in enumerate(raw_items)]
    options = ItemOptions(want=frozenset(want) | {"score"}, word_tag_source=source,
                          word_tag_threshold=float(threshold))
    return ScoreRequest(model=name, items=items, options=options)


def _item(raw: Any, i: int, model: str, info: ModelInfo) -> Item:
    where = f"items[{i}]"
    if not isinstance(raw, dict):
        raise _bad(f"{where} must be an object {{src, mt, ref?, lang?}}")
    unknown = sorted(set(raw) - set(ITEM_KEYS))
    if unknown:
        raise _bad(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(ITEM_KEYS)})")
    for key in ("src", "mt"):
        if key not in raw:
            raise _bad(f"{where}.{key} is required")
    src = _text(raw["src"], f"{where}.src")
    mt = _text(raw["mt"], f"{where}.mt")
    ref = raw.get("ref")
    if ref is not None:
        ref = _text(ref, f"{where}.ref")
    if info.needs_ref and ref is None:
        raise _bad(f"{where}.ref is required: model {model!r} ({info.kind}) scores against a "
                   f"reference")
    lang = raw.get("lang")
    if lang is not None:
        lang = _text(lang, f"{where}.lang")
    return Item(src=src, mt=mt, ref=ref if info.accepts_ref else None, lang=lang)


def results_for_empty_mt(info: ModelInfo, empty_score: float, options: ItemOptions) -> Dict:
    """Empty or whitespace-only MT is not sent to the model (an encoder sees just <s></s>,
    which scores arbitrarily): it gets the configured score, the worst MQM and no words."""
    res: Dict[str, Any] = {"score": empty_score, "truncated": False, "empty_mt": True}
    if info.has_mqm:
        res["mqm"] = 0.0
    if "spans" in options.want:
        res["spans"] = []
    if "word_tags" in options.want:
        res["word_tags"] = []
    return res

"""What the QE scoring service says about one translation: the requests per model, the answers
turned into reward components.

Only the models a row needs are asked (in parallel): in training, those whose component has a
non-zero weight; at validation, every sentence model of the group and, with mode train|eval, the
span model (so each is logged).
"""
from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field

from src.rewards.client import get_client
from src.rewards.settings import SENTENCE_COMPONENTS, SPAN_COMPONENTS, RewardSettings

SEVERITIES = ("minor", "major", "critical")


@dataclass
class QEResult:
    values: dict = field(default_factory=dict)  # kiwi, comet, xcomet, mqm, n_minor, ..., ok_ratio
    spans: list = field(default_factory=list)  # the span model's error spans, as the service gave them
    words: list = field(default_factory=list)  # its word tags when asked for (token credit reads BAD words)


def _finite(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def plan_requests(s: RewardSettings, validation: bool, has_ref: bool) -> tuple[list[str], list[str] | None]:
    """(sentence components to ask for, span `want` list or None)."""
    weights = s.weights(validation)
    sentence = [c for c in SENTENCE_COMPONENTS if s.models.get(c) and (validation or weights[c] != 0.0)]
    if not has_ref:
        sentence = [c for c in sentence if c != "comet"]  # COMET-DA needs the reference
    want = None
    if validation and s.span_at_validation:
        want = ["score", "spans", "word_tags"]
    elif not validation and any(weights[c] != 0.0 for c in SPAN_COMPONENTS):
        want = ["score", "spans"] + (["word_tags"] if weights["ok_ratio"] != 0.0 else [])
    return sentence, want


async def assess(translation: str, source: str, reference: str, tgt_lang: str, s: RewardSettings,
                 validation: bool) -> QEResult:
    has_ref = bool(reference.strip())
    sentence, want = plan_requests(s, validation, has_ref)
    if not sentence and want is None:
        return QEResult()
    client = get_client(s.client)
    calls = []
    for comp in sentence:
        item = {"src": source, "mt": translation}
        if comp == "comet":
            item["ref"] = reference
        calls.append(client.score(s.models[comp], [item], ["score"]))
    if want is not None:
        item = {"src": source, "mt": translation}
        if tgt_lang:  # word segmentation of the MT (jieba for zh, MeCab for ja); else guessed from the script
            item["lang"] = tgt_lang
        if s.span.reference and has_ref:
            item["ref"] = reference
        options = {}
        if "word_tags" in want:
            options = {"word_tag_source": s.span.word_tag_source}
            if s.span.word_tag_source == "probs":
                options["word_tag_threshold"] = s.span.word_tag_threshold
        calls.append(client.score(s.models["span"], [item], want, **options))
    answers = await asyncio.gather(*calls)

    out = QEResult()
    for comp, results in zip(sentence, answers):
        out.values[comp] = _finite(results[0].get("score"))
    if want is not None:
        span_result = answers[-1][0]
        out.values["xcomet"] = _finite(span_result.get("score"))
        out.values["mqm"] = _finite(span_result.get("mqm"))
        out.spans = [sp for sp in span_result.get("spans") or [] if isinstance(sp, dict)]
        for sev in SEVERITIES:
            out.values[f"n_{sev}"] = float(sum(1 for sp in out.spans if sp.get("severity") == sev))
        if "word_tags" in want:
            out.words = [w for w in span_result.get("word_tags") or [] if isinstance(w, dict)]
            tags = [w.get("tag") for w in out.words]
            tagged = [t for t in tags if t in ("OK", "BAD")]  # null: beyond the encoder's limit
            out.values["ok_ratio"] = (sum(1 for t in tagged if t == "OK") / len(tagged)) if tagged else None
    return out


def spans_json(spans: list[dict]) -> str:
    """Error spans as the report reads them: a JSON string (verl averages every non-string value
    it logs; a list per sample breaks that)."""
    keep = ("start", "end", "severity", "text", "confidence")
    return json.dumps([{k: sp.get(k) for k in keep} for sp in spans], ensure_ascii=False)

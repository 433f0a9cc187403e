"""What the QE scoring service says about one translation: the requests per model, the answers
turned into reward components.

Only the models a row needs are asked (in parallel): in training, those whose component has a
non-zero weight; at validation, every sentence model of the group and, with mode train|eval, the
span model (so each is logged).
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from src.rewards import components
from src.rewards.client import get_client
from src.rewards.settings import RewardSettings
from src.scorer.backends import OWN_METRICS
from src.scorer.vocabulary import QE_METRIC, REFERENCE_METRIC, SEVERITIES, SPAN_METRIC, request_item, severity_counts

# sentence model roles, in the order they are asked; COMET-DA (role comet) needs the reference, a
# backend's own metric reads it when reward.<metric>.reference asks (else QE mode)
SENTENCE_ROLES = (REFERENCE_METRIC, QE_METRIC, *OWN_METRICS)
ROLES_NEEDING_REFERENCE = (REFERENCE_METRIC,)
# SEVERITIES: compute.py reads it from here
__all__ = ["SEVERITIES", "QEResult", "assess", "plan_requests", "spans_json"]


@dataclass
class QEResult:
    answers: dict = field(default_factory=dict)  # model role -> the service's result for the translation
    asked: dict = field(default_factory=dict)  # model role -> what it was asked for (`want`)
    counts: dict = field(default_factory=dict)  # n_minor, n_major, n_critical (span model asked)
    spans: list = field(default_factory=list)  # the span model's error spans, as the service gave them
    words: list = field(default_factory=list)  # its word tags when asked for (token credit reads BAD words)

    def has(self, component: components.RewardComponent) -> bool:
        """The answer this component reads was asked for (a None value inside it is the model's)."""
        if component.model is None:
            return True
        asked = self.asked.get(component.model)
        return asked is not None and all(out in asked for out in component.span_outputs)


def plan_requests(s: RewardSettings, validation: bool, has_ref: bool) -> tuple[list[str], list[str] | None]:
    """(sentence model roles to ask, span `want` list or None). Training asks the models of the
    weighted components; validation every sentence model of the group and, with mode train|eval,
    the span model with everything it can say (so each is logged)."""
    weighted = [components.get_component(c) for c, w in s.weights(validation).items() if w != 0.0]
    sentence = [r for r in SENTENCE_ROLES
                if s.models.get(r) and (validation or any(c.model == r for c in weighted))]
    if not has_ref:
        sentence = [r for r in sentence if r not in ROLES_NEEDING_REFERENCE]
    want = None
    if validation and s.span_at_validation:
        want = list(components.SPAN_OUTPUTS)
    elif not validation and any(c.model == "span" for c in weighted):
        extra = {o for c in weighted if c.model == "span" for o in c.span_outputs}
        want = ["score", "spans"] + [o for o in components.SPAN_OUTPUTS if o in extra and o not in ("score", "spans")]
    return sentence, want


async def assess(translation: str, source: str, reference: str, tgt_lang: str, s: RewardSettings,
                 validation: bool) -> QEResult:
    has_ref = bool(reference.strip())
    sentence, want = plan_requests(s, validation, has_ref)
    if not sentence and want is None:
        return QEResult()
    client = get_client(s.client)
    calls = []
    for role in sentence:
        item = request_item(role, source, translation, ref=reference, own_reference=s.own_reference.get(role, False))
        calls.append(client.score(s.models[role], [item], ["score"]))
    if want is not None:
        item = request_item(SPAN_METRIC, source, translation, ref=reference, lang=tgt_lang,
                            span_reference=s.span.reference)
        options = {}
        if "word_tags" in want:
            options = {"word_tag_source": s.span.word_tag_source}
            if s.span.word_tag_source == "probs":
                options["word_tag_threshold"] = s.span.word_tag_threshold
        calls.append(client.score(s.models["span"], [item], want, **options))
    answers = await asyncio.gather(*calls)

    out = QEResult()
    for role, results in zip(sentence, answers):
        out.answers[role], out.asked[role] = results[0], ("score",)
    if want is not None:
        span_result = answers[-1][0]
        out.answers["span"], out.asked["span"] = span_result, tuple(want)
        out.spans = [sp for sp in span_result.get("spans") or [] if isinstance(sp, dict)]
        out.counts = {k: float(n) for k, n in severity_counts(out.spans).items()}
        if "word_tags" in want:
            out.words = [w for w in span_result.get("word_tags") or [] if isinstance(w, dict)]
    return out


def spans_json(spans: list[dict]) -> str:
    """Error spans as the report reads them: a JSON string (verl averages every non-string value
    it logs; a list per sample breaks that)."""
    keep = ("start", "end", "severity", "text", "confidence")
    return json.dumps([{k: sp.get(k) for k in keep} for sp in spans], ensure_ascii=False)

"""What the QE service and its clients must agree on, in one place: the severity names, which metric
a model kind gives, and how one /score item is built.

The service reads these facts (config.py KINDS, decode.py MQM weights); the reward (src/rewards/qe.py),
the evaluation (src/evaluate/qe_metrics.py) and the report (src/report/samples_page.py) import them
from here rather than keep copies that drift. Stdlib only, and nothing else of src: the train env
imports this module (tests/test_layout.py lets src.rewards, src.evaluate and src.report import
src.scorer for it), and the scorer env must not need the train env's packages.
"""
from __future__ import annotations

from typing import Iterable, Mapping

# XCOMET's error severities, lightest first: the labels of comet's word-level head
# (comet/models/multitask/xcomet_metric.py), as /score returns them in `spans[].severity`.
SEVERITIES = ("minor", "major", "critical")

# The QE metrics a model can give, named as reward roles and evaluation metrics both use them:
#   comet   a sentence score against the reference (COMET-DA)
#   kiwi    a sentence score from source and translation alone (CometKiwi, referenceless)
#   xcomet  a word-level model: score, MQM, error spans, word tags (XCOMET, unified)
REFERENCE_METRIC, QE_METRIC, SPAN_METRIC = "comet", "kiwi", "xcomet"
METRICS = (REFERENCE_METRIC, QE_METRIC, SPAN_METRIC)


def metric_of(needs_ref: bool, word_level: bool = False) -> str:
    """The metric a model gives, from what it reads: a word-level head makes it a span model;
    otherwise it is reference-based when it needs the reference, QE when it does not."""
    if word_level:
        return SPAN_METRIC
    return REFERENCE_METRIC if needs_ref else QE_METRIC


def request_item(metric: str, src: str, mt: str, ref: str = "", lang: str = "",
                 span_reference: bool = False) -> dict:
    """One `items[]` entry of a /score request (docs/scorer-api.md) for a model giving `metric`.

    A reference-based model always gets `ref` (the service refuses an item without one); a QE model
    never does. A span model gets the MT's language when known (the service cuts spans at real
    word boundaries: jieba for zh, MeCab for ja; else it guesses from the script) and the
    reference when `span_reference` asks for it and there is one (XCOMET scores better with it)."""
    item = {"src": src, "mt": mt}
    if metric == REFERENCE_METRIC:
        item["ref"] = ref
    elif metric == SPAN_METRIC:
        if lang:
            item["lang"] = lang
        if span_reference and ref.strip():
            item["ref"] = ref
    return item


def severity_counts(spans: Iterable[Mapping]) -> dict[str, int]:
    """{n_minor, n_major, n_critical}: the error spans of each severity."""
    spans = list(spans)
    return {f"n_{sev}": sum(1 for sp in spans if sp.get("severity") == sev) for sev in SEVERITIES}

"""What the QE service and its clients must agree on, in one place: the severity names, the comet
family's metrics and the rule that picks one, what a scale is, and how one /score item is built.

The service reads these facts (the backends' descriptors, the comet backend's MQM weights); the
registry (src/scorer/backends/__init__.py) adds each backend's own metric and scale; the reward (src/rewards/qe.py),
the evaluation (src/evaluate/qe_metrics.py) and the report (src/report/samples_page.py) import them
from here rather than keep copies that drift. Stdlib only, and nothing else of src: the train env
imports this module (tests/test_layout.py lets src.rewards, src.evaluate and src.report import
src.scorer for it), and the scorer env must not need the train env's packages.
"""
from __future__ import annotations

from typing import Iterable, Mapping, NamedTuple

# XCOMET's error severities, lightest first: the labels of comet's word-level head
# (comet/models/multitask/xcomet_metric.py), as /score returns them in `spans[].severity`.
SEVERITIES = ("minor", "major", "critical")

# The metrics a model gives by what it reads, named as reward roles and evaluation metrics both use
# them (a backend's own metric, whatever its models read, is in its descriptor: backends.METRICS):
#   comet    a sentence score against the reference (COMET-DA)
#   kiwi     a sentence score from source and translation alone (CometKiwi, referenceless)
#   xcomet   a word-level model: score, MQM, error spans, word tags (XCOMET, unified)
REFERENCE_METRIC, QE_METRIC, SPAN_METRIC = "comet", "kiwi", "xcomet"


class Scale(NamedTuple):
    """What a metric's numbers mean: the range they fall in and which end is good."""
    lo: float
    hi: float
    higher_is_better: bool

    def describe(self) -> str:
        return f"{self.lo:g}-{self.hi:g}, {'higher' if self.higher_is_better else 'lower'} is better"


# COMET-family scores: about 0..1, higher is better (regression heads are clipped at 1 from above
# only, so a little below 0 happens).
COMET_SCALE = Scale(0.0, 1.0, True)


def metric_of(needs_ref: bool, word_level: bool = False) -> str:
    """The metric a model of the comet family gives, from what it reads: a word-level head makes it a
    span model; otherwise it is reference-based when it needs the reference, QE when it does not.
    (A backend with a metric of its own says so in its descriptor: KindInfo.metric.)"""
    if word_level:
        return SPAN_METRIC
    return REFERENCE_METRIC if needs_ref else QE_METRIC


def request_item(metric: str, src: str, mt: str, ref: str = "", lang: str = "",
                 span_reference: bool = False, own_reference: bool = False) -> dict:
    """One `items[]` entry of a /score request (docs/scorer-api.md) for a model giving `metric`.

    A reference-based model always gets `ref` (the service refuses an item without one); a QE model
    never does. A span model gets the MT's language when known (the service cuts spans at real
    word boundaries: jieba for zh, MeCab for ja; else it guesses from the script) and the
    reference when `span_reference` asks for it and there is one (XCOMET scores better with it).
    A model giving its backend's own metric (any other `metric`) gets the reference when
    `own_reference` asks for it and there is one: such a model reads `ref` when an item has one
    (its kinds' ref "optional"), as the backend's reference mode, and scores without it otherwise."""
    item = {"src": src, "mt": mt}
    if metric == REFERENCE_METRIC:
        item["ref"] = ref
    elif metric == SPAN_METRIC:
        if lang:
            item["lang"] = lang
        if span_reference and ref.strip():
            item["ref"] = ref
    elif metric != QE_METRIC:
        if own_reference and ref.strip():
            item["ref"] = ref
    return item


def severity_counts(spans: Iterable[Mapping]) -> dict[str, int]:
    """{n_minor, n_major, n_critical}: the error spans of each severity."""
    spans = list(spans)
    return {f"n_{sev}": sum(1 for sp in spans if sp.get("severity") == sev) for sev in SEVERITIES}

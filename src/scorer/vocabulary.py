"""What the QE service and its clients must agree on, in one place: the severity names, which metric
a model kind gives, each metric's scale (MetricX-24: 0..25, lower is better), and how one /score
item is built.

The service reads these facts (config.py KINDS, decode.py MQM weights); the reward (src/rewards/qe.py),
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

# The QE metrics a model can give, named as reward roles and evaluation metrics both use them:
#   comet    a sentence score against the reference (COMET-DA)
#   kiwi     a sentence score from source and translation alone (CometKiwi, referenceless)
#   xcomet   a word-level model: score, MQM, error spans, word tags (XCOMET, unified)
#   metricx  MetricX-24 (google-research/metricx, metricx24/): an error score, QE mode from source and
#            translation, reference mode with the reference too; its own scale (SCALES below)
REFERENCE_METRIC, QE_METRIC, SPAN_METRIC, METRICX_METRIC = "comet", "kiwi", "xcomet", "metricx"
METRICS = (REFERENCE_METRIC, QE_METRIC, SPAN_METRIC, METRICX_METRIC)

# Model kinds (conf/scorer `kind:`) that give a metric of their own whatever they read: a MetricX
# model scores with or without the reference, so needs_ref/word_level cannot say what it is.
OWN_METRIC_KINDS = {"metricx": METRICX_METRIC}


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
# MetricX-24 predicts an MQM-like error score, clipped to [0, 25] (metricx24/models.py
# MT5ForRegression.forward: `torch.clamp(predictions, 0, 25)`): 0 is no error, LOWER IS BETTER.
# The service returns it raw; the reward turns it into 1 - score/25 (unit_score).
SCALES = {METRICX_METRIC: Scale(0.0, 25.0, False)}


def scale_of(metric: str) -> Scale:
    return SCALES.get(metric, COMET_SCALE)


def unit_score(metric: str, value: float) -> float:
    """`value` of `metric` on 0..1 where 1 is best: as it is for a higher-is-better metric on 0..1,
    (hi - value) / (hi - lo) for a lower-is-better one (MetricX-24: 1 - score/25)."""
    lo, hi, higher = scale_of(metric)
    return (value - lo) / (hi - lo) if higher else (hi - value) / (hi - lo)


def metric_of(needs_ref: bool, word_level: bool = False, kind: str | None = None) -> str:
    """The metric a model gives: its kind's own (OWN_METRIC_KINDS: MetricX) when it has one; else from
    what it reads: a word-level head makes it a span model; otherwise it is reference-based when it
    needs the reference, QE when it does not."""
    if kind in OWN_METRIC_KINDS:
        return OWN_METRIC_KINDS[kind]
    if word_level:
        return SPAN_METRIC
    return REFERENCE_METRIC if needs_ref else QE_METRIC


def request_item(metric: str, src: str, mt: str, ref: str = "", lang: str = "",
                 span_reference: bool = False, metricx_reference: bool = False) -> dict:
    """One `items[]` entry of a /score request (docs/scorer-api.md) for a model giving `metric`.

    A reference-based model always gets `ref` (the service refuses an item without one); a QE model
    never does. A span model gets the MT's language when known (the service cuts spans at real
    word boundaries: jieba for zh, MeCab for ja; else it guesses from the script) and the
    reference when `span_reference` asks for it and there is one (XCOMET scores better with it).
    A MetricX model gets the reference when `metricx_reference` asks for it and there is one: the
    service scores an item with `ref` in MetricX's reference mode, one without in its QE mode."""
    item = {"src": src, "mt": mt}
    if metric == REFERENCE_METRIC:
        item["ref"] = ref
    elif metric == SPAN_METRIC:
        if lang:
            item["lang"] = lang
        if span_reference and ref.strip():
            item["ref"] = ref
    elif metric == METRICX_METRIC:
        if metricx_reference and ref.strip():
            item["ref"] = ref
    return item


def severity_counts(spans: Iterable[Mapping]) -> dict[str, int]:
    """{n_minor, n_major, n_critical}: the error spans of each severity."""
    spans = list(spans)
    return {f"n_{sev}": sum(1 for sp in spans if sp.get("severity") == sev) for sev in SEVERITIES}

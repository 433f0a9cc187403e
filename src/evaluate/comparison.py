"""This evaluation against its baseline (src/evaluate/baseline.py), per table row and metric, by the paired
bootstrap of src/evaluate/significance.py: BLEU and chrF through sacrebleu's own test on both systems'
translations and the references, each QE metric (and the share of well-formed answers) on the two systems' segment
scores, signed by the metric's
scale (src.scorer.backends owns which are lower-is-better) so that a positive difference is an improvement.

The result is summary.json's `baseline` entry, the one place the comparison is kept; the tables
(src/evaluate/outputs.py) show its delta, p-value and significance from there.
"""
from __future__ import annotations

import math
from dataclasses import asdict

from src.scorer.backends import scale_of

from .baseline import FORMAT, Baseline, segment_key
from .significance import ALPHA, CORPUS_METRICS, paired_bootstrap_corpus, paired_bootstrap_segments


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _value(segment: dict, metric: str):
    """A segment's score for `metric`; for FORMAT 100 or 0 (the table's share is in percent)."""
    if metric == FORMAT:
        ok = segment.get(FORMAT)
        return None if ok is None else 100.0 * bool(ok)
    return segment.get(metric)


def compare_row(segments: list[dict], baseline: Baseline, resamples: int, seed: int) -> dict[str, dict]:
    """metric -> the comparison (significance.CorpusComparison or SegmentComparison, as a dict) of one table
    row's segments with the baseline's same segments."""
    theirs = [baseline.by_key[segment_key(s)] for s in segments]
    results = {}
    corpus = [m for m in baseline.metrics if m in CORPUS_METRICS]
    if corpus:
        found = paired_bootstrap_corpus([s["translation"] for s in segments], [b["translation"] for b in theirs],
                                        [s["ref"] for s in segments], segments[0]["tgt_lang"], corpus,
                                        n_resamples=resamples, seed=seed)
        results.update({metric: asdict(result) for metric, result in found.items()})
    for metric in (m for m in baseline.metrics if m not in CORPUS_METRICS):
        # a QE score the service answered with NaN is None in both evaluations' records: such a segment
        # has no pair, as it has no part in the table's mean
        pairs = [(_value(s, metric), _value(b, metric)) for s, b in zip(segments, theirs)
                 if _finite(_value(s, metric)) and _finite(_value(b, metric))]
        if pairs:
            result = paired_bootstrap_segments([s for s, _ in pairs], [b for _, b in pairs],
                                               higher_is_better=scale_of(metric).higher_is_better,
                                               n_resamples=resamples, seed=seed)
            results[metric] = asdict(result)
    return {m: results[m] for m in baseline.metrics if m in results}


def compare(baseline: Baseline, rows: dict[str, list[dict]], resamples: int, seed: int) -> dict:
    """summary.json's `baseline`: the dir, how it was tested, and per table row (its key: the direction,
    or the test set and direction) each metric's comparison."""
    made_here = {"evaluation": baseline.evaluation} if baseline.evaluation else {}
    return {"dir": str(baseline.dir), **made_here, "metrics": list(baseline.metrics), "resamples": resamples,
            "seed": seed, "alpha": ALPHA,
            "rows": {key: compare_row(group, baseline, resamples, seed) for key, group in rows.items()}}

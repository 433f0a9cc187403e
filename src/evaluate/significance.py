"""Is a system better than a baseline on the same segments, by how much, and how sure: paired bootstrap
resampling; and the mean and spread of one configuration over its seeds.

Corpus BLEU and chrF go through sacrebleu's own paired bootstrap (sacrebleu.significance.PairedTest,
test_type "bs": a port of Moses' bootstrap-hypothesis-difference-significance.pl), with the BLEU tokenizer
evaluation uses (src/evaluate/text_metrics.py: the reward's, `zh` for Chinese targets), so the numbers are
sacrebleu's and its signature says how they were made (`bs:1000|seed:12345|...`). Segment-level neural
scores (COMET, CometKiwi, XCOMET, MetricX: one float a segment, the corpus score their mean) are resampled
here as sacrebleu's `_paired_bs_test` resamples: the same resample indices for a seed, the same test
statistic, the same interval rule (see `paired_bootstrap_segments`).

Pure functions: the same inputs and seed give the same result.
"""
from __future__ import annotations

import math
import os
import statistics
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Sequence

from .errors import UsageError
from .text_metrics import METRICS as CORPUS_METRICS
from .text_metrics import corpus_metrics

# sacrebleu's own default seed (what it uses when SACREBLEU_SEED is unset), so default results match
# `sacrebleu --paired-bs` run on the same files
DEFAULT_SEED = 12345
DEFAULT_RESAMPLES = 1000
ALPHA = 0.05


@dataclass(frozen=True)
class CorpusComparison:
    """A corpus metric (BLEU or chrF, higher is better) of a system against a baseline, by sacrebleu."""
    metric: str            # sacrebleu's name for it: "BLEU", "chrF2"
    system: float          # corpus score of the system
    baseline: float        # corpus score of the baseline
    delta: float           # system - baseline
    p_value: float         # sacrebleu's paired-bs p-value (1.0 for identical outputs, see paired_bootstrap_corpus)
    significant: bool      # p_value < ALPHA and delta != 0
    system_mean: float     # the mean of the system's score over the resamples (sacrebleu's "mu")
    system_ci: float       # half-width of its 95% interval (sacrebleu's "+- 95% CI")
    baseline_mean: float
    baseline_ci: float
    signature: str         # sacrebleu's signature, with bs:<resamples>|seed:<seed>


@dataclass(frozen=True)
class SegmentComparison:
    """A segment-level metric's mean of a system against a baseline over the same segments."""
    segments: int
    system: float          # mean over the segments, as the metric reads (MetricX: lower is better)
    baseline: float
    delta: float           # the improvement: system - baseline, or baseline - system when lower is better
    low: float             # 95% bootstrap interval of delta
    high: float
    p_value: float         # see paired_bootstrap_segments
    significant: bool      # p_value < ALPHA and delta != 0
    higher_is_better: bool
    resamples: int
    seed: int


@dataclass(frozen=True)
class SeedSummary:
    """One configuration's score over its seeds."""
    mean: float
    std: float             # sample standard deviation (n - 1 in the denominator)
    n: int


def _check_paired(system: Sequence, baseline: Sequence, what: str) -> None:
    if len(system) != len(baseline):
        raise UsageError(f"the system has {len(system)} {what} and the baseline {len(baseline)}; a paired test "
                         f"needs both systems' {what} for the same segments, in the same order")
    if not system:
        raise UsageError(f"no {what}: a paired test needs at least one segment")


def resampling_problem(n_resamples: int, seed: int, resamples_key: str = "n_resamples",
                       seed_key: str = "seed") -> str | None:
    """What is wrong with these resampling settings (named as the caller's user knows them), or None."""
    if n_resamples < 1:
        return f"{resamples_key} must be a positive integer, got {n_resamples}"
    # sacrebleu takes a seed of 0 as "no seed" (PairedTest.__call__: `self._seed if self._seed else None`)
    if seed < 1:
        return f"{seed_key} must be a positive integer (sacrebleu takes 0 as unseeded), got {seed}"
    return None


def _check_resampling(n_resamples: int, seed: int) -> None:
    problem = resampling_problem(n_resamples, seed)
    if problem:
        raise UsageError(problem)


@contextmanager
def _sacrebleu_seed(seed: int):
    """sacrebleu's paired test reads its seed only from SACREBLEU_SEED, when it is built: set it for that."""
    before = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = before


def paired_bootstrap_corpus(system: Sequence[str], baseline: Sequence[str], references: Sequence[str],
                            tgt_lang: str, metrics: Sequence[str] = CORPUS_METRICS, *,
                            n_resamples: int = DEFAULT_RESAMPLES,
                            seed: int = DEFAULT_SEED) -> dict[str, CorpusComparison]:
    """BLEU and/or chrF of `system` against `baseline` (translations of the same segments, in order) by
    sacrebleu's paired bootstrap, keyed by our metric names ("bleu", "chrf").

    The p-value is sacrebleu's (sacrebleu.significance._paired_bs_test): over B resamples of the segments,
    d_b = |score_b(system) - score_b(baseline)|, and p = (1 + #{b: d_b - mean(d) > |delta|}) / (B + 1). Its
    strict ">" gives two identical outputs p = 1/(B+1), "significant" for a difference of 0; every resample
    ties there, so their p is 1.0 (what counting ties, as paired_bootstrap_segments does, gives), and a
    zero difference is never called significant."""
    _check_paired(system, baseline, "translations")
    if len(references) != len(system):
        raise UsageError(f"{len(references)} references for {len(system)} translations; give one reference a "
                         f"segment, in the translations' order")
    _check_resampling(n_resamples, seed)
    unknown = [m for m in metrics if m not in CORPUS_METRICS]
    if unknown or not metrics:
        raise UsageError(f"corpus metrics: unknown {', '.join(unknown) or '(none)'}; "
                         f"choose from {', '.join(CORPUS_METRICS)}")
    from sacrebleu.significance import PairedTest

    # the corpus BLEU and chrF evaluation reports (text_metrics.corpus_scores): tokenizer per target language
    built = corpus_metrics(tgt_lang)
    with _sacrebleu_seed(seed):
        test = PairedTest([("baseline", list(baseline)), ("system", list(system))],
                          {m: built[m] for m in metrics}, [list(references)], test_type="bs", n_samples=n_resamples)
    signatures, scores = test()
    identical = list(system) == list(baseline)
    results = {}
    # scores: {"System": names, <sacrebleu name>: [baseline Result, system Result], ...} in `metrics` order
    for ours, name in zip(metrics, [k for k in scores if k != "System"]):
        base, sys_ = scores[name]
        delta = float(sys_.score - base.score)
        p = 1.0 if identical else float(sys_.p_value)
        results[ours] = CorpusComparison(
            metric=name, system=float(sys_.score), baseline=float(base.score), delta=delta, p_value=p,
            significant=delta != 0 and p < ALPHA, system_mean=float(sys_.mean), system_ci=float(sys_.ci),
            baseline_mean=float(base.mean), baseline_ci=float(base.ci), signature=str(signatures[name]))
    return results


def paired_bootstrap_segments(system: Sequence[float], baseline: Sequence[float], *, higher_is_better: bool = True,
                              n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> SegmentComparison:
    """Segment scores of `system` against `baseline` (the same segments, in order), the corpus score being
    their mean, by paired bootstrap resampling as sacrebleu.significance._paired_bs_test does it:

    - gain_i = system_i - baseline_i (baseline_i - system_i when lower is better), delta = mean(gain);
    - B resamples of the segments with replacement, the indices numpy.random.default_rng(seed).choice(n,
      (B, n)), as sacrebleu draws them; delta_b = the mean gain over resample b;
    - the 95% interval of delta: the order statistics sacrebleu's estimate_ci takes, sorted delta_b at
      B // 40 and B - B // 40 - 1;
    - the p-value of "no difference", sacrebleu's statistic: with d_b = |delta_b| and t_b = d_b - mean(d),
      p = (1 + #{b: t_b >= |delta|}) / (B + 1). sacrebleu counts t_b > |delta| (strictly); ties count
      here, so a system against itself, every resample a tie, gets p = 1, not 1/(B+1).

    `significant` is p < ALPHA (0.05) with a delta other than 0."""
    import numpy as np

    _check_paired(system, baseline, "scores")
    _check_resampling(n_resamples, seed)
    sys_, base = np.asarray(system, dtype=float), np.asarray(baseline, dtype=float)
    if not (np.isfinite(sys_).all() and np.isfinite(base).all()):
        raise UsageError("a segment score is NaN or infinite: score every segment of both systems first")
    gain = sys_ - base if higher_is_better else base - sys_
    delta = float(gain.mean())
    n = len(gain)
    idx = np.random.default_rng(seed).choice(n, size=(n_resamples, n), replace=True)
    deltas = np.sort(gain[idx].mean(axis=1))
    lower = n_resamples // 40
    d = np.abs(deltas)
    p = (1 + int(np.sum(d - d.mean() >= abs(delta)))) / (n_resamples + 1)
    return SegmentComparison(segments=n, system=float(sys_.mean()), baseline=float(base.mean()), delta=delta,
                             low=float(deltas[lower]), high=float(deltas[n_resamples - lower - 1]), p_value=p,
                             significant=delta != 0 and p < ALPHA, higher_is_better=higher_is_better,
                             resamples=n_resamples, seed=seed)


def summarise_seeds(values: Sequence[float]) -> SeedSummary:
    """Mean and sample standard deviation of one configuration's score over its seeds (at least two: one
    seed has no spread to report)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        raise UsageError(f"{len(values)} seed(s): a mean and standard deviation over seeds need at least two runs")
    if not all(math.isfinite(v) for v in values):
        raise UsageError(f"a seed's score is NaN or infinite: {values}")
    return SeedSummary(mean=statistics.fmean(values), std=statistics.stdev(values), n=len(values))

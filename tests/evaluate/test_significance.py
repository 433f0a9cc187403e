"""Paired bootstrap significance (src/evaluate/significance.py) against real sacrebleu: corpus BLEU/chrF
through sacrebleu's own paired test, segment-level scores resampled the same way, seeds summarised."""
from __future__ import annotations

import os
import random
import statistics

import pytest
from sacrebleu.metrics import BLEU

from src.evaluate.options import UsageError
from src.evaluate.significance import (
    paired_bootstrap_corpus,
    paired_bootstrap_segments,
    summarise_seeds,
)
from src.evaluate.text_metrics import corpus_scores
from tests.helpers.en_zh_systems import GOOD, REFS, WEAK


def test_a_system_against_itself_differs_by_nothing_and_is_not_significant():
    for name, result in paired_bootstrap_corpus(GOOD, GOOD, REFS, "zh").items():
        assert result.delta == 0 and result.p_value >= 0.05 and not result.significant, (name, result)
    segment = paired_bootstrap_segments([0.81, 0.77, 0.9, 0.65], [0.81, 0.77, 0.9, 0.65])
    assert (segment.delta, segment.low, segment.high, segment.p_value) == (0, 0, 0, 1.0)
    assert not segment.significant


def test_the_bleu_delta_is_sacrebleus_corpus_bleu_difference_with_evaluations_tokenizer():
    result = paired_bootstrap_corpus(GOOD, WEAK, REFS, "zh")
    zh = BLEU(tokenize="zh")
    direct = zh.corpus_score(GOOD, [REFS]).score - zh.corpus_score(WEAK, [REFS]).score
    assert result["bleu"].delta == pytest.approx(direct, abs=1e-9)
    # and the same scores the evaluation table reports for each system
    good, weak = corpus_scores(GOOD, REFS, "zh"), corpus_scores(WEAK, REFS, "zh")
    assert (result["bleu"].system, result["bleu"].baseline) == pytest.approx((good.bleu, weak.bleu))
    assert (result["chrf"].system, result["chrf"].baseline) == pytest.approx((good.chrf, weak.chrf))
    assert "tok:zh" in result["bleu"].signature and "tok:zh" in good.bleu_signature
    assert "bs:1000" in result["bleu"].signature and "seed:12345" in result["bleu"].signature
    assert result["chrf"].metric == "chrF2"


def test_a_clearly_better_system_is_significant():
    result = paired_bootstrap_corpus(GOOD, WEAK, REFS, "zh")
    for comparison in result.values():
        assert comparison.delta > 20 and comparison.p_value < 0.05 and comparison.significant
    worse = paired_bootstrap_corpus(WEAK, GOOD, REFS, "zh")["bleu"]
    assert worse.delta < 0 and worse.significant  # significant either way; the sign says which


def test_corpus_results_follow_the_seed_and_leave_the_environment_as_it_was(monkeypatch):
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)
    once = paired_bootstrap_corpus(GOOD, WEAK, REFS, "zh", seed=7, n_resamples=200)
    assert "SACREBLEU_SEED" not in os.environ
    assert once == paired_bootstrap_corpus(GOOD, WEAK, REFS, "zh", seed=7, n_resamples=200)
    other = paired_bootstrap_corpus(GOOD, WEAK, REFS, "zh", seed=8, n_resamples=200)
    assert "seed:7" in once["bleu"].signature and "bs:200" in once["bleu"].signature
    assert "seed:8" in other["bleu"].signature
    assert other["bleu"].system_mean != once["bleu"].system_mean  # other resamples
    assert other["bleu"].delta == once["bleu"].delta  # the observed difference is no resample
    monkeypatch.setenv("SACREBLEU_SEED", "99")
    paired_bootstrap_corpus(GOOD, WEAK, REFS, "zh", seed=7, n_resamples=50)
    assert os.environ["SACREBLEU_SEED"] == "99"


def noisy_scores(seed: int, n: int = 200) -> tuple[list[float], list[float]]:
    """(system, baseline) COMET-like segment scores: the same segments, the system a little different."""
    rng = random.Random(seed)
    baseline = [min(1.0, max(0.0, rng.gauss(0.75, 0.1))) for _ in range(n)]
    return [b + rng.gauss(0.0, 0.05) for b in baseline], baseline


def test_a_system_better_on_every_segment_is_significant_with_an_interval_above_zero():
    _, baseline = noisy_scores(1)
    rng = random.Random(2)
    system = [b + 0.01 + rng.random() * 0.04 for b in baseline]
    result = paired_bootstrap_segments(system, baseline)
    assert result.p_value < 0.05 and result.significant
    assert 0 < result.low <= result.delta <= result.high
    assert result.delta == pytest.approx(statistics.fmean(system) - statistics.fmean(baseline))


def test_noise_alone_is_not_significant_and_its_interval_holds_zero():
    system, baseline = noisy_scores(3)
    result = paired_bootstrap_segments(system, baseline)
    assert result.low < 0 < result.high and result.p_value > 0.05 and not result.significant


def test_lower_is_better_turns_the_delta_into_the_improvement():
    baseline = [5.0, 3.2, 7.5, 1.1, 4.4, 2.9, 6.0, 3.3]  # MetricX-like: 0 (no error) to 25
    system = [s - 1.0 for s in baseline]  # one point fewer errors on every segment
    better = paired_bootstrap_segments(system, baseline, higher_is_better=False)
    assert better.delta == pytest.approx(1.0) and better.significant
    assert better.system == pytest.approx(statistics.fmean(system))  # the means as the metric reads
    read_wrong = paired_bootstrap_segments(system, baseline, higher_is_better=True)
    assert read_wrong.delta == pytest.approx(-1.0)


def test_segment_results_are_fixed_by_the_seed():
    system, baseline = noisy_scores(4)
    once = paired_bootstrap_segments(system, baseline, seed=11)
    assert once == paired_bootstrap_segments(system, baseline, seed=11)
    other = paired_bootstrap_segments(system, baseline, seed=12)
    assert other.delta == once.delta and (other.low, other.high) != (once.low, once.high)


def test_systems_of_different_lengths_are_refused_in_one_line():
    for call in (lambda: paired_bootstrap_segments([0.5, 0.6, 0.7], [0.5, 0.6]),
                 lambda: paired_bootstrap_corpus(GOOD, GOOD[:-1], REFS, "zh")):
        with pytest.raises(UsageError) as info:
            call()
        assert "\n" not in str(info.value) and "same segments" in str(info.value)
    with pytest.raises(UsageError, match="8 references for 7 translations"):
        paired_bootstrap_corpus(GOOD[:-1], GOOD[:-1], REFS, "zh")
    with pytest.raises(UsageError, match="NaN"):
        paired_bootstrap_segments([0.5, float("nan")], [0.5, 0.6])
    with pytest.raises(UsageError, match="sacrebleu takes 0 as unseeded"):
        paired_bootstrap_corpus(GOOD, WEAK, REFS, "zh", seed=0)


def test_seeds_summarised_by_mean_and_sample_standard_deviation():
    summary = summarise_seeds([31.2, 30.4, 31.9])
    assert summary.n == 3
    assert summary.mean == pytest.approx(31.1666666667)
    assert summary.std == pytest.approx(statistics.stdev([31.2, 30.4, 31.9]))
    assert summary.std == pytest.approx(0.7505553499)
    with pytest.raises(UsageError, match="at least two runs"):
        summarise_seeds([31.2])

"""BLEU and chrF with sacrebleu: corpus scores per direction and sentence scores per segment.

The BLEU tokenizer per target language is the reward's (src/rewards/bleu.py: zh -> `zh`,
ja -> `ja-mecab`, else `13a`), so evaluation and training BLEU agree. Corpus BLEU uses sacrebleu's
defaults (no effective order: that is for sentence BLEU); sentence BLEU is the reward's own
function. chrF is sacrebleu's default chrF2 (character 6-grams, no word n-grams).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from src.rewards.bleu import sentence_bleu, tokenizer_for


# the metrics computed from the text alone (no scorer), by the names the options and results use
METRICS = ("bleu", "chrf")


def corpus_metrics(tgt_lang: str) -> dict:
    """sacrebleu's metric objects for a corpus score, by name: what corpus_scores scores with and what the
    paired bootstrap (src/evaluate/significance.py) resamples, so both report the same numbers."""
    from sacrebleu.metrics import BLEU, CHRF

    return {"bleu": BLEU(tokenize=tokenizer_for(tgt_lang)), "chrf": CHRF()}


@dataclass(frozen=True)
class CorpusScores:
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str


def corpus_scores(hypotheses: list[str], references: list[str], tgt_lang: str) -> CorpusScores:
    metrics = corpus_metrics(tgt_lang)
    bleu, chrf = metrics["bleu"], metrics["chrf"]
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    return CorpusScores(float(b.score), float(c.score), str(bleu.get_signature()), str(chrf.get_signature()))


@lru_cache(maxsize=None)
def _sentence_chrf():
    from sacrebleu.metrics import CHRF

    return CHRF()


def segment_scores(hypothesis: str, reference: str, tgt_lang: str) -> dict:
    return {"bleu": sentence_bleu(hypothesis, reference, tgt_lang),
            "chrf": float(_sentence_chrf().sentence_score(hypothesis, [reference]).score)}

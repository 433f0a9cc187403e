"""Sentence BLEU with sacrebleu, tokenised for the target language.

zh -> sacrebleu's `zh` tokenizer, ja -> `ja-mecab` (needs mecab-python3 + ipadic, pinned in
envs/train.in), everything else -> `13a`. One BLEU object per tokenizer and process:
building the MeCab tagger is the expensive part, and sacrebleu caches tokenised lines on it.
"""
from __future__ import annotations

from functools import lru_cache

from src.rewards.languages import base_lang

_TOKENIZERS = {"zh": "zh", "ja": "ja-mecab"}


def tokenizer_for(tgt_lang: str | None) -> str:
    return _TOKENIZERS.get(base_lang(tgt_lang), "13a")


@lru_cache(maxsize=None)
def _bleu(tokenize: str):
    from sacrebleu.metrics import BLEU

    # effective_order: a short sentence without any 4-gram match still gets a non-zero score
    return BLEU(tokenize=tokenize, effective_order=True)


def sentence_bleu(hypothesis: str, reference: str, tgt_lang: str | None) -> float:
    """BLEU in [0, 100] of one hypothesis against one reference."""
    return float(_bleu(tokenizer_for(tgt_lang)).sentence_score(hypothesis, [reference]).score)

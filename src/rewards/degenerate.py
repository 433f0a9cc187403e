"""Cheap checks for answers not worth a scorer call: empty, a copy of the source, the wrong
script for the target language, an absurd length against the reference.

Each check is exempted when the reference itself would fail it (a source made of names or
numbers is legitimately copied; a zh reference written in Latin letters makes Latin output fine).
Texts are looked at up to ANALYSED_CHARS characters: a 1 MB response costs the same as a 10 kB one.
What these let through (the wrong language in the right script, loops under 4x, untranslated source
text, partial translations) is src/rewards/guards.py's.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from src.rewards.languages import SCRIPTS, base_lang
from src.rewards.typed_settings import setting_field

ANALYSED_CHARS = 10_000


@dataclass(frozen=True)
class DegenerateSettings:
    """reward.degenerate: the cheap checks before any scorer call (one typed definition: src/rewards/typed_settings.py;
    the values in conf/reward_base/default.yaml; ranges checked in src/rewards/settings.py RewardSettings._check)."""
    empty_penalty: float = setting_field("the answer part of an empty answer")
    source_copy_penalty: float = setting_field("the answer part of a copy of the source")
    copy_similarity: float = setting_field("char-bigram Jaccard similarity with the source at or above which an "
                                           "answer is a copy, in (0, 1] (not when the reference is that close)")
    wrong_script_penalty: float = setting_field("the answer part of an answer in the wrong script")
    min_script_share: float = setting_field("the share of letters in the target's script below which the script is "
                                            "wrong, in [0, 1] (not when the reference fails it too)")
    length_ratio_penalty: float = setting_field("the answer part of an answer of absurd length")
    max_length_ratio: float = setting_field("translation/reference characters above this, or below its inverse, is "
                                            "absurd, > 1")
# Longer than this is absurd for sentence-level MT whatever the reference says (and keeps every
# request to the service far below its body limit).
MAX_TRANSLATION_CHARS = 20_000
# Characters added to both lengths of the length ratio, so 1-character references do not make
# every 3-character answer absurd.
LENGTH_SLACK = 3

# target language (base code) -> letters that count as its script (src/rewards/languages.py SCRIPTS)
_SCRIPT_LETTERS = {lang: re.compile(f"[{script.letters}]") for lang, script in SCRIPTS.items()}

FLAGS = ("degenerate_empty", "degenerate_source_copy", "degenerate_wrong_script", "degenerate_length_ratio")


@dataclass(frozen=True)
class Degenerate:
    empty: bool = False
    source_copy: bool = False
    wrong_script: bool = False
    length_ratio: bool = False

    @property
    def any(self) -> bool:
        return self.empty or self.source_copy or self.wrong_script or self.length_ratio

    def flags(self) -> dict[str, float]:
        """As reward components: 1.0 flagged, 0.0 not (means give rates)."""
        values = (self.empty, self.source_copy, self.wrong_script, self.length_ratio)
        return {name: float(v) for name, v in zip(FLAGS, values)}

    def penalty(self, s: DegenerateSettings) -> float:
        """The answer score of a flagged answer: the lowest penalty that applies."""
        applied = [p for flagged, p in ((self.empty, s.empty_penalty), (self.source_copy, s.source_copy_penalty),
                                        (self.wrong_script, s.wrong_script_penalty),
                                        (self.length_ratio, s.length_ratio_penalty)) if flagged]
        return min(applied)


def _normalise(text: str) -> str:
    """Compatibility-folded, lower-cased, without whitespace, punctuation and symbols."""
    text = unicodedata.normalize("NFKC", text[:ANALYSED_CHARS]).casefold()
    return "".join(ch for ch in text if not ch.isspace() and unicodedata.category(ch)[0] not in "PSZC")


def _bigrams(text: str) -> set[str]:
    return {text[i:i + 2] for i in range(len(text) - 1)} if len(text) > 1 else {text}


def copy_similarity(a: str, b: str) -> float:
    """Char-bigram Jaccard similarity of the normalised texts (1.0 = same text)."""
    na, nb = _normalise(a), _normalise(b)
    if not na or not nb:
        return 0.0
    if na == nb:
        return 1.0
    ba, bb = _bigrams(na), _bigrams(nb)
    return len(ba & bb) / len(ba | bb)


def script_share(text: str, lang: str) -> float | None:
    """Share of letters in `lang`'s script; None when unknown (no rule for the language, or no
    letters at all, e.g. only digits)."""
    pattern = _SCRIPT_LETTERS.get(base_lang(lang))
    if pattern is None:
        return None
    sample = text[:ANALYSED_CHARS]
    letters = sum(1 for ch in sample if ch.isalpha())
    if letters == 0:
        return None
    return len(pattern.findall(sample)) / letters


def _is_copy(text: str, source: str, s: DegenerateSettings) -> bool:
    return copy_similarity(text, source) >= s.copy_similarity


def _wrong_script(text: str, lang: str, s: DegenerateSettings) -> bool:
    share = script_share(text, lang)
    return share is not None and share < s.min_script_share


def _length_ratio_bad(text: str, reference: str, s: DegenerateSettings) -> bool:
    # len() is O(1): no cap needed, and a huge answer is caught without reading it
    ratio = (len(text) + LENGTH_SLACK) / (len(reference) + LENGTH_SLACK)
    return ratio > s.max_length_ratio or ratio < 1.0 / s.max_length_ratio


def detect(translation: str, source: str, reference: str, tgt_lang: str, s: DegenerateSettings) -> Degenerate:
    """Every flag that applies (all are computed, so each is logged)."""
    if not translation.strip():
        return Degenerate(empty=True)
    reference = reference or ""
    has_ref = bool(reference.strip())
    source_copy = bool(source.strip()) and _is_copy(translation, source, s) and not (
        has_ref and _is_copy(reference, source, s))
    wrong_script = _wrong_script(translation, tgt_lang, s) and not (has_ref and _wrong_script(reference, tgt_lang, s))
    length_ratio = len(translation) > MAX_TRANSLATION_CHARS or (
        has_ref and _length_ratio_bad(translation.strip(), reference.strip(), s))
    return Degenerate(source_copy=source_copy, wrong_script=wrong_script, length_ratio=length_ratio)

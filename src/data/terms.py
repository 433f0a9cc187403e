"""Terminology: a segment's required term translations, read from the input, matched in text, measured.

A term is a source expression and the target expression it must be translated as (`Term(src, tgt)`). They
reach a segment three ways (src/data/readers.py, src/data/prepare.py):

    a `terms` list per line of a jsonl (or a JSON `terms` column of a TSV), each term one of
        {"src": "...", "tgt": "..."}          this project's form
        {"zh": "...", "en": "..."}            keyed by language, as the WMT23 terminology task's `hints`
                                              (zouharvi/wmt-terminology-2023) and its term.proper/random files
        ["...", "..."]                        source, target
    WMT23's `hints` {"term": [...], "rand": [...]} per line, one of them chosen with --terms-hints
    a TSV glossary (--glossary: source<TAB>target per line), whose entries are matched against each source

Matching (`appears`) is what a reader of the translation would call "the term is there", the same for the
glossary's match against a source, the term success rate and the term reward: both texts NFKC-normalised
(full-width letters and digits read as half-width) and case-folded; a term that contains CJK, kana or hangul is
found as a substring with the spaces between such characters ignored (those scripts have no spaces between
words, and tokenised WMT Chinese has them), any other term only where it is not inside a longer word
(`GPU` is not found in `GPUs` nor `cat` in `category`).

The metrics (issue 46; WMT23 terminology task: Semenov et al. 2023):
    term success rate   over the terms whose source side is in their segment's source: the share whose target
                        side appears in the translation (`success`)
    term consistency    over the source terms found in two segments or more: the share translated as their
                        required target in every segment they occur in (`consistency`): one source term, one
                        translation across the set
Stdlib only: the reward workers import it.
"""
from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Mapping, Sequence


class TermsError(ValueError):
    """A terms value that cannot be read; the message says what is wrong (the reader adds where)."""


@dataclass(frozen=True)
class Term:
    src: str
    tgt: str

    def reversed(self) -> "Term":
        return Term(self.tgt, self.src)

    def as_dict(self) -> dict[str, str]:
        return {"src": self.src, "tgt": self.tgt}


def _one(value, src_lang: str, tgt_lang: str) -> Term:
    if isinstance(value, Mapping):
        for s, t in (("src", "tgt"), (src_lang, tgt_lang)):
            if s in value and t in value:
                src, tgt = value[s], value[t]
                break
        else:
            raise TermsError(f"a term must have src and tgt keys (or {src_lang} and {tgt_lang}), got keys "
                             f"{', '.join(map(str, value)) or 'none'}")
    elif isinstance(value, (list, tuple)) and len(value) == 2:
        src, tgt = value
    else:
        raise TermsError(f"a term must be {{\"src\": ..., \"tgt\": ...}} or [source, target], got {value!r}"[:300])
    if not isinstance(src, str) or not isinstance(tgt, str) or not src.strip() or not tgt.strip():
        raise TermsError(f"a term's source and target must be non-empty text, got {src!r} and {tgt!r}"[:300])
    return Term(" ".join(src.split()), " ".join(tgt.split()))


def parse_terms(value, src_lang: str, tgt_lang: str) -> tuple[Term, ...]:
    """A segment's terms from a JSON value (or its text: a TSV cell): a list of terms in any form the module
    docstring names, null or "" for none. Repeated terms are kept once, in their first place."""
    if isinstance(value, str):
        if not value.strip():
            return ()
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise TermsError(f"terms are not JSON ({exc.msg} at column {exc.colno})") from None
    if value is None:
        return ()
    # a list, or what a parquet reader makes of one (a numpy array of dicts through pandas)
    if isinstance(value, (Mapping, bytes)) or not hasattr(value, "__iter__"):
        raise TermsError(f"terms must be a list of terms, got {type(value).__name__}")
    return tuple(dict.fromkeys(_one(v, src_lang, tgt_lang) for v in value))


# ----------------------------------------------------------------------------------------------
# matching
# ----------------------------------------------------------------------------------------------
_UNSPACED_PREFIXES = ("CJK ", "HIRAGANA", "KATAKANA", "HANGUL")


@lru_cache(maxsize=65536)
def _unspaced_char(ch: str) -> bool:
    """A character of a script written without spaces between words (Han, kana, hangul syllables)."""
    return unicodedata.name(ch, "").startswith(_UNSPACED_PREFIXES)


def normalise(text: str) -> str:
    """NFKC (width), case-folded, runs of whitespace as one space, and no space next to a CJK/kana/hangul
    character (so "人工 智能" and "人工智能" are one text)."""
    text = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    if " " not in text:
        return text
    chars = text.split(" ")
    out = [chars[0]]
    for part in chars[1:]:
        prev = out[-1]
        if (prev and _unspaced_char(prev[-1])) or (part and _unspaced_char(part[0])):
            out[-1] = prev + part
        else:
            out.append(part)
    return " ".join(out)


def _word_char(ch: str) -> bool:
    return ch.isalnum() and not _unspaced_char(ch)


@lru_cache(maxsize=16384)
def _normalised_term(term: str) -> str:
    return normalise(term)


def _spans(term: str, text: str) -> list[tuple[int, int]]:
    """Where `term` is in the normalised `text`, not overlapping: where the term's first (last) character is a
    letter or digit of a spaced script, the text's character before (after) it must not be one."""
    t = _normalised_term(term)
    if not t:
        return []
    lead, tail = _word_char(t[0]), _word_char(t[-1])
    found = []
    start = text.find(t)
    while start >= 0:
        end = start + len(t)
        if not (lead and start and _word_char(text[start - 1])) and \
                not (tail and end < len(text) and _word_char(text[end])):
            found.append((start, end))
            start = text.find(t, end)
        else:
            start = text.find(t, start + 1)
    return found


def _findable(term: str, text: str) -> bool:
    return bool(_spans(term, text))


def occurrences(term: str, text: str) -> int:
    """How many times `term` is in `text` (not overlapping), matched as `appears` matches."""
    return len(_spans(term, normalise(text)))


def covered_share(terms_text: Sequence[str], text: str) -> float:
    """The share of `text`'s characters (spaces aside) inside an occurrence of one of `terms_text`; 0.0 for a text
    without any."""
    norm = normalise(text)
    covered = [False] * len(norm)
    for term in terms_text:
        for start, end in _spans(term, norm):
            covered[start:end] = [True] * (end - start)
    chars = [c for ch, c in zip(norm, covered) if not ch.isspace()]
    return sum(chars) / len(chars) if chars else 0.0


def appears(term: str, text: str) -> bool:
    """Whether `term` is in `text` as the module docstring says (both normalised here)."""
    return _findable(term, normalise(text))


def present(terms: Iterable[Term], source: str) -> tuple[Term, ...]:
    """The terms whose source side is in `source`."""
    text = normalise(source)
    return tuple(t for t in terms if _findable(t.src, text))


def match_glossary(source: str, glossary: Sequence[Term]) -> tuple[Term, ...]:
    """The glossary's entries found in `source`, longest source side first; an entry whose source side lies
    inside a longer one found (`learning` inside `machine learning`) is left out, and one source side is
    given one target (its first entry's)."""
    text = normalise(source)
    found: list[Term] = []
    taken: set[str] = set()
    for term in sorted(glossary, key=lambda t: -len(normalise(t.src))):
        key = normalise(term.src)
        if key in taken or any(key in normalise(f.src) for f in found):
            continue
        if _findable(term.src, text):
            found.append(term)
            taken.add(key)
    return tuple(found)


# ----------------------------------------------------------------------------------------------
# metrics
# ----------------------------------------------------------------------------------------------
def hits(terms: Sequence[Term], source: str, translation: str) -> tuple[int, int]:
    """(terms whose target side is in the translation, terms whose source side is in the source)."""
    required = present(terms, source)
    text = normalise(translation)
    return sum(_findable(t.tgt, text) for t in required), len(required)


def success(rows: Iterable[tuple[Sequence[Term], str, str]]) -> tuple[float | None, int]:
    """Term success rate over (terms, source, translation) rows: (share of required terms found, terms
    required); (None, 0) when no row requires one."""
    found = total = 0
    for terms, source, translation in rows:
        f, t = hits(terms, source, translation)
        found, total = found + f, total + t
    return (found / total if total else None), total


def consistency(rows: Iterable[tuple[Sequence[Term], str, str]]) -> tuple[float | None, int]:
    """Term consistency over (terms, source, translation) rows: (share of the source terms required in two
    segments or more that are translated as required in every one of them, how many such terms); (None, 0)
    when no source term is required twice. A source term with two required targets counts under each."""
    seen: dict[tuple[str, str], list[bool]] = {}
    for terms, source, translation in rows:
        text = normalise(translation)
        for t in present(terms, source):
            seen.setdefault((normalise(t.src), normalise(t.tgt)), []).append(_findable(t.tgt, text))
    repeated = [all(v) for v in seen.values() if len(v) >= 2]
    return (sum(repeated) / len(repeated) if repeated else None), len(repeated)

"""Word segmentation of the MT and OK/BAD word tags, all by character offsets.

The model's own subword tokenization is left alone (the '▁' word-start trick would make a whole
Chinese sentence one word); words come from a real segmenter and are matched to error spans or
subword probabilities by overlapping character ranges. Segmenters: jieba for Chinese, fugashi +
unidic-lite (MeCab) for Japanese, whitespace otherwise.
"""
from __future__ import annotations

import logging
import re
import threading
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

Offset = Tuple[int, int]

_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")
_NON_SPACE = re.compile(r"\S+")

_lock = threading.Lock()
_mecab_lock = threading.Lock()  # one MeCab tagger, and batches may be decoded on 2 threads
_jieba = None
_mecab = None


def normalize_lang(lang: Optional[str]) -> Optional[str]:
    """'zh-CN', 'zho', 'ZH_tw' -> 'zh'; 'ja-JP', 'jpn' -> 'ja'; others -> 'other'; None -> None."""
    if not lang:
        return None
    code = lang.strip().lower().replace("_", "-").split("-")[0]
    if code in ("zh", "zho", "chi", "cmn", "yue"):
        return "zh"
    if code in ("ja", "jpn", "jp"):
        return "ja"
    return "other"


def detect_lang(text: str) -> str:
    """Script-based guess when the client gives no language: kana means Japanese, Han without
    kana means Chinese, anything else is segmented on whitespace."""
    if _KANA.search(text):
        return "ja"
    if _HAN.search(text):
        return "zh"
    return "other"


def _get_jieba():
    global _jieba
    with _lock:
        if _jieba is None:
            with warnings.catch_warnings():  # jieba imports the deprecated pkg_resources
                warnings.simplefilter("ignore")
                import jieba

            jieba.setLogLevel(logging.WARNING)
            jieba.initialize()  # loads the dictionary now, not on the first request
            _jieba = jieba
    return _jieba


def _get_mecab():
    global _mecab
    with _lock:
        if _mecab is None:
            import fugashi

            _mecab = fugashi.Tagger()  # picks up unidic-lite's dictionary
    return _mecab


def warm_up() -> None:
    _get_jieba()
    _get_mecab()


def _zh_words(text: str) -> List[Offset]:
    return [(s, e) for w, s, e in _get_jieba().tokenize(text) if w.strip()]


def _ja_words(text: str) -> List[Offset]:
    out: List[Offset] = []
    pos = 0
    tagger = _get_mecab()
    with _mecab_lock:
        surfaces = [node.surface for node in tagger(text)]
    for surface in surfaces:
        if not surface.strip():
            continue
        start = text.find(surface, pos)
        if start < 0:  # MeCab changed the surface form; leave the rest to the whitespace rule
            out.extend((m.start() + pos, m.end() + pos) for m in _NON_SPACE.finditer(text[pos:]))
            break
        out.append((start, start + len(surface)))
        pos = start + len(surface)
    return out


def _space_words(text: str) -> List[Offset]:
    return [m.span() for m in _NON_SPACE.finditer(text)]


def segment(text: str, lang: Optional[str] = None) -> List[Offset]:
    """Character (start, end) of each word of `text`."""
    code = normalize_lang(lang) or detect_lang(text)
    if code == "zh":
        return _zh_words(text)
    if code == "ja":
        return _ja_words(text)
    return _space_words(text)


def _overlaps(a: Offset, b: Offset) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def tags_from_spans(text: str, words: Sequence[Offset], spans: Sequence[Dict],
                    covered_end: Optional[int] = None) -> List[Dict]:
    """A word is BAD when any error span overlaps it. Words starting at or after
    `covered_end` (the MT was truncated before them) were never seen: tag None."""
    out = []
    for ws, we in words:
        if covered_end is not None and ws >= covered_end:
            tag = None
        else:
            tag = "BAD" if any(_overlaps((ws, we), (s["start"], s["end"])) for s in spans) else "OK"
        out.append({"word": text[ws:we], "start": ws, "end": we, "tag": tag})
    return out


def tags_from_probs(text: str, words: Sequence[Offset], subwords: Sequence[Offset],
                    p_bad: Sequence[float], threshold: float) -> List[Dict]:
    """A word's P(BAD) is the max over its subwords of 1 - P(O); BAD when > threshold.
    `subwords` are trimmed MT subword offsets (specials removed) aligned with `p_bad`.
    Words no subword reaches (truncated away) get tag None and p_bad None."""
    out = []
    j = 0
    for ws, we in words:
        while j < len(subwords) and subwords[j][1] <= ws:
            j += 1
        probs = []
        k = j
        while k < len(subwords) and subwords[k][0] < we:
            if _overlaps((ws, we), subwords[k]):
                probs.append(p_bad[k])
            k += 1
        if probs:
            p = max(probs)
            out.append({"word": text[ws:we], "start": ws, "end": we,
                        "tag": "BAD" if p > threshold else "OK", "p_bad": p})
        else:
            out.append({"word": text[ws:we], "start": ws, "end": we, "tag": None, "p_bad": None})
    return out

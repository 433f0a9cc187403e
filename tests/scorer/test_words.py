"""Word segmentation (jieba / fugashi+unidic-lite / whitespace) and OK/BAD tags, word by word."""
from __future__ import annotations

import pytest

from src.scorer.backends.comet import words


def seg(text, lang=None):
    return [text[s:e] for s, e in words.segment(text, lang)]


@pytest.mark.parametrize("text, lang, expected", [
    ("翻译质量很好。", "zh", ["翻译", "质量", "很", "好", "。"]),
    ("老师打开了书，孩子们很高兴。", "zh-CN", ["老师", "打开", "了", "书", "，", "孩子", "们", "很", "高兴", "。"]),
    ("我们的模型在 WMT 测试集上表现很好。", None,
     ["我们", "的", "模型", "在", "WMT", "测试", "集上", "表现", "很", "好", "。"]),
    ("先生は本を開けました。", "ja", ["先生", "は", "本", "を", "開け", "まし", "た", "。"]),
    ("東京の天気はとても良いです。", None, ["東京", "の", "天気", "は", "とても", "良い", "です", "。"]),
    ("The cat sat on the mat.", "en", ["The", "cat", "sat", "on", "the", "mat."]),
    ("Der Lehrer  öffnete\tdas Buch.", None, ["Der", "Lehrer", "öffnete", "das", "Buch."]),
    ("   ", None, []),
])
def test_segmentation_word_by_word(text, lang, expected):
    assert seg(text, lang) == expected


def test_offsets_point_into_the_text():
    text = "Hello 世界，你好 world。"
    for s, e in words.segment(text, "zh"):
        assert text[s:e].strip() == text[s:e] and text[s:e]


@pytest.mark.parametrize("lang, code", [
    ("zh", "zh"), ("zh-TW", "zh"), ("ZH_cn", "zh"), ("zho", "zh"), ("ja", "ja"), ("ja-JP", "ja"),
    ("jpn", "ja"), ("en", "other"), ("de-DE", "other"), (None, None), ("", None)])
def test_language_codes(lang, code):
    assert words.normalize_lang(lang) == code


def test_script_detection():
    assert words.detect_lang("猫がいます") == "ja"  # kana -> Japanese
    assert words.detect_lang("东京") == "zh"  # Han only -> Chinese
    assert words.detect_lang("Straße") == "other"


def tags(result):
    return [(w["word"], w["tag"]) for w in result]


def test_tags_from_spans_english():
    mt = "The cat sat on the mat."
    wds = words.segment(mt, "en")
    spans = [{"start": 4, "end": 11}, {"start": 20, "end": 21}]  # "cat sat", "a" inside "mat."
    assert tags(words.tags_from_spans(mt, wds, spans)) == [
        ("The", "OK"), ("cat", "BAD"), ("sat", "BAD"), ("on", "OK"), ("the", "OK"), ("mat.", "BAD")]


def test_tags_from_spans_chinese():
    mt = "翻译质量很好。"
    out = words.tags_from_spans(mt, words.segment(mt, "zh"), [{"start": 2, "end": 5}])
    assert tags(out) == [("翻译", "OK"), ("质量", "BAD"), ("很", "BAD"), ("好", "OK"), ("。", "OK")]
    assert [(w["start"], w["end"]) for w in out] == [(0, 2), (2, 4), (4, 5), (5, 6), (6, 7)]


def test_tags_from_spans_japanese():
    mt = "先生は本を開けました。"
    out = words.tags_from_spans(mt, words.segment(mt, "ja"), [{"start": 5, "end": 9}])
    assert tags(out) == [("先生", "OK"), ("は", "OK"), ("本", "OK"), ("を", "OK"), ("開け", "BAD"),
                         ("まし", "BAD"), ("た", "OK"), ("。", "OK")]


def test_words_after_truncation_are_unknown():
    mt = "one two three four"
    out = words.tags_from_spans(mt, words.segment(mt), [{"start": 0, "end": 3}], covered_end=7)
    assert tags(out) == [("one", "BAD"), ("two", "OK"), ("three", None), ("four", None)]


def test_tags_from_probs_max_over_subwords():
    mt = "翻译质量很好。"
    # Subwords: 翻(0,1) 译质(1,3) 量(3,4) 很好(4,6) 。(6,7); a subword may straddle two words.
    subwords = [(0, 1), (1, 3), (3, 4), (4, 6), (6, 7)]
    p_bad = [0.1, 0.7, 0.2, 0.4, 0.9]
    out = words.tags_from_probs(mt, words.segment(mt, "zh"), subwords, p_bad, threshold=0.5)
    assert tags(out) == [("翻译", "BAD"), ("质量", "BAD"), ("很", "OK"), ("好", "OK"), ("。", "BAD")]
    assert [w["p_bad"] for w in out] == [0.7, 0.7, 0.4, 0.4, 0.9]


def test_tags_from_probs_missing_subwords_give_none():
    mt = "a b c"
    out = words.tags_from_probs(mt, words.segment(mt), [(0, 1), (2, 3)], [0.2, 0.8], 0.5)
    assert tags(out) == [("a", "OK"), ("b", "BAD"), ("c", None)]

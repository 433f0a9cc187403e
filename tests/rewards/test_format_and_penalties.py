"""Parsing and penalties on hand-written responses. None of these reaches the QE service: the
tests run without QE_SCORER_URL, where any scorer call raises."""
from __future__ import annotations

import math

import pytest

from src.data.templates import expected_format
from src.rewards.bleu import sentence_bleu, tokenizer_for
from src.rewards.compute import compute_score
from src.rewards.degenerate import copy_similarity, detect, script_share
from src.rewards.parsing import parse_response
from src.rewards.degenerate import DegenerateSettings
from tests.helpers.reward_config import extra_info, kwargs_for

SRC_ZH = "这只猫坐在垫子上。"
REF_EN = "The cat sat on the mat."
GOOD = "<think>猫 = cat, 垫子 = mat.</think>\n<translate>The cat sat on the mat.</translate>"

# response, template, format_ok, format_error
FORMAT_TABLE = [
    (GOOD, "chat", True, ""),
    ("<think></think><translate>The cat sat on the mat.</translate>", "chat", True, ""),  # empty thinking is fine
    ("  <think>x</think>  \n <translate>The cat.</translate>\n", "base", True, ""),  # whitespace around tags
    ("<translate>The cat sat on the mat.</translate>", "rl", True, ""),
    ("The cat sat on the mat.", "chat", False, "missing_tag"),
    ("<think>x</think>The cat sat on the mat.", "chat", False, "missing_tag"),
    ("<translate>The cat sat on the mat.</translate>", "chat", False, "missing_tag"),  # think asked for
    ("<think>x</think><translate>The cat.", "chat", False, "missing_tag"),  # unclosed (cut at max length)
    ("<think>a</think><think>b</think><translate>The cat.</translate>", "chat", False, "repeated_tag"),
    ("<think>a</think><translate>The cat.</translate><translate>A cat.</translate>", "chat", False, "repeated_tag"),
    ("<translate>The cat.</translate><think>a</think>", "chat", False, "tag_order"),
    ("</think>a<think><translate>The cat.</translate>", "chat", False, "tag_order"),
    ("<think>a</think><translate>The cat.</translate> Hope this helps!", "chat", False, "text_outside_tags"),
    ("Sure! <think>a</think><translate>The cat.</translate>", "chat", False, "text_outside_tags"),
    ("<think>a</think> so: <translate>The cat.</translate>", "chat", False, "text_outside_tags"),
    ("<think>a</think><translate>The cat.</translate>", "rl", False, "unexpected_think"),
    ("<translate>a</translate><translate>b</translate>", "rl", False, "repeated_tag"),
    ("", "chat", False, "missing_tag"),
    ("", "rl", False, "missing_tag"),
    ("<THINK>a</THINK><TRANSLATE>The cat.</TRANSLATE>", "chat", False, "missing_tag"),  # tags are exact
]


@pytest.mark.parametrize("response,template,ok,error", FORMAT_TABLE)
def test_format_table(response, template, ok, error):
    parsed = parse_response(response, expected_format(template))
    assert (parsed.ok, parsed.error) == (ok, error)
    if ok:
        assert parsed.translation in ("The cat sat on the mat.", "The cat.")


@pytest.mark.parametrize("response,template", [(r, t) for r, t, ok, _ in FORMAT_TABLE if not ok])
def test_format_failures_get_the_floors_without_a_scorer_call(response, template, loop, no_scorer_env):
    kw = kwargs_for("comet")
    out = loop.run_until_complete(compute_score("wmt/zh-en", response, REF_EN, extra_info(SRC_ZH, template=template),
                                                **kw))
    # MT-R1-Zero floors: format -1, answer -2, nothing measured
    assert (out["score"], out["score_rounded"], out["answer"], out["format_ok"]) == (-3.0, -3.0, -2.0, 0.0)
    assert out["translation"] == "" and out["error_spans"] == "[]"
    assert all(out[c] is None for c in ("bleu", "kiwi", "comet", "xcomet", "mqm", "ok_ratio", "n_major"))


def test_lenient_strictness_is_an_option():
    response = "<think>a</think><translate>The cat.</translate> Hope this helps!"
    assert parse_response(response, "think_translate", strict_outside=False).translation == "The cat."
    assert not parse_response(response, "think_translate", strict_outside=True).ok


# response translation (inside good tags), reference, source, target, expected flags
DEGENERATE_TABLE = [
    ("", REF_EN, SRC_ZH, "en", {"empty"}),
    ("   \n ", REF_EN, SRC_ZH, "en", {"empty"}),
    (SRC_ZH, REF_EN, SRC_ZH, "en", {"source_copy", "wrong_script"}),  # zh source copied into an en target
    ("Die Katze saß auf der Matte.", "Die Katze sitzt auf der Matte.", "Die Katze saß auf der Matte.", "de",
     {"source_copy"}),  # same script: only the copy check catches it
    ("猫坐在垫子上了。", REF_EN, SRC_ZH, "en", {"wrong_script"}),
    ("The cat sat on the mat.", "这只猫坐在垫子上。", REF_EN, "zh", {"source_copy", "wrong_script"}),
    (" ".join(["The cat sat on the mat."] * 30), REF_EN, SRC_ZH, "en", {"length_ratio"}),  # very long
    ("Cat.", "The cat that everybody in the village knew sat on the old red mat.", SRC_ZH, "en",
     {"length_ratio"}),  # absurdly short
    ("The cat sat on the mat.", REF_EN, SRC_ZH, "en", set()),
    ("这只猫坐在 Python 垫子上。", "这只猫坐在垫子上。", REF_EN, "zh", set()),  # a Latin word in zh is fine
    ("iPhone 15", "iPhone 15", "iPhone 15", "zh", set()),  # the reference copies and is Latin too: exempt
    ("2024", "2024", "2024年", "en", set()),  # no letters: script unknown, no copy
]


@pytest.mark.parametrize("translation,reference,source,tgt,flags", DEGENERATE_TABLE)
def test_degenerate_table(translation, reference, source, tgt, flags, loop, no_scorer_env):
    kw = kwargs_for("comet")
    src_lang = "en" if tgt == "zh" else "zh"
    response = f"<think>ok</think><translate>{translation}</translate>"
    info = extra_info(source, src_lang=src_lang, tgt_lang=tgt)
    if not flags:
        # clean answers go on to the scorer, which is not configured here: that is the proof
        # the checks let them through
        with pytest.raises(Exception, match="QE_SCORER_URL is not set"):
            loop.run_until_complete(compute_score(f"wmt/{src_lang}-{tgt}", response, reference, info, **kw))
        return
    out = loop.run_until_complete(compute_score(f"wmt/{src_lang}-{tgt}", response, reference, info, **kw))
    got = {k.removeprefix("degenerate_") for k, v in out.items() if k.startswith("degenerate_") and v == 1.0}
    assert got == flags
    d = kw["degenerate"]
    penalty = min(d[f"{f}_penalty"] for f in flags)
    assert out["format_ok"] == 1.0 and out["answer"] == penalty and out["score"] == 1.0 + penalty
    assert out["kiwi"] is None and out["bleu"] is None  # training short-cut: nothing measured


def test_huge_response_is_cheap(loop, no_scorer_env):
    import time

    kw = kwargs_for("xcomet_xl")
    huge = "<think>" + "思" * 500_000 + "</think><translate>" + "The cat. " * 200_000 + "</translate>"
    t = time.perf_counter()
    out = loop.run_until_complete(compute_score("wmt/zh-en", huge, REF_EN, extra_info(SRC_ZH), **kw))
    assert time.perf_counter() - t < 2.0
    assert out["degenerate_length_ratio"] == 1.0 and out["score"] == 0.0


def test_copy_and_script_measures():
    assert copy_similarity("The cat, sat!", "the  CAT sat") == 1.0  # case, spaces, punctuation ignored
    assert copy_similarity("abc", "xyz") == 0.0
    assert script_share("猫猫 cat", "zh") == pytest.approx(2 / 5)
    assert script_share("2024", "zh") is None and script_share("anything", "xx") is None
    s = DegenerateSettings(-2, -1, 0.9, -1, 0.2, -1, 4.0)
    assert detect("猫は座った", "猫坐了", "猫は座った", "ja", s).any is False  # kana/Han are ja script
    assert detect("word " * 5000, "src", "", "en", s).length_ratio  # no reference: an absolute cap


def test_validation_never_sends_absurdly_long_or_empty_answers(loop, no_scorer_env):
    kw = kwargs_for("xcomet_xl")
    for translation in ("", "The cat sat on the mat. " * 100):
        out = loop.run_until_complete(compute_score(
            "wmt/zh-en", f"<think>x</think><translate>{translation}</translate>", REF_EN,
            extra_info(SRC_ZH, split="val"), **kw))
        assert out["kiwi"] is None and out["score"] in (1.0 - 2.0, 1.0 - 1.0)


@pytest.mark.parametrize("lang,tokenize", [("zh", "zh"), ("zh-CN", "zh"), ("ja", "ja-mecab"), ("en", "13a"),
                                           ("de", "13a"), (None, "13a")])
def test_bleu_tokenizer_per_target(lang, tokenize):
    assert tokenizer_for(lang) == tokenize


def test_bleu_values():
    assert sentence_bleu(REF_EN, REF_EN, "en") == pytest.approx(100.0)
    # zh: character-level tokens, so a near match scores far above zero (13a would see one token)
    assert sentence_bleu("这只猫坐在垫子上", "这只猫坐在垫子上。", "zh") > 50
    assert sentence_bleu("猫は家にいます", "猫は家にいる", "ja") > 30  # MeCab installed and working
    assert sentence_bleu("Completely different words", REF_EN, "en") < 10
    assert math.isfinite(sentence_bleu("\x00\x01", REF_EN, "en"))

from __future__ import annotations

import pytest

from src.data import templates
from src.data.templates import (
    TEMPLATES,
    THINK_TRANSLATE,
    TRANSLATE_ONLY,
    UnknownTemplateError,
    build_prompt,
    expected_format,
    parse_prompt,
    translation_of,
)


def test_exported_tags_and_formats():
    assert (templates.THINK_TAG, templates.TRANSLATE_TAG) == ("think", "translate")
    assert templates.TRANSLATE_OPEN == "<translate>" and templates.THINK_CLOSE == "</think>"
    assert {t: expected_format(t) for t in TEMPLATES} == {
        "base": THINK_TRANSLATE,
        "chat": THINK_TRANSLATE,
        "rl": TRANSLATE_ONLY,
        # the same, with the row's terms in the prompt (tests/data/test_terms.py)
        "base_terms": THINK_TRANSLATE,
        "chat_terms": THINK_TRANSLATE,
        "rl_terms": TRANSLATE_ONLY,
    }
    # The package root exposes what the reward function needs without importing tokenizer code.
    import src.data as data

    assert data.expected_format("rl") == "translate_only"


def test_unknown_template_is_rejected():
    with pytest.raises(UnknownTemplateError, match="unknown template 'xml'"):
        expected_format("xml")
    with pytest.raises(UnknownTemplateError):
        build_prompt("xml", "x", "zh", "en")


def test_base_is_one_user_message_in_r1_zero_style():
    (msg,) = build_prompt("base", "这只猫坐在垫子上。", "zh", "en")
    assert msg["role"] == "user"
    text = msg["content"]
    assert text.startswith("A conversation between User and Assistant.")
    assert "<think> reasoning process here </think> <translate> final translation here </translate>" in text
    assert "from Chinese to English" in text
    assert text.endswith("Translate the following Chinese text into English:\n这只猫坐在垫子上。\nAssistant:")


def test_chat_puts_instructions_in_system_and_source_in_user():
    system, user = build_prompt("chat", "The cat sat on the mat.", "en", "zh")
    assert system["role"] == "system" and user["role"] == "user"
    assert "<think>" in system["content"] and "<translate>" in system["content"]
    assert "The cat sat" not in system["content"]
    assert user["content"] == "Translate the following English text into Chinese:\nThe cat sat on the mat."


def test_rl_asks_for_translate_tag_only():
    (msg,) = build_prompt("rl", "今天天气很好。", "zh", "en")
    assert "<translate>" in msg["content"] and "<think>" not in msg["content"]
    assert msg["content"].endswith("今天天气很好。")


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize(
    "src, src_lang, tgt_lang",
    [("这只猫坐在垫子上。", "zh", "en"), ("The cat\nsat.", "en", "zh"), ("Hei maailma", "fi", "en")],
)
def test_parse_prompt_recovers_source_from_a_decoded_chat_prompt(tokenizer, template, src, src_lang, tgt_lang):
    # What verl's validation dump holds: the chat-templated prompt decoded without special tokens.
    ids = tokenizer.apply_chat_template(
        build_prompt(template, src, src_lang, tgt_lang), add_generation_prompt=True, tokenize=True
    )
    decoded = tokenizer.decode(ids["input_ids"] if hasattr(ids, "keys") else ids, skip_special_tokens=True)
    assert parse_prompt(decoded) == (src, src_lang, tgt_lang)


def test_parse_prompt_gives_none_for_foreign_prompts():
    assert parse_prompt("user\nWhat is 2+2?\nassistant\n") is None


@pytest.mark.parametrize(
    "response, expected",
    [
        ("<think>x</think> <translate> Hello. </translate>", "Hello."),
        ("<translate>a</translate><translate>b</translate>", "b"),
        ("<think>x</think><translate>unfinished", "unfinished"),
        ("no tags", None),
    ],
)
def test_translation_of(response, expected):
    assert translation_of(response) == expected

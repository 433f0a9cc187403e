"""Token-level credit, step 1: error span (translation offsets, as the scorer answers) -> response
character range -> penalty per policy token, on the byte-level BPE tokenizer trained offline in
tests/fixtures/tiny_tokenizer.py.

Every case is a hand-labelled row: the response, the spans, and the tokens that must be penalised,
named by the text each token covers and its penalty. The text a token covers is read from the
tokenizer's own offset mapping (the Rust tokenizer, `return_offsets_mapping`), not from the code
under test. With the default MQM weights (minor 1, major 5, critical 10, bad 5) and scale 1, a
critical token costs -1.0, major -0.5, minor -0.1.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from src.data.templates import expected_format
from src.rewards.credit import ranges, tokens
from src.rewards.parsing import parse_response

EN = "The cat sat on the mat."
ZH = "猫坐在垫子上。"
JA = "猫はマットの上に座った。"  # no Japanese in the tokenizer's training lines: one token per byte
WEIGHTS = {"minor": 1.0, "major": 5.0, "critical": 10.0, "bad": 5.0}


def span(start, end, severity="minor"):
    return {"start": start, "end": end, "severity": severity, "text": "", "confidence": 0.9}


def rl(translation: str) -> str:
    return f"<translate>{translation}</translate>"


# (id, template, response, spans in translation offsets, source, [(covered text, penalty)])
TABLE = [
    ("en-middle-minor", "rl", rl(EN), [span(4, 7)], "spans", [(" cat", -0.1)]),
    ("en-start-critical", "rl", rl(EN), [span(0, 3, "critical")], "spans", [("The", -1.0)]),
    ("en-end-major", "rl", rl(EN), [span(19, 23, "major")], "spans", [(" mat", -0.5), (".", -0.5)]),
    # stock comet: the span starts at the space its '▁cat' piece includes; a space alone is no error
    ("en-leading-space", "rl", rl(EN), [span(3, 7), span(11, 12, "critical")], "spans", [(" cat", -0.1)]),
    # overlapping spans: each token takes its largest penalty, nothing is summed
    ("en-overlap", "rl", rl(EN), [span(4, 11), span(8, 11, "critical")], "spans",
     [(" cat", -0.1), (" sat", -1.0)]),
    ("en-out-of-range", "rl", rl(EN), [span(30, 40, "critical"), span(19, 99, "major"), span(-5, 3)], "spans",
     [("The", -0.1), (" mat", -0.5), (".", -0.5)]),
    ("en-unknown-severity-is-bad", "rl", rl(EN), [span(8, 11, "omission")], "spans", [(" sat", -0.5)]),
    # think block, newline and indentation around the translation: offsets shift past them, and the
    # same word inside <think> is not touched
    ("en-think-and-whitespace", "chat", "<think>猫 is cat.</think>\n<translate>\n  " + EN + "\n</translate>",
     [span(4, 7, "major")], "spans", [(" cat", -0.5)]),
    # one token covering several characters ('坐在垫子'): penalised as a whole
    ("zh-multi-char-token", "rl", rl(ZH), [span(3, 5, "major")], "spans", [("坐在垫子", -0.5)]),
    # a character split over two tokens: both tokens holding its bytes are penalised
    ("zh-start-split-char", "rl", rl(ZH), [span(0, 1, "critical")], "spans", [("猫", -1.0), ("猫坐", -1.0)]),
    ("zh-end", "rl", rl(ZH), [span(5, 7)], "spans", [("上", -0.1), ("。", -0.1)]),
    ("ja-bytes", "rl", rl(JA), [span(2, 5, "major")], "spans",
     [("マ", -0.5)] * 3 + [("ッ", -0.5)] * 3 + [("ト", -0.5)] * 3),
    # '«å' holds the last byte of に and the first of 座
    ("ja-token-across-chars", "rl", rl(JA), [span(8, 9, "critical")], "spans",
     [("に座", -1.0), ("座", -1.0), ("座", -1.0)]),
    ("empty-translation", "rl", rl(""), [span(0, 3, "critical")], "spans", []),
    ("blank-translation", "rl", rl("   "), [span(0, 3, "critical")], "spans", []),
    # BAD words (word_qe with word tags from probabilities): OK words and unseen words (tag null) are not errors
    ("words-bad-only", "rl", rl(EN), [{"word": "sat", "start": 8, "end": 11, "tag": "BAD"},
                                      {"word": "on", "start": 12, "end": 14, "tag": "OK"},
                                      {"word": "mat.", "start": 19, "end": 23, "tag": None}], "words",
     [(" sat", -0.5)]),
]


def credit_settings(source="spans", scale=1.0) -> ranges.CreditSettings:
    return ranges.CreditSettings.from_kwargs({"severity_weights": WEIGHTS, "scale": scale, "source": source})


def penalised(tokenizer, response: str, errors, source="spans", scale=1.0, template="rl"):
    parsed = parse_response(response, expected_format(template))
    assert parsed.ok
    found = ranges.response_ranges(errors, parsed.translation, parsed.start, credit_settings(source, scale))
    enc = tokenizer(response, add_special_tokens=False, return_offsets_mapping=True)
    # the policy ends its answer with <|im_end|>: a token with no characters, the sequence score's slot
    ids = enc["input_ids"] + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    text, token_ranges = tokens.token_char_ranges(tokenizer, ids)
    assert text == response
    assert token_ranges[:-1] == [tuple(o) for o in enc["offset_mapping"]]  # the tokenizer's own offsets
    pens = tokens.token_penalties(token_ranges, found)
    assert len(pens) == len(ids) and pens[-1] == 0.0
    return [(response[s:e], p) for (s, e), p in zip(enc["offset_mapping"], pens) if p != 0.0]


@pytest.mark.parametrize("case", TABLE, ids=[c[0] for c in TABLE])
def test_hand_labelled_table(tokenizer, case):
    _, template, response, errors, source, expected = case
    got = penalised(tokenizer, response, errors, source, template=template)
    assert [t for t, _ in got] == [t for t, _ in expected]
    assert [p for _, p in got] == pytest.approx([p for _, p in expected])


def test_scale_is_the_heaviest_penalty(tokenizer):
    got = penalised(tokenizer, rl(EN), [span(0, 3, "critical"), span(8, 11, "minor")], scale=2.0)
    assert got == [("The", pytest.approx(-2.0)), (" sat", pytest.approx(-0.2))]


def test_response_ranges_are_in_response_coordinates():
    response = "<think>x</think>\n<translate> \t" + EN + " </translate>"
    parsed = parse_response(response, expected_format("chat"))
    out = ranges.response_ranges([span(3, 7, "major")], parsed.translation, parsed.start, credit_settings())
    assert [(response[r["start"]:r["end"]], r["severity"], r["penalty"]) for r in out] == [("cat", "major", -0.5)]


def test_last_token_is_never_penalised_even_when_cut_inside_a_span(tokenizer):
    # a response cut at max_response_length ends on a content token; that slot holds the sequence score
    ids = tokenizer("The cat sat", add_special_tokens=False)["input_ids"]
    _, token_ranges = tokens.token_char_ranges(tokenizer, ids)
    pens = tokens.token_penalties(token_ranges, [{"start": 0, "end": 11, "penalty": -0.5}])
    assert pens[:-1] == [-0.5] * (len(ids) - 1) and pens[-1] == 0.0


def test_cut_multibyte_character_decodes_like_the_tokenizer(tokenizer):
    # the first byte token of 猫 alone: verl's decode gives U+FFFD; the walk must agree
    ids = tokenizer(JA, add_special_tokens=False)["input_ids"][:4]
    text, token_ranges = tokens.token_char_ranges(tokenizer, ids)
    assert text == tokenizer.decode(ids, skip_special_tokens=True)
    assert token_ranges[-1][1] == len(text)


def test_non_byte_level_tokenizer_is_refused_in_one_line(tokenizer, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    wl = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    wl.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=wl, unk_token="[UNK]")
    with pytest.raises(tokens.TokenMappingError, match="byte-level BPE tokenizer") as exc:
        tokens.token_char_ranges(fast, [0, 1])
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("bad, needle", [
    ({"severity_weights": {**WEIGHTS, "minor": -1}, "scale": 1.0, "source": "spans"}, "severity_weights.minor"),
    ({"severity_weights": {**WEIGHTS, "fatal": 3}, "scale": 1.0, "source": "spans"}, "unknown severity 'fatal'"),
    ({"severity_weights": dict.fromkeys(WEIGHTS, 0.0), "scale": 1.0, "source": "spans"}, "all 0"),
    ({"severity_weights": WEIGHTS, "scale": 0.0, "source": "spans"}, "scale must be"),
])
def test_bad_settings_are_one_line(bad, needle):
    with pytest.raises(ranges.CreditConfigError, match=needle) as exc:
        ranges.CreditSettings.from_kwargs(bad)
    assert "\n" not in str(exc.value)


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.sampled_from(list("The cat sat.\n 猫坐在垫子上。はマットの😀é\t")), max_size=40),
       cut=st.integers(min_value=0, max_value=3))
def test_walk_equals_the_tokenizers_offsets_on_any_text(tokenizer, text, cut):
    """Property: on any mix of scripts (4-byte emoji too), the byte walk gives each token the
    characters the Rust tokenizer's offset mapping gives it; with the last `cut` tokens dropped
    (a response cut mid-character) it still decodes exactly like the tokenizer."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    decoded, ranges_ = tokens.token_char_ranges(tokenizer, ids)
    assert decoded == text and ranges_ == [tuple(o) for o in enc["offset_mapping"]]
    part = ids[:max(0, len(ids) - cut)]
    decoded, ranges_ = tokens.token_char_ranges(tokenizer, part)
    assert decoded == tokenizer.decode(part, skip_special_tokens=True)
    assert all(0 <= s <= e <= len(decoded) for s, e in ranges_)


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=30))
def test_walk_equals_the_decode_of_any_sampled_ids(policy_tokenizer, picks):
    """Property: a policy sampling at temperature 1 emits any id, reserved special ones and bytes that form no
    character included (the first real-loop run with reward.credit=token lost six groups to exactly that:
    reserved <|...|> tokens flagged special but not in all_special_ids). The walk decodes every such response
    as verl's decode(skip_special_tokens=True) does."""
    tokenizer = policy_tokenizer
    ids = [p % len(tokenizer) for p in picks]
    assert any(t.special and i not in tokenizer.all_special_ids for i, t in tokenizer.added_tokens_decoder.items())
    decoded, ranges_ = tokens.token_char_ranges(tokenizer, ids)
    assert decoded == tokenizer.decode(ids, skip_special_tokens=True)
    assert len(ranges_) == len(ids) and all(0 <= s <= e <= len(decoded) + 1 for s, e in ranges_)

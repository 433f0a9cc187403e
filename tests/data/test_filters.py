from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from src.data.filters import (
    LengthLimits,
    cap_per_direction,
    drop_empty_and_duplicates,
    expand_directions,
    filter_by_length,
    new_counts,
)
from src.data.readers import InputError, Pair

ZH_EN = [Pair("你好", "Hello", "zh", "en"), Pair("再见", "Bye", "zh", "en")]


def test_as_is_keeps_direction_and_both_adds_reverse():
    counts = new_counts()
    assert [e.lang_pair for e in expand_directions(ZH_EN, "as-is", counts)] == ["zh-en", "zh-en"]
    counts = new_counts()
    both = expand_directions(ZH_EN, "both", counts)
    assert [(e.src, e.tgt, e.lang_pair) for e in both] == [
        ("你好", "Hello", "zh-en"),
        ("Hello", "你好", "en-zh"),
        ("再见", "Bye", "zh-en"),
        ("Bye", "再见", "en-zh"),
    ]
    assert counts["zh-en"].rows_in == counts["en-zh"].rows_in == 2


def test_explicit_direction_list_serves_each_pair_in_the_wanted_directions():
    mixed = ZH_EN + [Pair("Good", "好", "en", "zh")]
    out = expand_directions(mixed, "en-zh", new_counts())
    assert [(e.src, e.tgt) for e in out] == [("Hello", "你好"), ("Bye", "再见"), ("Good", "好")]
    with pytest.raises(InputError, match="the input only has zh-en"):
        expand_directions(ZH_EN, "de-en", new_counts())


def test_empty_and_duplicates_are_counted_per_direction():
    pairs = [Pair(" 你好 ", "Hello", "zh", "en"), Pair("你好", "Hello ", "zh", "en"), Pair("", "x", "zh", "en"),
             Pair("y", "\t", "zh", "en")]
    counts = new_counts()
    out = drop_empty_and_duplicates(expand_directions(pairs, "both", counts), counts)
    assert [(e.src, e.tgt) for e in out] == [("你好", "Hello"), ("Hello", "你好")]
    assert (counts["zh-en"].empty, counts["zh-en"].duplicate) == (2, 1)
    assert (counts["en-zh"].empty, counts["en-zh"].duplicate) == (2, 1)


def test_length_limits_each_apply():
    ex = expand_directions(ZH_EN, "as-is", new_counts())
    lengths = [(3, 2, 50), (9, 2, 40)]
    for limits, kept in [
        (LengthLimits(max_src_tokens=5), ["你好"]),
        (LengthLimits(max_tgt_tokens=1), []),
        (LengthLimits(max_prompt_tokens=45), ["再见"]),
        (LengthLimits(), ["你好", "再见"]),
    ]:
        counts = new_counts()
        out, _ = filter_by_length(ex, lengths, limits, counts)
        assert [e.src for e in out] == kept
        assert counts["zh-en"].too_long == 2 - len(kept)


def test_cap_per_direction_is_seeded_and_keeps_input_order():
    pairs = [Pair(f"s{i}", f"t{i}", "zh", "en") for i in range(20)]
    ex = expand_directions(pairs, "both", new_counts())
    lengths = [(1, 1, 1)] * len(ex)
    counts = new_counts()
    a, _ = cap_per_direction(ex, lengths, 5, seed=1, counts=counts)
    b, _ = cap_per_direction(ex, lengths, 5, seed=1, counts=new_counts())
    assert a == b
    assert sum(e.lang_pair == "zh-en" for e in a) == sum(e.lang_pair == "en-zh" for e in a) == 5
    assert [ex.index(e) for e in a] == sorted(ex.index(e) for e in a)
    assert counts["zh-en"].capped == counts["en-zh"].capped == 15


texts = st.sampled_from(["", " ", "a", "b", "你好", " a "])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(texts, texts, st.sampled_from([("zh", "en"), ("en", "zh")])), max_size=30),
       st.sampled_from(["as-is", "both", "zh-en", "zh-en,en-zh"]))
def test_every_row_in_is_either_out_or_counted_as_dropped(raw, directions):
    pairs = [Pair(s, t, *langs) for s, t, langs in raw]
    counts = new_counts()
    try:
        ex = expand_directions(pairs, directions, counts)
    except InputError:
        return  # e.g. "zh-en" asked of an input with none that can serve it
    out = drop_empty_and_duplicates(ex, counts)
    for direction, c in counts.items():
        kept = sum(e.lang_pair == direction for e in out)
        assert c.rows_in == kept + c.empty + c.duplicate
    keys = [(e.src_lang, e.tgt_lang, e.src, e.tgt) for e in out]
    assert len(keys) == len(set(keys))
    assert all(e.src and e.tgt and e.src == e.src.strip() for e in out)

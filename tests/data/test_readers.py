from __future__ import annotations

import pytest

from src.data.readers import InputError, JsonLineError, Pair, iter_json_objects, read_pairs


def test_jsonl_with_lang_pair_or_separate_fields(pairs_jsonl):
    pairs = read_pairs(pairs_jsonl)
    assert pairs[0] == Pair("这只猫坐在垫子上。", "The cat sat on the mat.", "zh", "en")
    assert pairs[1] == Pair("今天天气很好。", "The weather is nice today.", "zh", "en")
    assert len(pairs) == 7


def test_jsonl_without_languages_uses_lang_pair_flag(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text('{"src": "a", "tgt": "b"}\n\n', encoding="utf-8")
    assert read_pairs(f, lang_pair="en-zh") == [Pair("a", "b", "en", "zh")]
    with pytest.raises(InputError, match="no language pair"):
        read_pairs(f)


def test_jsonl_wrong_columns_names_line_and_found_columns(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text('{"src": "a", "tgt": "b", "lang_pair": "zh-en"}\n{"text": "a", "translation": "b"}\n')
    with pytest.raises(InputError, match=r"x\.jsonl:2: missing column\(s\) src, tgt \(found: text, translation; "
                                         r"src/source and tgt/target are read\)"):
        read_pairs(f)
    # a TSV header's names are a JSON line's too (issue 33: `target` was refused); the column's own name wins
    f.write_text('{"Source": "a", "target": "b", "lp": "zh-en"}\n{"src": "c", "tgt": "d", "source": "wmt", '
                 '"lang_pair": "zh-en"}\n')
    assert read_pairs(f) == [Pair("a", "b", "zh", "en"), Pair("c", "d", "zh", "en")]
    f.write_text('{"source": "a", "Source": "b", "tgt": "c", "lang_pair": "zh-en"}\n')
    with pytest.raises(InputError, match=r"keys 'source' and 'Source' both give src; keep one"):
        read_pairs(f)


def test_jsonl_broken_line(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text('{"src": "a", "tgt"\n')
    with pytest.raises(InputError, match="x.jsonl:1: not valid JSON"):
        read_pairs(f)


def test_json_lines_one_loop_for_every_reader(tmp_path):
    """iter_json_objects: line numbers of the file (blank lines skipped), and what is wrong with a
    line in fields a caller can word its own way (src/evaluate/inspect_reward.py does)."""
    f = tmp_path / "x.jsonl"
    f.write_text('{"a": 1}\n\n  \n{"b": "x\u2028y"}\r\n', encoding="utf-8")
    assert list(iter_json_objects(f)) == [(1, {"a": 1}), (4, {"b": "x\u2028y"})]
    for text, kind, detail, message in [('{"a": 1}\n{"a"\n', "json", "Expecting ':' delimiter", "x.jsonl:2: not valid JSON"),
                                        ("[1]\n", "type", "list", "x.jsonl:1: expected a JSON object per line"),
                                        ("[" * 100000 + "\n", "depth", "", "x.jsonl:1: JSON nested too deeply")]:
        f.write_text(text, encoding="utf-8")
        with pytest.raises(JsonLineError, match=message) as err:
            list(iter_json_objects(f))
        assert (err.value.kind, err.value.detail) == (kind, detail) and isinstance(err.value, InputError)


def test_tsv_with_header_and_per_row_languages(tmp_path):
    f = tmp_path / "x.tsv"
    f.write_text("lang_pair\tsrc\ttgt\nzh-en\t你好\tHello\nen-zh\tBye\t再见\n", encoding="utf-8")
    assert read_pairs(f) == [Pair("你好", "Hello", "zh", "en"), Pair("Bye", "再见", "en", "zh")]


def test_tsv_without_header_is_two_columns(tmp_path):
    f = tmp_path / "x.tsv"
    f.write_text('你好\t"Hello", she said\n', encoding="utf-8")  # no CSV quoting: quotes are text
    assert read_pairs(f, lang_pair="zh-en") == [Pair("你好", '"Hello", she said', "zh", "en")]


def test_tsv_wrong_field_count(tmp_path):
    f = tmp_path / "x.tsv"
    f.write_text("a\tb\nc\td\te\n")
    with pytest.raises(InputError, match=r"x\.tsv:2: expected 2 tab-separated fields"):
        read_pairs(f, lang_pair="zh-en")


def test_aligned_files(tmp_path):
    s, t = tmp_path / "a.zh", tmp_path / "a.en"
    s.write_text("你好\n再见\n", encoding="utf-8")
    t.write_text("Hello\nBye\n", encoding="utf-8")
    assert read_pairs(src_path=s, tgt_path=t, lang_pair="zh-en") == [
        Pair("你好", "Hello", "zh", "en"),
        Pair("再见", "Bye", "zh", "en"),
    ]
    t.write_text("Hello\n")
    with pytest.raises(InputError, match="differ in length: .* 2 lines, .* 1"):
        read_pairs(src_path=s, tgt_path=t, lang_pair="zh-en")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"input_path": "missing.jsonl"}, "input file not found"),
        ({"input_path": "x.csv"}, "unsupported input format .csv"),
        ({}, "no input"),
        ({"input_path": "x.jsonl", "lang_pair": "zh_en"}, "language pair must look like 'zh-en'"),
    ],
)
def test_bad_input_messages(tmp_path, kwargs, message):
    (tmp_path / "x.csv").write_text("a,b\n")
    (tmp_path / "x.jsonl").write_text("")
    kwargs = {k: (tmp_path / v if k == "input_path" else v) for k, v in kwargs.items()}
    with pytest.raises(InputError, match=message):
        read_pairs(**kwargs)

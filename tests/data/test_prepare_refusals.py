"""prepare's input and output checks (issue 26): headers it cannot read, language codes, encodings,
output dirs that cannot be written, files it did not create, and the modes of what it writes."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from src.data.prepare import main
from src.data.readers import InputError, Pair, read_pairs
from tests.helpers.limited_dirs import full_dir, read_only_dir
from tests.helpers.refusals import assert_one_line_refusal


def _prepare(tokenizer_dir, out: Path, *extra) -> int:
    return main(["--split", "train", "--template", "chat", "--tokenizer", str(tokenizer_dir), "--out", str(out),
                 *extra])


def _listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.exists() else []


# --- headers -------------------------------------------------------------------------------------

@pytest.mark.parametrize("header", ["source\ttarget", "Source\tTarget", "SRC\tTGT", "src\ttgt"])
def test_tsv_header_with_source_and_target_is_a_header_not_a_pair(tmp_path, header):
    f = tmp_path / "x.tsv"
    f.write_text(f"{header}\n你好\tHello\n", encoding="utf-8")
    assert read_pairs(f, lang_pair="zh-en") == [Pair("你好", "Hello", "zh", "en")]


def test_tsv_header_with_language_columns_by_other_names(tmp_path):
    f = tmp_path / "x.tsv"
    f.write_text("Source_Lang\tTarget_Lang\tSource\tTarget\nZH\ten\t你好\tHello\n", encoding="utf-8")
    assert read_pairs(f) == [Pair("你好", "Hello", "zh", "en")]


@pytest.mark.parametrize("header, needle", [
    ("source_text\ttarget_text", "looks like a header but names no source and target column"),
    ("Chinese\tEnglish", "looks like a header"),
    ("zh\ten", "looks like a header"),
    ("src\ttgt\tscore", "header column(s) 'score' unknown"),
    ("src\ttgt\tsource", "named twice"),
])
def test_tsv_header_it_cannot_read_is_refused(tmp_path, header, needle):
    f = tmp_path / "x.tsv"
    f.write_text(f"{header}\n你好\tHello\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"x\.tsv:1: ") as e:
        read_pairs(f, lang_pair="zh-en")
    assert needle in str(e.value)


# --- languages -----------------------------------------------------------------------------------

@pytest.mark.parametrize("lang_pair, needle", [
    ("xx-yy", "unknown language code 'xx'"),
    ("zh-zh", "translates zh into itself"),
    ("zh-Zh", "translates zh into itself"),
    ("zh-EN-x", "must look like 'zh-en'"),
])
def test_bad_language_pairs_are_refused(tmp_path, tiny_tokenizer_dir, capsys, lang_pair, needle):
    (tmp_path / "a.tsv").write_text("你好\tHello\n", encoding="utf-8")
    out = tmp_path / "out" / "train.parquet"
    assert _prepare(tiny_tokenizer_dir, out, "--input", str(tmp_path / "a.tsv"), "--lang-pair", lang_pair) == 2
    assert_one_line_refusal(capsys.readouterr().err, "prepare: error: ", needle)
    assert not out.parent.exists()


def test_every_language_the_wrong_language_guard_knows_is_prepared(tmp_path, tiny_tokenizer_dir):
    """Issue 51 (finding 1): es, it, pt, nl and ko were in the guard's languages but `prepare
    --lang-pair en-ko` refused ko. Every language of the guard's default list (the reward kwargs the
    launcher writes) is a target prepare accepts, and one list is both."""
    from src.data.templates import LANGUAGE_NAMES
    from tests.helpers.reward_config import kwargs_for

    guarded = kwargs_for("comet")["guards"]["wrong_language"]["languages"]
    assert guarded == list(LANGUAGE_NAMES) and "ko" in guarded and "cs" in guarded
    (tmp_path / "a.tsv").write_text("Hello\tSalut\n", encoding="utf-8")
    for lang in guarded:
        pair = f"{'zh' if lang == 'en' else 'en'}-{lang}"
        out = tmp_path / lang / "train.parquet"
        assert _prepare(tiny_tokenizer_dir, out, "--input", str(tmp_path / "a.tsv"), "--lang-pair", pair) == 0, pair
        assert pq.read_table(out).to_pylist()[0]["extra_info"]["tgt_lang"] == lang


def test_language_codes_in_rows_are_checked_and_lower_cased(tmp_path, tiny_tokenizer_dir, capsys):
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps({"src": "你好", "tgt": "Hello", "lang_pair": "ZH-EN"}) + "\n"
                 + json.dumps({"src": "再见", "tgt": "Bye", "src_lang": "zh", "tgt_lang": "En"}) + "\n",
                 encoding="utf-8")
    out = tmp_path / "train.parquet"
    assert _prepare(tiny_tokenizer_dir, out, "--input", str(f), "--name", "d") == 0
    rows = pq.read_table(out).to_pylist()
    assert {r["data_source"] for r in rows} == {"d/zh-en"}
    assert all("Translate the following Chinese text into English" in r["prompt"][1]["content"] for r in rows)
    f.write_text(json.dumps({"src": "你好", "tgt": "Hello", "src_lang": "xx", "tgt_lang": "en"}) + "\n")
    assert _prepare(tiny_tokenizer_dir, tmp_path / "t2.parquet", "--input", str(f)) == 2
    assert_one_line_refusal(capsys.readouterr().err,
                            "prepare: error: ", "x.jsonl:1: unknown language code 'xx' (known: zh, en")


def test_directions_list_is_checked_and_lower_cased(tmp_path, tiny_tokenizer_dir, capsys):
    (tmp_path / "a.tsv").write_text("你好\tHello\n", encoding="utf-8")
    out = tmp_path / "train.parquet"
    assert _prepare(tiny_tokenizer_dir, out, "--input", str(tmp_path / "a.tsv"), "--lang-pair", "zh-en",
                    "--directions", "EN-ZH") == 0
    assert [r["data_source"] for r in pq.read_table(out).to_pylist()] == ["a/en-zh"]
    assert _prepare(tiny_tokenizer_dir, tmp_path / "b.parquet", "--input", str(tmp_path / "a.tsv"), "--lang-pair",
                    "zh-en", "--directions", "en-en") == 2
    assert_one_line_refusal(capsys.readouterr().err, "prepare: error: ", "translates en into itself")


# --- encodings and line breaks -------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".tsv", ".jsonl", ".zh"])
def test_non_utf8_input_is_one_line_naming_file_and_line(tmp_path, tiny_tokenizer_dir, capsys, suffix):
    f = tmp_path / f"gbk{suffix}"
    text = '{"src": "你好", "tgt": "Hello", "lang_pair": "zh-en"}\n' if suffix == ".jsonl" else "你好\tHello\n"
    f.write_bytes(("ok\tok\n" if suffix == ".tsv" else "").encode() + text.encode("gbk"))
    args = ["--input", str(f)] if suffix != ".zh" else ["--src-file", str(f), "--tgt-file", str(f)]
    out = tmp_path / "out" / "train.parquet"
    assert _prepare(tiny_tokenizer_dir, out, *args, "--lang-pair", "zh-en") == 2
    line = 2 if suffix == ".tsv" else 1
    assert_one_line_refusal(capsys.readouterr().err,
                            "prepare: error: ", f"{f}:{line}: not UTF-8 text (byte 0xc4", "iconv -f GBK -t UTF-8")
    assert not out.parent.exists()


def test_unicode_line_separators_inside_sentences_keep_aligned_files_aligned(tmp_path):
    s, t = tmp_path / "a.zh", tmp_path / "a.en"
    s.write_text("你好\u2028世界\n再见\r\n", encoding="utf-8")
    t.write_text("Hello\x85world\nBye\n", encoding="utf-8")
    assert read_pairs(src_path=s, tgt_path=t, lang_pair="zh-en") == [
        Pair("你好\u2028世界", "Hello\x85world", "zh", "en"), Pair("再见", "Bye", "zh", "en")]


def test_utf8_bom_is_not_part_of_the_header(tmp_path):
    f = tmp_path / "x.tsv"
    f.write_bytes("\ufeffsrc\ttgt\n你好\tHello\n".encode("utf-8"))
    assert read_pairs(f, lang_pair="zh-en") == [Pair("你好", "Hello", "zh", "en")]


# --- outputs ---------------------------------------------------------------------------------------

def test_existing_output_is_not_replaced_without_overwrite(tmp_path, tiny_tokenizer_dir, pairs_jsonl, capsys):
    out = tmp_path / "train.parquet"
    out.write_bytes(b"a file prepare did not write in this invocation")
    assert _prepare(tiny_tokenizer_dir, out, "--input", str(pairs_jsonl)) == 2
    assert_one_line_refusal(capsys.readouterr().err, "prepare: error: ", f"{out} exists; give --overwrite")
    assert out.read_bytes() == b"a file prepare did not write in this invocation"
    assert _listing(tmp_path) == ["pairs.jsonl", "train.parquet"]
    stats = tmp_path / "other.stats.json"
    stats.write_text("{}")
    assert _prepare(tiny_tokenizer_dir, tmp_path / "new.parquet", "--input", str(pairs_jsonl), "--stats",
                    str(stats)) == 2
    assert_one_line_refusal(capsys.readouterr().err, "prepare: error: ", f"{stats} exists")
    assert not (tmp_path / "new.parquet").exists() and stats.read_text() == "{}"


def test_stats_file_cannot_be_the_parquet(tmp_path, tiny_tokenizer_dir, pairs_jsonl, capsys):
    out = tmp_path / "train.parquet"
    assert _prepare(tiny_tokenizer_dir, out, "--input", str(pairs_jsonl), "--stats", str(out)) == 2
    assert_one_line_refusal(capsys.readouterr().err, "prepare: error: ", f"--stats {out} is the --out file")
    assert not out.exists()


def test_read_only_output_dir_is_refused_before_any_work(tmp_path, tiny_tokenizer_dir, pairs_jsonl, capsys):
    with read_only_dir(tmp_path / "ro") as ro:
        # the tokenizer path is wrong too: the output check comes first, so nothing was loaded
        assert _prepare(tmp_path / "no-tokenizer", ro / "sub" / "train.parquet", "--input", str(pairs_jsonl)) == 2
        assert_one_line_refusal(capsys.readouterr().err,
                                "prepare: error: ", f"cannot write {ro}/sub/train.parquet: cannot write in {ro}")
        assert _listing(ro) == []


def test_full_output_dir_is_one_line_and_leaves_the_old_files(tmp_path, tiny_tokenizer_dir, pairs_jsonl, capsys):
    with full_dir(tmp_path / "full", keep={"train.parquet": b"old", "train.stats.json": b"{}"}) as full:
        assert _prepare(tiny_tokenizer_dir, full / "train.parquet", "--input", str(pairs_jsonl), "--overwrite") == 1
        assert_one_line_refusal(capsys.readouterr().err, "prepare: error: ", f"cannot write {full}/train.parquet: ",
                                "No space left on device", "; nothing was written")
        assert _listing(full) == ["filler", "train.parquet", "train.stats.json"]
        assert (full / "train.parquet").read_bytes() == b"old" and (full / "train.stats.json").read_bytes() == b"{}"


@pytest.mark.parametrize("umask, file_mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_have_the_modes_the_umask_gives(tmp_path, tiny_tokenizer_dir, pairs_jsonl, umask, file_mode):
    old = os.umask(umask)
    try:
        assert _prepare(tiny_tokenizer_dir, tmp_path / "d" / "train.parquet", "--input", str(pairs_jsonl)) == 0
    finally:
        os.umask(old)
    for name in ("train.parquet", "train.stats.json"):
        assert stat.S_IMODE((tmp_path / "d" / name).stat().st_mode) == file_mode, name
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o777 & ~umask

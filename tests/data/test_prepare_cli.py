from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from src.data.prepare import main

REPO = Path(__file__).resolve().parents[2]


def run(tmp_path, tokenizer_dir, *extra, out_name="train.parquet"):
    out = tmp_path / "out" / out_name
    argv = ["--name", "wmt_zh_en", "--split", "train", "--template", "chat", "--tokenizer", str(tokenizer_dir),
            "--out", str(out), *extra]
    return main(argv), out


def rows_of(path):
    return pq.read_table(path).to_pylist()


def test_row_contract(tmp_path, tiny_tokenizer_dir, pairs_jsonl, capsys):
    rc, out = run(tmp_path, tiny_tokenizer_dir, "--input", str(pairs_jsonl))
    assert rc == 0
    rows = rows_of(out)
    first = rows[0]
    assert set(first) == {"prompt", "data_source", "ability", "reward_model", "extra_info"}
    assert first["data_source"] == "wmt_zh_en/zh-en"
    assert first["ability"] == "translation"
    assert first["reward_model"] == {"style": "rule", "ground_truth": "The cat sat on the mat."}
    assert first["extra_info"] == {
        "split": "train",
        "src": "这只猫坐在垫子上。",
        "src_lang": "zh",
        "tgt_lang": "en",
        "lang_pair": "zh-en",
        "template": "chat",
        "index": 0,
    }
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert first["prompt"][1]["content"].endswith("这只猫坐在垫子上。")
    assert [r["extra_info"]["index"] for r in rows] == list(range(len(rows)))
    # 7 in: one duplicate, one empty source, one blank target dropped.
    assert [r["extra_info"]["src"] for r in rows] == [
        "这只猫坐在垫子上。", "今天天气很好。", "龘靐齉" * 20, "机器翻译是自然语言处理的重要任务。"
    ]


def test_both_directions_stats_and_printed_table(tmp_path, tiny_tokenizer_dir, pairs_jsonl, capsys):
    rc, out = run(tmp_path, tiny_tokenizer_dir, "--input", str(pairs_jsonl), "--directions", "both",
                  "--max-src-tokens", "40")
    assert rc == 0
    rows = rows_of(out)
    by_dir = {}
    for r in rows:
        by_dir.setdefault(r["extra_info"]["lang_pair"], []).append(r)
    assert {d: len(v) for d, v in by_dir.items()} == {"zh-en": 3, "en-zh": 3}
    en_zh = by_dir["en-zh"][0]
    assert en_zh["data_source"] == "wmt_zh_en/en-zh"
    assert (en_zh["extra_info"]["src"], en_zh["reward_model"]["ground_truth"]) == ("The cat sat on the mat.",
                                                                                  "这只猫坐在垫子上。")

    stats = json.loads(out.with_suffix(".stats.json").read_text())
    assert stats["directions"]["zh-en"] | {"tokens": None} == {
        "rows_in": 7, "empty": 2, "duplicate": 1, "too_long": 1, "capped": 0, "rows_out": 3, "tokens": None}
    assert stats["total"]["rows_out"] == 6
    assert stats["response_format"] == "think_translate"
    src_tokens = stats["directions"]["zh-en"]["tokens"]["src"]
    assert set(src_tokens) == {"p50", "p90", "p95", "p99", "max"} and src_tokens["max"] <= 40

    printed = capsys.readouterr().out
    assert "rows_in" in printed and "too_long" in printed
    lines = {line.split()[0]: line.split() for line in printed.splitlines() if line.strip()}
    assert lines["zh-en"][1:7] == ["7", "2", "1", "1", "0", "3"]
    assert lines["total"][1:7] == ["14", "4", "2", "2", "0", "6"]


def test_aligned_files_and_tsv_give_the_same_rows(tmp_path, tiny_tokenizer_dir):
    (tmp_path / "a.zh").write_text("你好\n再见\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("Hello\nBye\n", encoding="utf-8")
    (tmp_path / "a.tsv").write_text("你好\tHello\n再见\tBye\n", encoding="utf-8")
    rc1, out1 = run(tmp_path, tiny_tokenizer_dir, "--src-file", str(tmp_path / "a.zh"), "--tgt-file",
                    str(tmp_path / "a.en"), "--lang-pair", "zh-en", out_name="aligned.parquet")
    rc2, out2 = run(tmp_path, tiny_tokenizer_dir, "--input", str(tmp_path / "a.tsv"), "--lang-pair", "zh-en",
                    out_name="tsv.parquet")
    assert rc1 == rc2 == 0
    assert rows_of(out1) == rows_of(out2)
    assert len(rows_of(out1)) == 2


def _dir_listing(path: Path):
    return sorted(p.name for p in path.rglob("*")) if path.exists() else []


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing_file", "input file not found"),
        ("wrong_columns", "missing column(s) tgt"),
        ("unknown_template", "unknown template 'xml'"),
        ("missing_tokenizer", "tokenizer directory not found"),
        ("bad_direction", "the input only has zh-en"),
        ("all_filtered", "no rows left after filtering"),
        ("not_parquet", "--out must end in .parquet"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, tiny_tokenizer_dir, pairs_jsonl, capsys, case, message):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "train.parquet").write_bytes(b"previous")  # an earlier good file must survive
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"src": "a", "lang_pair": "zh-en"}\n')
    argv = {
        "missing_file": ["--input", str(tmp_path / "nope.jsonl")],
        "wrong_columns": ["--input", str(wrong)],
        "unknown_template": ["--input", str(pairs_jsonl), "--template", "xml"],
        "missing_tokenizer": ["--input", str(pairs_jsonl), "--tokenizer", str(tmp_path / "no-model")],
        "bad_direction": ["--input", str(pairs_jsonl), "--directions", "de-en"],
        "all_filtered": ["--input", str(pairs_jsonl), "--max-src-tokens", "1"],
        "not_parquet": ["--input", str(pairs_jsonl), "--out", str(out_dir / "train.csv")],
    }[case]
    base = ["--split", "train", "--template", "chat", "--tokenizer", str(tiny_tokenizer_dir), "--out",
            str(out_dir / "train.parquet"), "--overwrite"]
    assert main(base + argv) == 2  # later flags win in argparse
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("prepare: error: ") and message in err
    assert _dir_listing(out_dir) == ["train.parquet"]
    assert (out_dir / "train.parquet").read_bytes() == b"previous"


def test_missing_required_flag_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--split", "train"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "required" in err


def test_rewrite_replaces_atomically_without_leftovers(tmp_path, tiny_tokenizer_dir, pairs_jsonl):
    for _ in range(2):
        rc, out = run(tmp_path, tiny_tokenizer_dir, "--input", str(pairs_jsonl), "--max-per-direction", "2",
                      "--overwrite")
        assert rc == 0
    assert _dir_listing(out.parent) == ["train.parquet", "train.stats.json"]
    assert len(rows_of(out)) == 2


def test_module_entry_point_offline(tmp_path, tiny_tokenizer_dir, pairs_jsonl):
    out = tmp_path / "val.parquet"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "src.data.prepare", "--input", str(pairs_jsonl), "--split", "val", "--template", "rl",
         "--tokenizer", str(tiny_tokenizer_dir), "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "wrote 4 rows" in proc.stdout
    rows = rows_of(out)
    assert rows[0]["data_source"] == "pairs/zh-en"  # --name defaults to the input's stem
    assert {r["extra_info"]["split"] for r in rows} == {"val"}
    assert {r["extra_info"]["template"] for r in rows} == {"rl"}


def test_a_cpu_machine_is_told_which_tokenizer_to_use_and_it_works(tmp_path, capsys):
    """Issue 33 (finding 13): --tokenizer was required with no word on what to give without real weights,
    and JSON lines with a `target` key were refused though a TSV header may say target. Following the
    refusal's own hint prepares the file."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"source": "这只猫坐在垫子上。", "target": "The cat sat on the mat.", "lp": "zh-en"},
                                ensure_ascii=False) + "\n", encoding="utf-8")
    out = tmp_path / "train.parquet"
    argv = ["--input", str(pairs), "--split", "train", "--template", "base", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("prepare: error: --tokenizer is required")
    hint = err.split("build the tiny one: ")[1].split(", then ")[0]
    assert hint == "python -m src.tiny_models tokenizer .cache/tiny-tokenizer"
    from src.tiny_models.__main__ import main as tiny_models

    tiny = tmp_path / "tiny-tokenizer"
    assert tiny_models(["tokenizer", str(tiny)]) == 0
    assert main(argv + ["--tokenizer", str(tiny)]) == 0, capsys.readouterr().err
    (row,) = rows_of(out)
    assert row["reward_model"]["ground_truth"] == "The cat sat on the mat."
    assert (row["extra_info"]["src"], row["extra_info"]["lang_pair"]) == ("这只猫坐在垫子上。", "zh-en")


def test_help_says_the_tokenizer_is_required(capsys):
    """Issue 51 (finding 11): --help showed --tokenizer as optional ([--tokenizer TOKENIZER]); it is required."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "[--tokenizer DIR (required)]" in out and "required: local tokenizer/model directory" in out, out

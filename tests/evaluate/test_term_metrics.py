"""The evaluation of a test set with terms (issue 46, item 3): each segment's required terms and how many its
translation has, and per direction the term success rate and term consistency, in the table and summary; a test set
without terms has neither. Canned responses (generator=file), no model."""
from __future__ import annotations

import json

from src.data.parquet_io import write_parquet_atomic
from src.data.rows import Example, make_row
from src.data.terms import Term
from src.evaluate.cli import main

CAT, DOG = Term("猫", "cat"), Term("狗", "dog")
# (source, reference, terms, response): cat required four times, translated as required in three
CASES = [
    ("一只猫。", "A cat.", (CAT,), "<translate>A cat.</translate>"),
    ("一只狗和一只猫。", "A dog and a cat.", (DOG, CAT), "<translate>A hound and a cat.</translate>"),
    ("猫在睡觉。", "The cat is sleeping.", (CAT,), "<translate>The kitty sleeps.</translate>"),
    ("我的猫。", "My cat.", (CAT,), "<translate>My cat.</translate>"),
    ("鸟。", "A bird.", (), "<translate>A bird.</translate>"),
]


def _evaluate(tmp_path, with_terms: bool) -> tuple[int, list[dict], str]:
    rows = [make_row(Example(src, ref, "zh", "en", terms if with_terms else None), dataset_name="terms",
                     template="rl_terms" if with_terms else "rl", split="test", index=i)
            for i, (src, ref, terms, _) in enumerate(CASES)]
    data = tmp_path / f"{with_terms}.parquet"
    write_parquet_atomic(rows, data)
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"index": i, "response": c[-1]}) + "\n" for i, c in enumerate(CASES)))
    out = tmp_path / f"eval-{with_terms}"
    code = main([f"data={data}", "generator=file", f"responses={responses}", f"out={out}", "metrics=bleu,chrf"])
    segments = [json.loads(line) for line in (out / "segments.jsonl").read_text().splitlines()] if code == 0 else []
    table = (out / "scores.md").read_text() if code == 0 else ""
    return code, segments, table


def test_term_success_and_consistency_per_direction(tmp_path):
    code, segments, table = _evaluate(tmp_path, with_terms=True)
    assert code == 0
    assert [(s["terms_found"], s["terms_required"]) for s in segments] == [(1, 1), (1, 2), (0, 1), (1, 1), (0, 0)]
    assert segments[1]["terms"] == [{"src": "狗", "tgt": "dog"}, {"src": "猫", "tgt": "cat"}]
    assert "term success %" in table and "term consistency %" in table
    line = [l for l in table.splitlines() if l.startswith("| zh-en")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    header = [c.strip() for c in table.splitlines()[0].strip("|").split("|")]
    got = dict(zip(header, cells))
    # 3 of the 5 required terms found; 猫 required in four segments and missed in one: not consistent
    assert got["term success %"] == "60.0" and got["term consistency %"] == "0.0", got


def test_a_test_set_without_terms_has_no_term_columns(tmp_path):
    code, segments, table = _evaluate(tmp_path, with_terms=False)
    assert code == 0 and "term" not in table and all("terms" not in s for s in segments)


WMT23_ROWS = [  # the WMT23 terminology task's rows (zouharvi/wmt-terminology-2023): src, ref, langs, hints
    {"src": "我们的机器学习模型很好。", "ref": "Our machine learning model is good.", "langs": "zh-en",
     "hints": {"term": [{"zh": "机器学习", "en": "machine learning"}], "rand": [{"zh": "模型", "en": "model"}]}},
    {"src": "猫在睡觉。", "ref": "The cat is sleeping.", "langs": "zh-en",
     "hints": {"term": [], "rand": [{"zh": "猫", "en": "cat"}]}},
]


def test_the_wmt23_terminology_set_is_reported_in_its_three_settings(tmp_path):
    data = tmp_path / "wmt23_terminology.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in WMT23_ROWS), encoding="utf-8")
    # rows 0-1: no terms in the prompt, 2-3: the correct terms, 4-5: the random ones; each setting answered so that
    # its term success differs: none misses the term, term keeps it, rand keeps one of its two
    answers = ["Our ML model is good.", "The cat is sleeping.", "Our machine learning model is good.",
               "The cat is sleeping.", "Our ML thing is good.", "The cat is sleeping."]
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"index": i, "response": f"<think>x</think><translate>{a}</translate>"})
                                 + "\n" for i, a in enumerate(answers)))
    out = tmp_path / "eval"
    assert main([f"testsets={data}", "template=chat", "generator=file", f"responses={responses}", f"out={out}",
                 "metrics=bleu,chrf"]) == 0
    table = (out / "scores.md").read_text()
    header = [c.strip() for c in table.splitlines()[0].strip("|").split("|")]
    rows = {cells[0]: dict(zip(header, cells)) for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:] if line.startswith("|"))}
    assert set(rows) == {"wmt23term-none/zh-en", "wmt23term-term/zh-en", "wmt23term-rand/zh-en"}, table
    assert rows["wmt23term-none/zh-en"]["term success %"] == "0.0"     # measured against the correct terms
    assert rows["wmt23term-term/zh-en"]["term success %"] == "100.0"
    assert rows["wmt23term-rand/zh-en"]["term success %"] == "50.0"    # against the random terms it was given
    prompts = [json.loads(l) for l in (out / "segments.jsonl").read_text().splitlines()]
    assert [s["data_source"] for s in prompts][::2] == ["wmt23term-none/zh-en", "wmt23term-term/zh-en",
                                                        "wmt23term-rand/zh-en"]

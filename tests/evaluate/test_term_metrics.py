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

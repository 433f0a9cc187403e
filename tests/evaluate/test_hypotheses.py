"""An outside system's translations (`hypotheses=FILE`: one line a segment of the test set's file, the rows
evaluation leaves out included) and `extract=raw` (the answer scored as it is, no format rate claimed),
through the real CLI with BLEU/chrF only (no scorer)."""
from __future__ import annotations

import csv
import json

from sacrebleu.metrics import BLEU, CHRF

from src.evaluate.cli import main
from src.evaluate.options import parse_options
from src.evaluate.testsets import read_any
from tests.evaluate.conftest import CASES
from tests.helpers.refusals import assert_one_line_refusal

EN = ["The museum reopened on Monday after two years of renovation.",
      "Heavy rain is expected in the south of the country this weekend.",
      "The company said its profits rose by 12 percent last year.",
      "Visitors should book their tickets at least a week in advance.",
      "Scientists have found water ice near the moon's south pole."]
ZH = ["这座博物馆经过两年的翻修，于周一重新开放。", "预计本周末该国南部将有大雨。", "该公司表示，其去年的利润增长了百分之十二。",
      "游客应至少提前一周预订门票。", "科学家在月球南极附近发现了水冰。"]
# an outside system's output for the whole released file: line 1 and 3 translate the is_bad_source rows
SYSTEM = ["博物馆翻修两年后于周一重新开放。", "坏源句的译文一", "该公司说去年利润增长了百分之十二。", "坏源句的译文二",
          "科学家在月球南极发现了冰。"]
BAD = (1, 3)


def wmt24pp(tmp_path):
    path = tmp_path / "en-zh_CN.jsonl"
    path.write_text("".join(json.dumps({"lp": "en-zh_CN", "segment_id": i, "is_bad_source": i in BAD,
                                        "source": s, "target": t}, ensure_ascii=False) + "\n"
                            for i, (s, t) in enumerate(zip(EN, ZH))), encoding="utf-8")
    return path


def lines_file(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def segments_of(out):
    return [json.loads(line) for line in (out / "segments.jsonl").read_text(encoding="utf-8").splitlines()]


def test_kept_rows_know_their_line_in_the_released_file(tmp_path):
    test = read_any(wmt24pp(tmp_path), template="chat")
    assert test.segments == 5 and test.bad_source_dropped == 2
    assert [r.line for r in test.rows] == [0, 2, 4]
    assert [r.index for r in test.rows] == [0, 1, 2]  # the index stays the kept rows' own numbering


def test_wmt24pp_hypotheses_scored_on_the_kept_rows_lines(tmp_path, capsys):
    hyps, out = lines_file(tmp_path / "system.zh", SYSTEM), tmp_path / "eval"
    code = main([f"testsets={wmt24pp(tmp_path)}", "template=chat", f"hypotheses={hyps}", "metrics=bleu,chrf",
                 f"out={out}"])
    assert code == 0, capsys.readouterr().err
    segs = segments_of(out)
    kept = [SYSTEM[i] for i in range(5) if i not in BAD]
    assert [s["translation"] for s in segs] == kept and [s["ref"] for s in segs] == [ZH[0], ZH[2], ZH[4]]
    assert all(s["format_ok"] is None and s["format_error"] == "" for s in segs)  # raw: not judged
    row = next(csv.DictReader(open(out / "scores.csv", encoding="utf-8")))
    assert float(row["bleu"]) == BLEU(tokenize="zh").corpus_score(kept, [[ZH[0], ZH[2], ZH[4]]]).score
    assert float(row["chrf"]) == CHRF().corpus_score(kept, [[ZH[0], ZH[2], ZH[4]]]).score
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["generator"] == "hypotheses" and summary["options"]["extract"] == "raw"


def test_a_hypotheses_file_of_another_length_is_refused_before_anything(tmp_path, capsys):
    test_set = wmt24pp(tmp_path)
    kept_only = lines_file(tmp_path / "kept.zh", [SYSTEM[0], SYSTEM[2], SYSTEM[4]])  # the dropped rows' lines missing
    out = tmp_path / "eval"
    code = main([f"testsets={test_set}", "template=chat", f"hypotheses={kept_only}", "metrics=bleu", f"out={out}"])
    assert code == 2
    assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: hypotheses: ",
                            f"{kept_only} has 3 lines but {test_set} has 5 segments", "those evaluation leaves out")
    assert not out.exists()


def test_hypotheses_for_a_parquet_follow_its_row_order_and_limit(testset, tmp_path):
    data, _ = testset
    system = [f"line {i}" for i in range(len(CASES))]
    out = tmp_path / "eval"
    assert main([f"data={data}", f"hypotheses={lines_file(tmp_path / 'h.txt', system)}", "metrics=bleu",
                 "limit=3", f"out={out}"]) == 0
    assert [s["translation"] for s in segments_of(out)] == system[:3]


def test_raw_extract_scores_the_answer_as_it_is_and_claims_no_format_rate(testset, tmp_path):
    data, responses = testset
    out = tmp_path / "raw"
    assert main([f"data={data}", "generator=file", f"responses={responses}", "extract=raw", "metrics=bleu,chrf",
                 f"out={out}"]) == 0
    segs = segments_of(out)
    # the untagged answer lenient extraction scores as empty is scored as the translation it is
    assert segs[3]["translation"] == "Let us walk in the park." == CASES[3][-1]
    assert segs[0]["translation"] == CASES[0][-1]  # tags and all: a tagged answer is not this mode's input
    assert [s["format_ok"] for s in segs] == [None] * len(CASES)
    header = (out / "scores.md").read_text(encoding="utf-8").splitlines()[0]
    assert header == "| direction | segments | BLEU | chrF |"
    assert (out / "scores.csv").read_text(encoding="utf-8").splitlines()[0] == "direction,segments,bleu,chrf"
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert all("format_ok" not in row for row in summary["directions"])


def test_hypotheses_imply_raw_unless_extract_is_given(tmp_path):
    assert parse_options(["data=t.parquet", "hypotheses=h.txt"]).extract == "raw"
    given = parse_options(["data=t.parquet", "hypotheses=h.txt", "extract=lenient"])
    assert (given.extract, given.generator) == ("lenient", "hypotheses")


def test_hypotheses_with_another_generator_or_several_test_sets_are_refused(testset, tmp_path, capsys):
    data, responses = testset
    hyps = lines_file(tmp_path / "h.txt", ["x"] * len(CASES))
    for argv, needle in (([f"data={data}", f"hypotheses={hyps}", "generator=file", f"responses={responses}"],
                          "hypotheses= is a generator of its own and generator=file another"),
                         ([f"testsets={data},{data}", "template=chat", f"hypotheses={hyps}"],
                          "testsets= names 2; evaluate each set with its own hypotheses file")):
        assert main(argv + [f"out={tmp_path / 'o'}"]) == 2
        assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: ", needle)
    assert not (tmp_path / "o").exists()

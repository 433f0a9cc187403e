"""End to end after generation: canned responses (generator=file) scored against the live tiny QE
service. The numbers are checked against sacrebleu and the service itself, not just the files."""
from __future__ import annotations

import csv
import json
from statistics import fmean

import pytest
from sacrebleu.metrics import BLEU, CHRF

from src.evaluate.cli import main
from tests.evaluate.conftest import CASES, same_spans


def _run(testset, tmp_path, *extra):
    data, responses = testset
    out = tmp_path / "eval"
    code = main([f"data={data}", "generator=file", f"responses={responses}", f"out={out}", *extra])
    return code, out


def _segments(out):
    return [json.loads(l) for l in (out / "segments.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def evaluated(testset, tmp_path, scorer_token_env):
    code, out = _run(testset, tmp_path, f"scorer_url={scorer_token_env.url}", "batch_items=3")
    assert code == 0
    return out, scorer_token_env


def test_translations_extracted_as_the_reward_parses(evaluated):
    out, _ = evaluated
    segs = _segments(out)
    assert [s["index"] for s in segs] == list(range(len(CASES)))
    got = [(s["translation"], s["format_ok"], s["format_error"]) for s in segs]
    assert got == [
        ("The cat sat on the mat.", True, ""),
        ("Today the weather is very good.", True, ""),
        # lenient: a broken format is still scored on its <translate> part, and counted as broken
        ("Machine translation is a key task of NLP.", False, "text_outside_tags"),
        ("", False, "missing_tag"),
        ("猫坐在垫子上。", True, ""),
        ("今天的天气很好。", True, ""),
        ("", True, ""),
    ]


def test_bleu_and_chrf_equal_sacrebleu_on_the_same_segments(evaluated):
    out, _ = evaluated
    segs = _segments(out)
    rows = {r["direction"]: r for r in csv.DictReader(open(out / "scores.csv", encoding="utf-8"))}
    assert set(rows) == {"zh-en", "en-zh"}
    for direction, tokenize in (("zh-en", "13a"), ("en-zh", "zh")):
        group = [s for s in segs if s["direction"] == direction]
        hyps, refs = [s["translation"] for s in group], [s["ref"] for s in group]
        assert float(rows[direction]["bleu"]) == pytest.approx(
            BLEU(tokenize=tokenize).corpus_score(hyps, [refs]).score, abs=1e-9)
        assert float(rows[direction]["chrf"]) == pytest.approx(CHRF().corpus_score(hyps, [refs]).score, abs=1e-9)
        assert int(rows[direction]["segments"]) == len(group)
        assert float(rows[direction]["format_ok"]) == pytest.approx(
            100 * sum(s["format_ok"] for s in group) / len(group))
        for s in group:  # sentence scores: the reward's BLEU (effective order), sacrebleu's chrF
            assert s["bleu"] == pytest.approx(BLEU(tokenize=tokenize, effective_order=True)
                                              .sentence_score(s["translation"], [s["ref"]]).score)
            assert s["chrf"] == pytest.approx(CHRF().sentence_score(s["translation"], [s["ref"]]).score)
    summary = json.loads((out / "summary.json").read_text())
    assert "tok:zh" in summary["sacrebleu_signatures"]["en-zh"]["bleu"]
    assert "tok:13a" in summary["sacrebleu_signatures"]["zh-en"]["bleu"]


def test_qe_scores_and_spans_equal_what_the_service_answers(evaluated):
    out, svc = evaluated
    segs = _segments(out)
    comet = svc.results("comet_da", [{"src": s["src"], "mt": s["translation"], "ref": s["ref"]} for s in segs])
    kiwi = svc.results("cometkiwi_da", [{"src": s["src"], "mt": s["translation"]} for s in segs])
    xcomet = svc.results("xcomet_xl", [{"src": s["src"], "mt": s["translation"], "ref": s["ref"],
                                      "lang": s["tgt_lang"]} for s in segs], want=["score", "spans"])
    for s, c, k, x in zip(segs, comet, kiwi, xcomet):
        assert s["comet"] == pytest.approx(c["score"], abs=1e-6)
        assert s["kiwi"] == pytest.approx(k["score"], abs=1e-6)
        assert s["xcomet"] == pytest.approx(x["score"], abs=1e-6)
        assert s["xcomet_mqm"] == pytest.approx(x["mqm"], abs=1e-6)
        assert same_spans(s["spans"], x["spans"]), (s["spans"], x["spans"])
        for sev in ("minor", "major", "critical"):
            assert s[f"n_{sev}"] == sum(sp["severity"] == sev for sp in x["spans"])
        for sp in s["spans"]:  # offsets into the scored translation
            assert s["translation"][sp["start"]:sp["end"]] == sp["text"]
    assert any(s["spans"] for s in segs), "the tiny XCOMET marks spans in some segment"
    # the table's QE columns are the segment means per direction
    rows = {r["direction"]: r for r in csv.DictReader(open(out / "scores.csv", encoding="utf-8"))}
    for direction, row in rows.items():
        group = [s for s in segs if s["direction"] == direction]
        for key in ("comet", "kiwi", "xcomet", "xcomet_mqm", "n_minor"):
            assert float(row[key]) == pytest.approx(fmean(s[key] for s in group))


def test_markdown_table_has_one_row_per_direction(evaluated):
    out, _ = evaluated
    lines = (out / "scores.md").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("| direction | segments | format ok % | BLEU | chrF | COMET-DA | CometKiwi | XCOMET")
    body = [l for l in lines[2:] if l.strip()]
    assert [l.split("|")[1].strip() for l in body] == ["en-zh", "zh-en"]
    assert {p.name for p in out.iterdir()} == {"scores.md", "scores.csv", "segments.jsonl", "summary.json"}


def test_strict_extract_and_text_metrics_only_need_no_scorer(testset, tmp_path, monkeypatch):
    monkeypatch.delenv("QE_SCORER_TOKEN", raising=False)
    code, out = _run(testset, tmp_path, "metrics=bleu", "extract=strict")
    assert code == 0
    segs = _segments(out)
    assert segs[2]["translation"] == "" and segs[2]["format_ok"] is False
    assert "comet" not in segs[0] and "chrf" not in segs[0]
    header = (out / "scores.csv").read_text().splitlines()[0]
    assert header == "direction,segments,format_ok,bleu"


def test_an_existing_out_is_refused_before_any_work_and_left_as_it_was(testset, tmp_path, capsys):
    """Before issue 26 the second run renamed the first's dir away and deleted it (`out=~/thesis`
    deleted the thesis)."""
    code, out = _run(testset, tmp_path, "metrics=bleu,chrf")
    assert code == 0
    (out / "notes.txt").write_text("the user's own file")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    code, _ = _run(testset, tmp_path, "metrics=bleu", "limit=2")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith(f"evaluate: error: out: {out} already exists; evaluate never replaces")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "eval", "responses.jsonl"]


def test_held_out_metrics_marked_beside_the_trained_one(evaluated, testset, tmp_path):
    """trained_on=kiwi (a policy trained on CometKiwi): COMET-DA, XCOMET, BLEU, chrF are held out;
    the same numbers as without the option, only marked."""
    plain, scorer = evaluated
    data, responses = testset
    out = tmp_path / "marked"
    code = main([f"data={data}", "generator=file", f"responses={responses}", f"out={out}",
                 f"scorer_url={scorer.url}", "batch_items=3", "trained_on=kiwi"])
    assert code == 0
    header = (out / "scores.md").read_text(encoding="utf-8").splitlines()[0]
    assert ("| BLEU (held out) | chrF (held out) | COMET-DA (held out) | CometKiwi (trained) | XCOMET (held out) "
            "| XCOMET MQM (held out) |") in header
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["trained_on"] == ["kiwi"] and summary["held_out"] == ["bleu", "chrf", "comet", "xcomet"]
    assert "trained_on" not in json.loads((plain / "summary.json").read_text(encoding="utf-8"))
    # the same segments and scores (the service batches by arrival: padding moves the last digits)
    for marked, unmarked in zip(_segments(out), _segments(plain), strict=True):
        assert marked.keys() == unmarked.keys()
        for key, value in unmarked.items():
            if isinstance(value, float):
                assert marked[key] == pytest.approx(value, abs=1e-4), key
            elif key != "spans":
                assert marked[key] == value, key
    assert (out / "scores.csv").read_text().splitlines()[0] == (plain / "scores.csv").read_text().splitlines()[0]

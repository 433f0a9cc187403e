"""MetricX-24 as a held-out metric of `python -m src.evaluate` (issue 25 part 2/3): canned responses
scored against the live QE service serving the tiny random MetricX-24 beside the tiny CometKiwi; the
numbers are the service's own for the same items (reference mode by default, QE mode with
metricx_reference=false), the column says "0-25, lower is better" and "(held out)"."""
from __future__ import annotations

import csv
import json
from statistics import fmean

import pytest

from src.evaluate.cli import main
from tests.evaluate.conftest import CASES
from tests.helpers.scorer_service import METRICX_MODEL
from tests.helpers.scorer_service import TOKEN

HEADER = "MetricX-24 (0-25, lower is better)"


@pytest.fixture
def service(metricx_service, monkeypatch):
    monkeypatch.setenv("QE_SCORER_TOKEN", TOKEN)
    return metricx_service


def _run(testset, tmp_path, name, *extra):
    data, responses = testset
    out = tmp_path / name
    return main([f"data={data}", "generator=file", f"responses={responses}", f"out={out}", *extra]), out


def _segments(out):
    return [json.loads(l) for l in (out / "segments.jsonl").read_text(encoding="utf-8").splitlines()]


def test_metricx_held_out_beside_the_trained_metric(testset, tmp_path, service):
    code, out = _run(testset, tmp_path, "eval", f"scorer_url={service.url}", "metrics=bleu,kiwi,metricx",
                     "trained_on=kiwi", "batch_items=3")
    assert code == 0
    segs = _segments(out)
    assert len(segs) == len(CASES)
    # reference mode: source + translation + reference, as the service scores that item
    want = service.results(METRICX_MODEL, [{"src": s["src"], "mt": s["translation"], "ref": s["ref"]} for s in segs])
    for seg, w in zip(segs, want, strict=True):
        assert seg["metricx"] == pytest.approx(w["score"], abs=1e-4) and 0.0 <= seg["metricx"] <= 25.0
    assert segs[-1]["translation"] == "" and segs[-1]["metricx"] == 25.0  # an empty answer: the worst score
    header = (out / "scores.md").read_text(encoding="utf-8").splitlines()[0]
    assert f"| CometKiwi (trained) | {HEADER} (held out) |" in header
    rows = {r["direction"]: r for r in csv.DictReader(open(out / "scores.csv", encoding="utf-8"))}
    for direction, row in rows.items():
        assert float(row["metricx"]) == pytest.approx(fmean(s["metricx"] for s in segs if s["direction"] == direction))
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["trained_on"] == ["kiwi"] and summary["held_out"] == ["bleu", "metricx"]
    assert summary["options"]["metricx_model"] == METRICX_MODEL and summary["options"]["metricx_reference"] is True


def test_qe_mode_as_the_reward_asks_it(testset, tmp_path, service):
    code, out = _run(testset, tmp_path, "qe", f"scorer_url={service.url}", "metrics=metricx",
                     "metricx_reference=false")
    assert code == 0
    segs = _segments(out)
    want = service.results(METRICX_MODEL, [{"src": s["src"], "mt": s["translation"]} for s in segs])
    assert [s["metricx"] for s in segs] == pytest.approx([w["score"] for w in want], abs=1e-4)
    with_ref = service.results(METRICX_MODEL,
                               [{"src": s["src"], "mt": s["translation"], "ref": s["ref"]} for s in segs])
    assert [s["metricx"] for s in segs] != pytest.approx([w["score"] for w in with_ref], abs=1e-4)
    assert (out / "scores.md").read_text(encoding="utf-8").splitlines()[0].endswith(f"| {HEADER} |")


def test_a_model_of_another_kind_is_refused_before_any_work(testset, tmp_path, service, capsys):
    code, out = _run(testset, tmp_path, "wrong", f"scorer_url={service.url}", "metrics=metricx",
                     "metricx_model=cometkiwi_da")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["evaluate: error: QE scorer model 'cometkiwi_da' is a cometkiwi model; metricx needs "
                                 "metricx"]
    assert not out.exists()


def test_metricx_is_opt_in():
    """The default metrics stay what they were: a setup without MetricX's checkpoints evaluates as before."""
    from src.evaluate.options import EvalOptions, parse_options

    assert EvalOptions().metrics == ["bleu", "chrf", "comet", "kiwi", "xcomet"]
    assert parse_options(["data=x.parquet", "generator=file", "responses=r.jsonl", "metrics=bleu,metricx"]).qe_metrics \
        == ["metricx"]

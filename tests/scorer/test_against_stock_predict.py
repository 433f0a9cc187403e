"""The service against STOCK unbabel-comet `predict()` (comet 2.2.7 as installed, decode unpatched).

The oracle is comet itself on the same tiny checkpoints and inputs. Where the service differs on
purpose (src/scorer/backends/comet/decode.py docstring), the difference is
named here and asserted exactly:
  D1 a span still open at the last MT subword: stock drops it, the service keeps it;
  D2 `<s>` labelled as an error: stock starts the span at `<s>` (text "<s>...", start 0, severity
     and confidence from `<s>` too), the service starts it at the first MT subword (and drops a
     span that is only `<s>`);
  D3 a span made only of bare '▁' pieces (no visible text): stock reports it, the service does not;
  D4 start offsets: stock's start of a '▁word' subword includes the preceding space, the
     service's start is the first visible character;
  D5 score and MQM follow the spans: service - stock == w_mqm * (MQM_service - MQM_stock), with
     w_mqm = comet's own `score_weights[3]`.
Everything else (scores of every model kind, severities, span ends, confidences) is equal within
fp32 tolerance.
"""
from __future__ import annotations

import random
import re

import pytest
import torch

from src.scorer.backends.comet.decode import FixedDecoder

from .conftest import comet_predict

FP32_TOL = 1e-5


def stock_decode(model, probs, ids, offsets):
    """comet's own UnifiedMetric.decode, whatever is installed on the instance."""
    from comet.models.multitask.unified_metric import UnifiedMetric

    return UnifiedMetric.decode(model, probs, ids, offsets)


def mqm_as_comet(spans) -> float:
    # comet/models/multitask/xcomet_metric.py, XCOMETMetric.predict_step._compute_mqm_from_spans
    w = {"minor": 1, "major": 5, "critical": 10}
    return (25 - min(25, sum(w.get(s["severity"], 0) for s in spans))) / 25


# ---------------------------------------------------------------------------------------------
# Crafted subword probabilities: each deliberate difference triggered on its own.

@pytest.fixture(scope="module")
def xc(comet_models):
    return comet_models("xcomet")


def crafted(model, mt: str, labels_by_piece):
    """MT tokenized as comet does; `labels_by_piece(k, piece)` -> label name for subword k.
    Returns (probs [1,S,L], ids [1,S], offsets [[...]]) with the chosen label at p=0.7."""
    tok = model.encoder.tokenizer
    enc = tok(mt, return_offsets_mapping=True)
    pieces = tok.convert_ids_to_tokens(enc["input_ids"])
    lab = {v: k for k, v in model.label_encoder.ids_to_label.items()}
    n_labels = len(lab)
    probs = torch.full((1, len(pieces), n_labels), 0.3 / (n_labels - 1))
    for k, p in enumerate(pieces):
        probs[0, k, lab[labels_by_piece(k, p)]] = 0.7
    return probs, torch.tensor([enc["input_ids"]]), [[tuple(o) for o in enc["offset_mapping"]]], pieces


def both(model, mt, labels_by_piece):
    probs, ids, offs, pieces = crafted(model, mt, labels_by_piece)
    fixed = FixedDecoder(model)(probs, ids, offs)[0]  # not installed: the stock model stays stock
    return stock_decode(model, probs, ids, offs)[0], fixed, pieces


def test_no_difference_when_no_rule_is_triggered(xc):
    # one error word in the middle, `</s>` labelled O: the span closes normally in both
    stock, fixed, pieces = both(xc, "the cat sat on the mat.",
                                lambda k, p: "I-major" if p == "\u2581on" else "O")
    assert len(stock) == len(fixed) == 1
    assert [(s["severity"], s["start"], s["end"], s["text"]) for s in stock] == \
           [(f["severity"], f["start"], f["end"], f["text"]) for f in fixed]
    assert stock[0]["confidence"] == pytest.approx(fixed[0]["confidence"], abs=FP32_TOL)


def test_D1_span_open_at_the_last_subword_is_dropped_by_stock_only(xc):
    mt = "the cat sat on the mat."
    # every subword including </s> is an error: stock never sees an "O" to close the span
    stock, fixed, _ = both(xc, mt, lambda k, p: "O" if p == "<s>" else "I-critical")
    assert stock == []
    assert [(f["severity"], f["start"], f["end"]) for f in fixed] == [("critical", 0, len(mt))]
    assert mqm_as_comet(stock) == 1.0 and mqm_as_comet(fixed) == pytest.approx(15 / 25)


def test_D2_span_starting_at_bos(xc):
    mt = "the cat sat on the mat."
    stock, fixed, _ = both(xc, mt, lambda k, p: "I-minor" if p in ("<s>", "\u2581the") and k < 2 else "O")
    assert [(s["text"], s["start"], s["end"]) for s in stock] == [("<s> the", 0, 3)]
    assert [(f["text"], f["start"], f["end"]) for f in fixed] == [("the", 0, 3)]
    # only <s>: stock reports an empty-range span that costs MQM, the service nothing
    stock, fixed, _ = both(xc, mt, lambda k, p: "I-major" if p == "<s>" else "O")
    assert [(s["text"], s["start"], s["end"]) for s in stock] == [("<s>", 0, 0)]
    assert fixed == []


def test_D3_span_of_bare_word_start_pieces(xc):
    mt = "a 老师"  # tokenizes as '▁a', '▁', '老', '师': the bare '▁' covers only the space
    stock, fixed, pieces = both(xc, mt, lambda k, p: "I-minor" if p == "\u2581" else "O")
    assert "\u2581" in pieces
    assert len(stock) == 1 and stock[0]["text"].strip() == "" and mt[stock[0]["start"]:stock[0]["end"]] == " "
    assert fixed == []


# ---------------------------------------------------------------------------------------------
# End to end: the running service against stock comet.predict on random inputs.

@pytest.fixture(scope="module")
def corpus(tiny_dir):
    lines = (tiny_dir / "spm" / "corpus.txt").read_text(encoding="utf-8").splitlines()
    # whitespace-segmented scripts only, so word tags can be recomputed without a segmenter
    return [l for l in lines if l.isascii() and l.strip()]


def samples_for(corpus, n, with_ref, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        it = {"src": rng.choice(corpus), "mt": " ".join(rng.choice(corpus) for _ in range(rng.randint(1, 2))),
              "lang": "en"}
        if with_ref:
            it["ref"] = rng.choice(corpus)
        out.append(it)
    return out


@pytest.mark.parametrize("name, fixture", [("da", "comet-da"), ("qe", "referenceless"),
                                           ("kiwi", "cometkiwi"), ("uni", "unified-wl")])
def test_service_scores_equal_stock_predict(service, comet_models, corpus, name, fixture):
    samples = samples_for(corpus, 16, name == "da", seed=len(name))
    status, body, _ = service.score(name, samples)
    assert status == 200, body
    expected = comet_predict(comet_models(fixture), [{k: v for k, v in s.items() if k != "lang"} for s in samples])
    got = [r["score"] for r in body["results"]]
    assert got == pytest.approx(list(expected.scores), abs=FP32_TOL)


def reconcile(mt, stock_spans, service_spans, seen):
    """Pairs every stock span with its service span under D2-D4, and allows exactly one extra
    service span (D1). Records which differences occurred in `seen`."""
    remaining = list(service_spans)
    for s in stock_spans:
        text = s["text"]
        if text.startswith("<s>"):
            seen.add("D2")
            if text[3:].strip() == "":  # only <s>, or <s> and bare '\u2581' pieces (D2 + D3)
                continue
        elif text.strip() == "":
            seen.add("D3")
            continue
        match = [f for f in remaining if f["end"] == s["end"]]
        assert len(match) == 1, (mt, s, service_spans)
        f = match[0]
        remaining.remove(f)
        if not text.startswith("<s>"):  # D2: stock's severity is the label of <s>
            assert f["severity"] == s["severity"], (mt, s, f)
        start = s["start"]
        while mt[start].isspace():
            start += 1
        if start != s["start"]:
            seen.add("D4")
        assert (f["start"], f["text"]) == (start, mt[start:s["end"]])
        if not text.startswith("<s>"):
            assert f["confidence"] == pytest.approx(s["confidence"], abs=FP32_TOL)
    if remaining:
        seen.add("D1")
        [extra] = remaining
        assert extra["end"] == len(mt.rstrip()) and extra["start"] > max([-1] + [f["end"] - 1 for f in service_spans if f is not extra])


def whitespace_tags(mt, spans):
    return [{"start": m.start(), "end": m.end(),
             "tag": "BAD" if any(m.start() < s["end"] and s["start"] < m.end() for s in spans) else "OK"}
            for m in re.finditer(r"\S+", mt)]


def compare_xcomet(service, stock_model, samples, name, threshold, seen):
    status, body, _ = service.score(name, samples, want=["score", "spans", "word_tags"])
    assert status == 200, body
    stock_model.set_decoding_threshold(threshold)
    try:
        expected = comet_predict(stock_model, [{k: v for k, v in s.items() if k != "lang"} for s in samples])
    finally:
        stock_model.decoding_threshold = None
    w_mqm = stock_model.score_weights[3]
    for s, got, score, mqm, spans in zip(samples, body["results"], expected.scores,
                                         list(expected.metadata.mqm_scores), expected.metadata.error_spans):
        reconcile(s["mt"], spans, got["spans"], seen)
        assert mqm == pytest.approx(mqm_as_comet(spans), abs=1e-6)          # comet's own MQM of its spans
        assert got["mqm"] == pytest.approx(mqm_as_comet(got["spans"]), abs=1e-6)  # D5: MQM follows spans
        assert got["score"] - score == pytest.approx(w_mqm * (got["mqm"] - mqm), abs=FP32_TOL)
        assert [(w["start"], w["end"], w["tag"]) for w in got["word_tags"]] == \
               [(w["start"], w["end"], w["tag"]) for w in whitespace_tags(s["mt"], got["spans"])]
    return sum(len(r["spans"]) for r in body["results"])


def test_xcomet_service_against_stock_predict(service, comet_models, corpus):
    """argmax and threshold decoding (service models "xc" / "xc-thr"), QE and with reference."""
    seen, n_spans = set(), 0
    for name, threshold in (("xc", None), ("xc-thr", 0.85)):
        for with_ref in (False, True):
            samples = samples_for(corpus, 40, with_ref, seed=7 + with_ref)
            n_spans += compare_xcomet(service, comet_models("xcomet"), samples, name, threshold, seen)
    # not vacuous: random tiny weights produce spans, and the differences of real inputs happen
    assert n_spans > 0
    assert {"D1", "D2", "D4"} <= seen, seen

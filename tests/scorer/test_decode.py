"""Span decoding fixes on hand-made tag sequences, MQM, and XCOMET's final score.

Each case runs comet 2.2.7's own `UnifiedMetric.decode` next to ours on the same subword
probabilities of a real (tiny) XCOMET model and tokenizer, so the stock bug is shown, not assumed.
"""
from __future__ import annotations

import copy

import pytest
import torch
from comet.models.multitask.unified_metric import UnifiedMetric

from src.scorer.backends.comet.decode import (FixedDecoder, decode_sequence, install_fixed_decode,
                               labels_from_probs, mqm_from_spans, trim_span)

LABELS = {"O": 0, "minor": 1, "major": 2, "critical": 3}


@pytest.fixture(scope="module")
def xcomet(comet_models):
    return comet_models("xcomet")


def encode(model, mt):
    tok = model.encoder.tokenizer
    enc = tok([mt], return_offsets_mapping=True)
    return (torch.tensor(enc["input_ids"]), [list(map(tuple, enc["offset_mapping"][0]))],
            tok.convert_ids_to_tokens(enc["input_ids"][0]))


def probs_for(tags, p=0.9):
    """One subword per tag; the tagged label gets probability p, the rest share 1-p."""
    out = torch.full((1, len(tags), 4), (1 - p) / 3)
    for k, t in enumerate(tags):
        out[0, k, LABELS[t]] = p
    return out


def both(model, mt, tags):
    ids, offsets, pieces = encode(model, mt)
    assert len(tags) == len(pieces), pieces
    probs = probs_for(tags)
    stock = UnifiedMetric.decode(model, probs, ids, offsets)[0]
    ours = FixedDecoder(model)(probs, ids, offsets)[0]
    for sp in ours:
        sp["start"], sp["end"] = trim_span(mt, sp["start"], sp["end"])
        sp["text"] = mt[sp["start"]:sp["end"]]
    return stock, ours, pieces


MT = "The fire could be stopped."  # <s> ▁T he ▁fire ▁could ▁be ▁stopped . </s>


def test_tokenization_the_cases_rely_on(xcomet):
    _, offsets, pieces = encode(xcomet, MT)
    assert pieces == ["<s>", "▁T", "he", "▁fire", "▁could", "▁be", "▁stopped", ".", "</s>"]
    assert offsets[0][3] == (3, 8)  # '▁fire' starts at the space before "fire"


def test_span_open_at_the_last_token_is_kept(xcomet):
    tags = ["O", "O", "O", "O", "O", "O", "major", "major", "major"]
    stock, ours, _ = both(xcomet, MT, tags)
    assert stock == []  # 2.2.7 never appends a span still open at the end
    assert [(s["text"], s["severity"], s["start"], s["end"]) for s in ours] == [
        ("stopped.", "major", 18, 26)]
    assert mqm_from_spans(stock) == 1.0 and mqm_from_spans(ours) == pytest.approx(0.8)


def test_fully_wrong_mt_gets_one_span_not_none(xcomet):
    stock, ours, _ = both(xcomet, MT, ["critical"] * 9)
    assert stock == []
    assert [(s["text"], s["start"], s["end"]) for s in ours] == [(MT[:26], 0, 26)]
    assert mqm_from_spans(ours) == pytest.approx(0.6)


def test_bos_never_inside_a_span(xcomet):
    stock, ours, _ = both(xcomet, MT, ["minor", "minor", "minor", "O", "O", "O", "O", "O", "O"])
    assert "<s>" in stock[0]["text"]
    assert [(s["text"], s["start"], s["end"]) for s in ours] == [("The", 0, 3)]


def test_eos_does_not_zero_the_end_offset(xcomet):
    # An error on '.' that continues into </s>: stock would set end=0 (and then drop it).
    tags = ["O", "O", "O", "minor", "O", "O", "O", "major", "major"]
    stock, ours, _ = both(xcomet, MT, tags)
    assert [(s["text"], s["start"], s["end"]) for s in stock] == [("fire", 3, 8)]  # "." lost
    assert [(s["text"], s["severity"]) for s in ours] == [("fire", "minor"), (".", "major")]


def test_leading_space_trimmed_from_offsets(xcomet):
    stock, ours, _ = both(xcomet, MT, ["O", "O", "O", "major", "major", "O", "O", "O", "O"])
    assert (stock[0]["start"], stock[0]["end"]) == (3, 14)  # includes the space before "fire"
    assert [(s["text"], s["start"], s["end"]) for s in ours] == [("fire could", 4, 14)]


def test_blank_piece_alone_is_not_a_span(xcomet):
    mt = "a  b"  # <s> ▁a ▁ b </s>: the bare '▁' has no visible text
    stock, ours, pieces = both(xcomet, mt, ["O", "O", "minor", "O", "O"])
    assert pieces[2] == "▁"
    assert [(s["text"], s["start"], s["end"]) for s in stock] == [("", 2, 3)]
    assert ours == []


def test_several_spans_severity_of_first_subword_and_confidence(xcomet):
    tags = ["O", "minor", "major", "O", "critical", "O", "minor", "minor", "O"]
    stock, ours, _ = both(xcomet, MT, tags)
    assert [(s["text"], s["severity"]) for s in ours] == [
        ("The", "minor"), ("could", "critical"), ("stopped.", "minor")]
    assert all(s["confidence"] == pytest.approx(0.9) for s in ours)
    # Where 2.2.7 is right, both agree on severity and confidence.
    assert [s["severity"] for s in stock[1:]] == ["critical", "minor"]
    assert mqm_from_spans(ours) == pytest.approx(1 - 12 / 25)


def test_mqm_weights_and_cap():
    sp = lambda sev: {"severity": sev}  # noqa: E731
    assert mqm_from_spans([]) == 1.0
    assert mqm_from_spans([sp("minor")]) == pytest.approx(24 / 25)
    assert mqm_from_spans([sp("major")]) == pytest.approx(20 / 25)
    assert mqm_from_spans([sp("critical")]) == pytest.approx(15 / 25)
    assert mqm_from_spans([sp("minor"), sp("major"), sp("critical")]) == pytest.approx(9 / 25)
    assert mqm_from_spans([sp("critical")] * 3) == 0.0  # capped at 25


def test_decode_sequence_on_label_ids_only():
    ids_to_label = {0: "O", 1: "I-minor", 2: "I-major"}
    spans = decode_sequence(labels=[0, 1, 1, 0, 2], confidences=[1, .6, .8, 1, .7],
                            token_ids=[0, 10, 11, 12, 13], offsets=[(0, 0), (0, 2), (2, 4), (4, 6), (6, 8)],
                            ids_to_label=ids_to_label, special_ids={0, 2})
    assert [(s["start"], s["end"], s["severity"]) for s in spans] == [(0, 4, "minor"), (6, 8, "major")]
    assert spans[0]["confidence"] == pytest.approx(0.7)


def test_threshold_rule_matches_comet():
    probs = torch.tensor([[0.6, 0.3, 0.1, 0.0],   # P(err)=0.4 > 0.3 -> minor (0.3)
                          [0.8, 0.1, 0.05, 0.05],  # P(err)=0.2 -> O
                          [0.2, 0.1, 0.1, 0.6]])   # critical
    labels, conf = labels_from_probs(probs, 0.3)
    assert labels.tolist() == [1, 0, 3]
    assert conf.tolist() == pytest.approx([0.3, 0.8, 0.6])
    labels, conf = labels_from_probs(probs, None)
    assert labels.tolist() == [0, 0, 3]


def _forced(model, label: int):
    """A copy of the model whose tag head predicts `label` everywhere (incl. <s> and </s>)."""
    m = copy.deepcopy(model)
    with torch.no_grad():
        m.hidden2tag.weight.zero_()
        m.hidden2tag.bias.fill_(-50.0)
        m.hidden2tag.bias[label] = 50.0
    return m


@pytest.mark.parametrize("with_ref", [False, True])
def test_xcomet_final_score_uses_fixed_spans_and_xcomet_weights(xcomet, with_ref):
    m = _forced(xcomet, LABELS["major"])
    sample = {"src": "Dem Feuer konnte Einhalt geboten werden.", "mt": MT}
    if with_ref:
        sample["ref"] = "They were able to control the fire."
    stock = m.predict([sample], batch_size=1, gpus=0, progress_bar=False)
    assert stock.metadata.error_spans == [[]] and stock.metadata.mqm_scores == [1.0]

    install_fixed_decode(m)
    with torch.inference_mode():
        pred = m.predict_step(m.prepare_for_inference([sample]))
    md = pred["metadata"]
    assert len(md["error_spans"][0]) == 1 and md["error_spans"][0][0]["severity"] == "major"
    mqm = mqm_from_spans(md["error_spans"][0])
    assert float(md["mqm_scores"][0]) == pytest.approx(mqm) == pytest.approx(0.8)
    clip = lambda t: min(1.0, float(t[0]))  # noqa: E731
    if with_ref:
        expected = (0.12 * clip(md["src_scores"]) + 0.33 * clip(md["ref_scores"])
                    + 0.33 * clip(md["unified_scores"]) + 0.22 * mqm)
    else:
        expected = 0.78 * clip(md["src_scores"]) + 0.22 * mqm
    assert float(pred["scores"][0]) == pytest.approx(expected, abs=1e-6)
    # The stock predict path with the same model differs exactly by the MQM term.
    assert stock.scores[0] - float(pred["scores"][0]) == pytest.approx(0.22 * (1.0 - mqm), abs=1e-6)

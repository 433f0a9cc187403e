"""Error-span decoding for comet's word-level heads (UnifiedMetric / XCOMETMetric), fixed.

comet 2.2.7's `UnifiedMetric.decode` (which XCOMET's predict_step also calls, and whose spans
feed XCOMET's MQM and therefore its final score) has these problems:
  1. a span still open at the last MT subword is never appended, so an MT that is wrong up to
     its end loses that span (an entirely wrong MT can get no spans and MQM 1.0);
  2. special tokens are labelled like words: a span can start at `<s>` (its text then contains
     "<s>", its start is 0) or run into `</s>` (its end becomes 0);
  3. `.item()` per subword: one device sync per subword when the probabilities live on a GPU;
  4. start offsets of '▁word' subwords include the preceding space.
Here spans are runs of error-labelled subwords between special tokens, flushed at the end;
subwords that are only '▁' cannot make a span on their own (no visible text); everything runs
on one CPU copy of the probabilities. (4) needs the MT text and is done by `trim_span`.
What stays as in 2.2.7: argmax or threshold labelling, severity = label of the first subword,
confidence = mean probability of the chosen labels, MQM weights and cap.
"""
from __future__ import annotations

import copy
import threading
from typing import Dict, List, Optional, Sequence, Set, Tuple

import torch

from src.scorer.vocabulary import SEVERITIES

MQM_WEIGHTS = dict(zip(SEVERITIES, (1, 5, 10)))  # XCOMET's MQM weight per severity (mqm_from_spans)
MQM_CAP = 25

Offset = Tuple[int, int]


def labels_from_probs(probs: torch.Tensor, threshold: Optional[float]):
    """probs [..., n_labels] (label 0 = "O") -> (label ids, probability of the chosen label).

    Same rule as comet: argmax, or with a threshold "error iff P(any error) > threshold, then the
    most likely error label"."""
    probs = probs.float()
    if threshold:
        p_err, l_err = probs[..., 1:].max(-1)
        is_err = probs[..., 1:].sum(-1) > threshold
        labels = torch.where(is_err, l_err + 1, torch.zeros_like(l_err))
        conf = torch.where(is_err, p_err, probs[..., 0])
        return labels, conf
    conf, labels = probs.max(-1)
    return labels, conf


def decode_sequence(labels: Sequence[int], confidences: Sequence[float], token_ids: Sequence[int],
                    offsets: Sequence[Offset], ids_to_label: Dict[int, str],
                    special_ids: Set[int], blank_ids: Set[int] = frozenset()) -> List[Dict]:
    """One MT's subword labels -> spans [{tokens, severity, start, end, confidence}].

    `offsets` are the MT tokenizer's character offsets (specials are (0, 0))."""
    spans: List[Dict] = []
    cur: Optional[Dict] = None

    def close() -> None:
        nonlocal cur
        if cur is not None and any(t not in blank_ids for t in cur["tokens"]):
            spans.append({"tokens": cur["tokens"], "severity": cur["severity"],
                          "start": cur["start"], "end": cur["end"],
                          "confidence": sum(cur["conf"]) / len(cur["conf"])})
        cur = None

    for lab_id, conf, tok, (start, end) in zip(labels, confidences, token_ids, offsets):
        label = ids_to_label[int(lab_id)]
        if tok in special_ids or not label.startswith("I"):
            close()
            continue
        if cur is None:
            cur = {"tokens": [tok], "severity": label.split("-", 1)[1], "start": start,
                   "end": end, "conf": [float(conf)]}
        else:
            cur["tokens"].append(tok)
            cur["end"] = end
            cur["conf"].append(float(conf))
    close()  # fix 1: the span that reaches the last subword
    return spans


def trim_span(mt: str, start: int, end: int) -> Offset:
    """Moves `start` past the whitespace that '▁' subword offsets include."""
    end = min(end, len(mt))
    while start < end and mt[start].isspace():
        start += 1
    return start, end


def mqm_from_spans(spans: Sequence[Dict]) -> float:
    """XCOMET's MQM: 1 - min(25, minor + 5*major + 10*critical) / 25."""
    penalty = sum(MQM_WEIGHTS.get(s["severity"], 0) for s in spans)
    return (MQM_CAP - min(MQM_CAP, penalty)) / MQM_CAP


def structural_ids(tokenizer) -> Set[int]:
    """<s>, </s>, <pad>...: tokens that are not MT text. <unk> is excluded on purpose: it
    stands for real characters (it has real offsets) and can be part of an error."""
    return set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}


def blank_token_ids(tokenizer) -> Set[int]:
    """Ids of pieces with no visible text (the bare '▁' of SentencePiece)."""
    special = set(tokenizer.all_special_ids)
    return {i for piece, i in tokenizer.get_vocab().items()
            if i not in special and piece.replace("\u2581", "").strip() == ""}


class FixedDecoder:
    """Callable with comet's `decode(subword_probs, input_ids, mt_offsets)` signature.

    Installed on a model instance (`model.decode = FixedDecoder(model)`), so comet's own
    predict_step (and comet.predict) use it, and XCOMET's MQM and final score follow the fixed
    spans. It keeps the last probabilities it saw (`last_probs`, CPU float, [B, S, n_labels])
    because word tags from probabilities need exactly the mixture predict_step computed; they
    are kept per thread, because the service may compute batches on several threads at once.
    Span texts come from a private copy of the tokenizer: the model's own one is used (under a
    lock) by whichever thread prepares a batch, and comet changes its padding settings on every
    batch."""

    def __init__(self, model) -> None:
        self.model = model
        tok = copy.deepcopy(model.encoder.tokenizer)
        self.tokenizer = tok
        self.special_ids = structural_ids(tok)
        self.blank_ids = blank_token_ids(tok)
        self.ids_to_label = dict(model.label_encoder.ids_to_label)
        self._local = threading.local()

    @property
    def last_probs(self) -> Optional[torch.Tensor]:
        """The probabilities of the last batch this thread decoded."""
        return getattr(self._local, "probs", None)

    def __call__(self, subword_probs: torch.Tensor, input_ids: torch.Tensor, mt_offsets) -> List[List[Dict]]:
        probs = subword_probs.detach().float().cpu()  # fix 3: one transfer per batch
        ids = input_ids.detach().cpu()
        self._local.probs = probs
        labels, conf = labels_from_probs(probs, self.model.decoding_threshold)
        labels, conf, ids = labels.tolist(), conf.tolist(), ids.tolist()
        out = []
        for i, offs in enumerate(mt_offsets):
            n = len(offs)
            spans = decode_sequence(labels[i][:n], conf[i][:n], ids[i][:n], offs,
                                    self.ids_to_label, self.special_ids, self.blank_ids)
            for sp in spans:
                sp["text"] = self.tokenizer.decode(sp.pop("tokens"))
            out.append(spans)
        return out


def install_fixed_decode(model) -> FixedDecoder:
    dec = FixedDecoder(model)
    model.decode = dec  # instance attribute: shadows UnifiedMetric.decode for this model only
    return dec

"""The comet backend's runner (backend.py loads it): one loaded comet model and its persistent
inference loop.

Instead of comet's `model.predict()` (a new Lightning Trainer + DataLoader per call, the model
moved to the GPU and back each time), the model stays on its device and each batch goes
through comet's own `prepare_for_inference` + `predict_step` under `torch.inference_mode()`:
the same code path predict() runs per batch, so scores match it.

A batch goes through two steps: `prepare` (comet's tokenisation and collation, CPU tensors)
and `compute` (forward pass, span decoding, results). On a GPU the service runs `prepare` on a
thread of its own, so the next batch is tokenised while the current one computes; on a CPU two
inference threads each run both steps for their own batch (docs/scorer-api.md "How it works").
The model's tokenizer is used under a lock (comet changes its padding settings on every batch);
nothing in `compute` touches it: the span decoder has its own copy, and its per-batch
probabilities are kept per thread. `measure` runs on the event loop with a third copy (the raw
backend), and for large requests on the service's one measuring thread with a fourth (made on
first use), so no two threads ever share tokenizer state.
"""
from __future__ import annotations

import contextlib
import math
import threading
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from src.scorer.backends.comet import words
from src.scorer.backends.comet.decode import FixedDecoder, install_fixed_decode, structural_ids, trim_span
from src.scorer.backends.interface import BaseRunner, PreparedBatch
from src.scorer.config import ModelSpec
from src.scorer.schema import Item, ItemOptions, Measure, ModelInfo

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Tokens a cut text keeps beyond what the encoder sees (ModelRunner._cut): slack only
CUT_MARGIN = 8


def _to_device(obj, device: torch.device):
    if torch.is_tensor(obj):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(_to_device(v, device) for v in obj)
    return obj


class ModelRunner(BaseRunner):
    def __init__(self, name: str, spec: ModelSpec, model, device: str = "cpu",
                 dtype: str = "fp32") -> None:
        self.name = name
        self.spec = spec
        self.device = torch.device(device)
        self.dtype = DTYPES[dtype]
        self.model = model
        model.eval()
        if self.dtype != torch.float32:
            # Only the encoder's weights go to 16 bit (it is >95% of the parameters); the comet
            # heads stay fp32 and run under autocast, because model.to(bfloat16) breaks the
            # COMET-DA and CometKiwi heads.
            model.encoder.to(self.dtype)
        model.to(self.device)
        self.word_level = bool(getattr(model, "word_level", False))
        self.decoder: Optional[FixedDecoder] = None
        if self.word_level:
            self.decoder = install_fixed_decode(model)
            if spec.decoding_threshold is not None:
                model.set_decoding_threshold(spec.decoding_threshold)
        segments = list(getattr(model.hparams, "input_segments", []) or [])
        self.is_unified = hasattr(model, "concat_inputs")
        if self.is_unified:
            self.accepts_ref = "ref" in segments
            self.uses_src = "src" in segments
        else:  # regression metrics: comet-da uses src+mt+ref, referenceless src+mt
            self.accepts_ref = bool(model.requires_references())
            self.uses_src = True
        self.needs_ref = bool(model.requires_references())
        self.has_mqm = type(model).__name__ == "XCOMETMetric"
        tok = model.encoder.tokenizer
        self.special_ids = structural_ids(tok)
        self.max_positions = int(model.encoder.max_positions)
        self.seg_limit = self.max_positions - 2  # comet tokenizes each segment with max_length=510
        self._sep = int(model.encoder.size_separator)
        # A private backend copy with truncation/padding off: measuring real lengths must not
        # race with (or change) the state of the tokenizer the inference thread uses.
        from tokenizers import Tokenizer

        self._prepare_lock = threading.Lock()
        self._measure_tok = Tokenizer.from_str(tok.backend_tokenizer.to_str())
        self._measure_tok.no_truncation()
        self._measure_tok.no_padding()
        self._measure_tok_off_loop: Optional[Tokenizer] = None  # measure(off_loop=True)'s

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(name=self.name, kind=self.spec.kind, model_class=type(self.model).__name__,
                         needs_ref=self.needs_ref, accepts_ref=self.accepts_ref,
                         word_level=self.word_level, has_mqm=self.has_mqm,
                         max_tokens=self.seg_limit)

    # ------------------------------------------------------------------------------------------
    # Cost and truncation, mirroring comet's prepare_sample / concat_sequences
    # ------------------------------------------------------------------------------------------
    def _encode(self, texts: List[str], off_loop: bool = False):
        tok = self._measure_tok
        if off_loop:
            if self._measure_tok_off_loop is None:
                from tokenizers import Tokenizer

                with self._prepare_lock:  # no batch changes the model tokenizer's settings now
                    tok = Tokenizer.from_str(self.model.encoder.tokenizer.backend_tokenizer.to_str())
                tok.no_truncation()
                tok.no_padding()
                self._measure_tok_off_loop = tok
            tok = self._measure_tok_off_loop
        return tok.encode_batch(texts)

    def _cut(self, text: str, enc) -> Optional[int]:
        """Where `text` may be cut without changing what the encoder sees: the first space after
        its first seg_limit + CUT_MARGIN tokens, or None (short enough, or no space after them:
        e.g. Chinese, tokenised whole). Before a space every word is tokenised the same with or
        without the rest (the pre-tokenizer splits at spaces first, the normaliser maps
        characters one by one), so the tokens comet keeps are the same. Comet tokenises the whole
        text under the model's tokenizer lock before truncating, so a 1 MB text would otherwise
        hold every batch of that model for about a second."""
        k = self.seg_limit + CUT_MARGIN
        if len(enc.ids) <= k + 2:
            return None
        p = text.find(" ", enc.offsets[k][1])
        return p if p > 0 else None

    def measure(self, items: Sequence[Item], off_loop: bool = False) -> List[Measure]:
        """`off_loop`: called from the service's one measuring thread, not the event loop."""
        if not items:
            return []
        n = len(items)
        with_ref = [self.accepts_ref and it.ref is not None for it in items]
        texts = [it.mt for it in items]
        if self.uses_src:
            texts += [it.src for it in items]
        texts += [it.ref for it, r in zip(items, with_ref) if r]
        encs = self._encode(texts, off_loop)  # one call for every segment of the request
        lengths = [len(e.ids) for e in encs]
        roles = ["mt"] * n + (["src"] * n if self.uses_src else [])
        owners = list(range(n)) + (list(range(n)) if self.uses_src else [])
        roles += ["ref"] * sum(with_ref)
        owners += [i for i, r in enumerate(with_ref) if r]
        cuts: List[Dict[str, int]] = [{} for _ in range(n)]
        for role, i, text, enc in zip(roles, owners, texts, encs):
            at = self._cut(text, enc)
            if at is not None:
                cuts[i][role] = at
        mt = lengths[:n]
        src = lengths[n:2 * n] if self.uses_src else [0] * n
        ref_iter = iter(lengths[2 * n if self.uses_src else n:])
        ref = [next(ref_iter) if r else 0 for r in with_ref]
        out = []
        for i in range(len(items)):
            segs = [mt[i]] + ([src[i]] if self.uses_src else []) + ([ref[i]] if with_ref[i] else [])
            truncated = any(n > self.seg_limit for n in segs)
            capped = [min(n, self.seg_limit) for n in segs]
            if not self.is_unified:
                out.append(Measure(cost=sum(capped), truncated=truncated, cuts=cuts[i]))
                continue
            # Unified models encode concatenations: [mt, src] or [mt, ref], and with a
            # reference also [mt, ref] and [mt, src, ref]; each is cut at max_positions.
            inner = [n - 2 for n in capped]
            passes = [inner[:2]]
            if len(inner) == 3:
                passes = [inner[:2], [inner[0], inner[2]], inner]
            cost = 0
            for p in passes:
                # <s> a </s></s> b </s> for XLM-R: 2 ends plus a separator between segments
                n = sum(p) + 2 + self._sep * (len(p) - 1)
                truncated |= n > self.max_positions
                cost += min(n, self.max_positions)
            out.append(Measure(cost=cost, truncated=truncated, cuts=cuts[i]))
        return out

    # ------------------------------------------------------------------------------------------
    # The hot loop
    # ------------------------------------------------------------------------------------------
    def _autocast(self):
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def _samples(self, items: Sequence[Item], measures: Sequence[Measure]) -> List[Dict[str, str]]:
        """comet's input; long texts cut where `measure` found it changes nothing (`_cut`).
        Results still refer to the whole item (word tags cover all of `mt`)."""
        out = []
        for it, ms in zip(items, measures):
            s = {"src": it.src[:ms.cuts.get("src")], "mt": it.mt[:ms.cuts.get("mt")]}
            if self.accepts_ref and it.ref is not None:
                s["ref"] = it.ref[:ms.cuts.get("ref")]
            out.append(s)
        return out

    def prepare(self, items: Sequence[Item], options: Sequence[ItemOptions],
                measures: Sequence[Measure]) -> PreparedBatch:
        """comet's own tokenisation + collation of one batch (CPU tensors). All items must agree
        on whether a reference is used (the batcher keeps them apart): comet builds one input
        layout per batch."""
        with self._prepare_lock:  # the tokenizer's settings are not thread-safe
            cpu_batch = self.model.prepare_for_inference(self._samples(items, measures))
        return PreparedBatch(items, options, measures, cpu_batch)

    def forward(self, prepared: PreparedBatch):
        """comet's predict_step (forward pass and the fixed span decoding) on the device."""
        cpu_batch = prepared.cpu_batch
        batch = cpu_batch if self.device.type == "cpu" else _to_device(cpu_batch, self.device)
        with torch.inference_mode(), self._autocast():
            return self.model.predict_step(batch)

    def decode(self, prepared: PreparedBatch, pred) -> List[Dict]:
        """predict_step's output -> scores, MQM, spans, word tags per item."""
        items, options, measures = prepared.items, prepared.options, prepared.measures
        cpu_batch = prepared.cpu_batch
        scores = pred["scores"].float().cpu().tolist()
        meta = pred["metadata"] if "metadata" in pred else {}
        spans_all = meta.get("error_spans") if self.word_level else None
        mqm_all = meta["mqm_scores"].float().cpu().tolist() if self.has_mqm else None
        first_pass = cpu_batch[0] if isinstance(cpu_batch, tuple) else None

        results = []
        for i, (it, opt, ms) in enumerate(zip(items, options, measures)):
            score = scores[i]
            res: Dict = {"score": score if math.isfinite(score) else None,
                         "truncated": ms.truncated}
            if mqm_all is not None:
                res["mqm"] = mqm_all[i]
            if self.word_level and ({"spans", "word_tags"} & opt.want):
                spans = self._clean_spans(it.mt, spans_all[i])
                if "spans" in opt.want:
                    res["spans"] = spans
                if "word_tags" in opt.want:
                    res["word_tags"] = self._word_tags(i, it, opt, ms, spans, first_pass)
            results.append(res)
        return results

    @staticmethod
    def _clean_spans(mt: str, spans: List[Dict]) -> List[Dict]:
        out = []
        for sp in spans:
            start, end = trim_span(mt, int(sp["start"]), int(sp["end"]))
            out.append({"text": mt[start:end], "start": start, "end": end,
                        "severity": sp["severity"], "confidence": float(sp["confidence"])})
        return out

    def _mt_subwords(self, i: int, first_pass) -> Tuple[List[Tuple[int, int]], List[int]]:
        """Trimmed offsets of MT subword positions (specials dropped) and their indices."""
        offs = first_pass["mt_offsets"][i]
        ids = first_pass["input_ids"][i, : len(offs)].tolist()
        mt_offs, idx = [], []
        for k, (tok, (s, e)) in enumerate(zip(ids, offs)):
            if tok in self.special_ids or e <= s:
                continue
            mt_offs.append((s, e))
            idx.append(k)
        return mt_offs, idx

    def _word_tags(self, i: int, it: Item, opt: ItemOptions, ms: Measure, spans: List[Dict],
                   first_pass) -> List[Dict]:
        wds = words.segment(it.mt, it.lang)
        subwords, idx = self._mt_subwords(i, first_pass)
        subwords = [trim_span(it.mt, s, e) for s, e in subwords]
        if opt.word_tag_source == "probs":
            p_ok = self.decoder.last_probs[i, :, 0].tolist()
            p_bad = [1.0 - p_ok[k] for k in idx]
            return words.tags_from_probs(it.mt, wds, subwords, p_bad, opt.word_tag_threshold)
        covered = subwords[-1][1] if (ms.truncated and subwords) else None
        return words.tags_from_spans(it.mt, wds, spans, covered_end=covered)

    def warm_up(self) -> None:
        item = Item(src="Warm-up sentence.", mt="Warm-up sentence.",
                    ref="Warm-up sentence." if self.accepts_ref else None)
        opts = ItemOptions(want=frozenset({"score", "spans"}) if self.word_level else frozenset({"score"}))
        self.run([item], [opts], self.measure([item]))
        if self.word_level:
            words.warm_up()

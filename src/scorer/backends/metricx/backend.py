"""The MetricX-24 backend (kind `metricx`): google/metricx-24-hybrid-{large,xl,xxl}-v2p6, an mT5
encoder-decoder whose score is one logit, in [0, 25], lower is better.

Faithful to google-research/metricx (Apache-2.0), https://github.com/google-research/metricx:
  metricx24/predict.py get_dataset: the input text, "source: {src} candidate: {mt}" in QE mode
      (--qe) and "source: {src} candidate: {mt} reference: {ref}" in reference mode; tokenised with
      max_length = max_input_length (1536 in the README's commands for MetricX-24, "the models were
      trained with a maximum input length of 1536") and truncation, then the last token (the EOS
      </s>) removed (_remove_eos).
  metricx24/models.py MT5ForRegression.forward: the encoder over the input; the decoder one step from
      token 0; lm_head; the prediction is the logit of id 250089 ("<extra_id_10>") at that position,
      clamped to [0, 25]. (With tied embeddings the decoder output is scaled by d_model^-0.5 first.)
The service returns that prediction as `score`, untransformed. An item with `ref` is scored in reference
mode, one without in QE mode (the hybrid models do both). The tokenizer is mT5's (google/mt5-xl for
every size, as the README's --tokenizer), given by models.<name>.tokenizer.

Only the prediction's column of lm_head is computed (the reference computes all 250112 logits and
keeps one): the same dot products, without a [batch, 250112] tensor.
"""
from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from src.scorer.backends.files import local_model_dir
from src.scorer.backends.interface import BaseRunner, PreparedBatch, StartupError
from src.scorer.config import ModelSpec
from src.scorer.schema import Item, ItemOptions, Measure, ModelInfo

# metricx24/predict.py --max_input_length for MetricX-24 (README), EOS included before its removal
MAX_INPUT_LENGTH = 1536
# metricx24/models.py: `predictions = lm_logits[:, 0, 250089]` (250089 = <extra_id_10>), clamped to [0, 25]
PREDICTION_ID = 250089
SCORE_MIN, SCORE_MAX = 0.0, 25.0
MODEL_CLASS = "MT5ForRegression"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
# Tokens a cut text keeps beyond what the encoder sees (MetricXRunner.measure): slack only
CUT_MARGIN = 8


def model_input(src: str, mt: str, ref: Optional[str]) -> str:
    """metricx24/predict.py get_dataset._make_input: QE mode without a reference, else reference mode."""
    if ref is None:
        return "source: " + src + " candidate: " + mt
    return "source: " + src + " candidate: " + mt + " reference: " + ref


@dataclass(frozen=True)
class MetricXFiles:
    model_dir: Path
    tokenizer: str  # a local directory or a hub name whose files are in the HF cache


# ----------------------------------------------------------------------------------------------
# resolve: stdlib (+ huggingface_hub for hub names), before torch is imported
# ----------------------------------------------------------------------------------------------
def _tokenizer_files(path: Path) -> bool:
    return (path / "tokenizer.json").is_file() or (path / "spiece.model").is_file()


def _check_tokenizer(name: str, spec: ModelSpec, model_dir: Path) -> str:
    if spec.tokenizer is None:
        if not _tokenizer_files(model_dir):
            raise StartupError(f"model {name!r}: {model_dir} holds no tokenizer (spiece.model or "
                               f"tokenizer.json); set models.{name}.tokenizer to a local copy of "
                               f"google/mt5-xl (MetricX-24's tokenizer for every size)")
        return str(model_dir)
    raw = spec.tokenizer
    if os.path.isabs(raw) or raw.startswith((".", "~")) or os.path.exists(os.path.expanduser(raw)):
        path = Path(raw).expanduser()
        if not _tokenizer_files(path):
            raise StartupError(f"model {name!r}: tokenizer directory not found or has no spiece.model "
                               f"or tokenizer.json: {path} (models.{name}.tokenizer)")
        return str(path)
    from huggingface_hub import try_to_load_from_cache

    if not any(isinstance(try_to_load_from_cache(raw, f), str) for f in ("tokenizer.json", "spiece.model")):
        raise StartupError(f"model {name!r}: tokenizer {raw!r} (models.{name}.tokenizer) is not in the "
                           f"local Hugging Face cache; set it to a local directory with spiece.model")
    return raw


def resolve(name: str, spec: ModelSpec) -> MetricXFiles:
    """The checkpoint directory (config.json + weights of an mT5 with MetricX's prediction row) and
    the tokenizer; StartupError (one line) naming what is missing or wrong."""
    model_dir = local_model_dir(name, spec)
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        raise StartupError(f"model {name!r}: checkpoint not found: {config_file} "
                           f"(models.{name}.path: {spec.path}; a MetricX-24 directory with config.json "
                           f"and model.safetensors)")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise StartupError(f"model {name!r}: cannot read {config_file}: {e}") from None
    if not isinstance(config, dict) or config.get("model_type") != "mt5":
        got = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise StartupError(f"model {name!r}: kind 'metricx' expects an mT5 checkpoint (model_type mt5) "
                           f"but {config_file} says {got!r}")
    vocab = config.get("vocab_size")
    if not isinstance(vocab, int) or vocab <= PREDICTION_ID:
        raise StartupError(f"model {name!r}: {config_file} has vocab_size {vocab!r}; MetricX reads its "
                           f"score from row {PREDICTION_ID}, so it needs more rows (mT5: 250112)")
    if not any((model_dir / f).is_file() for f in WEIGHT_FILES):
        raise StartupError(f"model {name!r}: no weights in {model_dir} (looked for "
                           f"{', '.join(WEIGHT_FILES)})")
    return MetricXFiles(model_dir=model_dir, tokenizer=_check_tokenizer(name, spec, model_dir))


# ----------------------------------------------------------------------------------------------
# load
# ----------------------------------------------------------------------------------------------
@functools.cache
def regression_model_class():
    """metricx24/models.py MT5ForRegression: the same modules (so the same checkpoint keys), the
    same forward for inference (one decoder step from token 0, the logit of PREDICTION_ID at it,
    clamped), without the training loss and model-parallel branches."""
    import torch
    from torch import nn
    from transformers.models.mt5.modeling_mt5 import MT5Config, MT5PreTrainedModel, MT5Stack

    class MT5ForRegression(MT5PreTrainedModel):
        # the stacks' embeddings are `shared` itself (as in MT5ForConditionalGeneration)
        _tied_weights_keys = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]

        def __init__(self, config: MT5Config):
            super().__init__(config)
            import copy

            self.model_dim = config.d_model
            self.shared = nn.Embedding(config.vocab_size, config.d_model)
            encoder_config = copy.deepcopy(config)
            encoder_config.is_decoder = False
            encoder_config.use_cache = False
            encoder_config.is_encoder_decoder = False
            self.encoder = MT5Stack(encoder_config, self.shared)
            decoder_config = copy.deepcopy(config)
            decoder_config.is_decoder = True
            decoder_config.is_encoder_decoder = False
            decoder_config.num_layers = config.num_decoder_layers
            self.decoder = MT5Stack(decoder_config, self.shared)
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
            self.post_init()

        def forward(self, input_ids, attention_mask):
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  return_dict=True).last_hidden_state
            start = torch.zeros(input_ids.size(0), 1, dtype=torch.long, device=input_ids.device)
            out = self.decoder(input_ids=start, encoder_hidden_states=hidden,
                               encoder_attention_mask=attention_mask, use_cache=False,
                               return_dict=True).last_hidden_state
            if self.config.tie_word_embeddings:
                out = out * (self.model_dim ** -0.5)
            row = self.lm_head.weight[PREDICTION_ID:PREDICTION_ID + 1]
            logits = nn.functional.linear(out[:, 0], row)[:, 0]
            return torch.clamp(logits, SCORE_MIN, SCORE_MAX)

    return MT5ForRegression


def _t5_backend_from_spiece(tok_dir: Path):
    """The `tokenizers` object transformers' T5Converter builds from spiece.model (what
    AutoTokenizer.from_pretrained("google/mt5-xl") gives in metricx24/predict.py): Unigram over the
    pieces plus the extra ids, the model's normaliser then Strip(right) and "  " -> "▁", Metaspace
    ("always": the slow tokenizer's legacy default), "$A </s>". Built by hand because the
    conversion imports sentencepiece's protobuf module (protobuf >= 5), which unbabel-comet's pin
    excludes; transformers' own proto module reads the same file."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram
    from transformers.utils import sentencepiece_model_pb2_new as pb

    proto = pb.ModelProto()
    proto.ParseFromString((tok_dir / "spiece.model").read_bytes())
    extra_ids = 100  # T5Tokenizer's default
    cfg_file = tok_dir / "tokenizer_config.json"
    if cfg_file.is_file():
        extra_ids = int(json.loads(cfg_file.read_text(encoding="utf-8")).get("extra_ids", extra_ids) or 0)
    vocab = [(p.piece, p.score) for p in proto.pieces]
    vocab += [(f"<extra_id_{i}>", 0.0) for i in range(extra_ids - 1, -1, -1)]
    tk = Tokenizer(Unigram(vocab, unk_id=proto.trainer_spec.unk_id, byte_fallback=False))
    rest = [normalizers.Strip(left=False, right=True), normalizers.Replace(Regex(" {2,}"), "\u2581")]
    charsmap = proto.normalizer_spec.precompiled_charsmap
    tk.normalizer = normalizers.Sequence(([normalizers.Precompiled(charsmap)] if charsmap else []) + rest)
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tk.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    eos = proto.trainer_spec.eos_id
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                      special_tokens=[("</s>", eos)])
    return tk


def load_tokenizer(name: str, where: str):
    """A `tokenizers.Tokenizer` (no truncation, no padding): tokenizer.json when the directory
    has one, else built from spiece.model. Hub names are read from the local cache only."""
    path = Path(where).expanduser()
    if not path.is_dir():
        from huggingface_hub import snapshot_download

        path = Path(snapshot_download(repo_id=where, local_files_only=True))
    from tokenizers import Tokenizer

    try:
        if (path / "tokenizer.json").is_file():
            tk = Tokenizer.from_file(str(path / "tokenizer.json"))
        else:
            tk = _t5_backend_from_spiece(path)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise StartupError(f"model {name!r}: cannot read the tokenizer in {path}: "
                           f"{type(e).__name__}: {first}") from None
    tk.no_truncation()
    tk.no_padding()
    return tk


def load(name: str, spec: ModelSpec, files: MetricXFiles, device: str, dtype: str) -> "MetricXRunner":
    import torch

    # fp16: transformers keeps mT5's `wo` projections in fp32 (MT5PreTrainedModel._keep_in_fp32_modules)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    tokenizer = load_tokenizer(name, files.tokenizer)
    cls = regression_model_class()
    try:
        model, info = cls.from_pretrained(str(files.model_dir), dtype=dtypes[dtype],
                                          local_files_only=True, output_loading_info=True)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        raise StartupError(f"model {name!r}: loading {files.model_dir} failed: {type(e).__name__}: "
                           f"{first}") from None
    missing = [k for k in info.get("missing_keys", []) if not k.endswith("embed_tokens.weight")]
    if missing:
        raise StartupError(f"model {name!r}: {files.model_dir} is not a MetricX checkpoint: "
                           f"{len(missing)} weights missing (e.g. {missing[0]})")
    model.eval()
    model.to(torch.device(device))
    return MetricXRunner(name, spec, model, tokenizer, device)


# ----------------------------------------------------------------------------------------------
# The runner
# ----------------------------------------------------------------------------------------------
class MetricXRunner(BaseRunner):
    """Tokenisation without the transformers wrapper: `tokenizers.Tokenizer.encode_batch` on two
    private copies whose settings are fixed at load (one without truncation to measure, one cutting
    at MAX_INPUT_LENGTH to prepare), so any thread may use them at once."""

    accepts_ref = True

    def __init__(self, name: str, spec: ModelSpec, model, tokenizer, device: str = "cpu") -> None:
        import torch
        from tokenizers import Tokenizer

        self.name, self.spec, self.model = name, spec, model
        self.device = torch.device(device)
        self._measure_tok = tokenizer
        self._prepare_tok = Tokenizer.from_str(tokenizer.to_str())
        # what predict.py's tokenizer(..., max_length=1536, truncation=True) does: the text's first
        # 1535 tokens, then </s>
        self._prepare_tok.enable_truncation(MAX_INPUT_LENGTH)
        self.pad_id = int(model.config.pad_token_id or 0)
        self.seg_limit = MAX_INPUT_LENGTH - 1  # tokens the encoder sees once </s> is removed

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(name=self.name, kind=self.spec.kind, model_class=MODEL_CLASS, needs_ref=False,
                         accepts_ref=True, word_level=False, has_mqm=False, max_tokens=self.seg_limit)

    def measure(self, items: Sequence[Item], off_loop: bool = False) -> List[Measure]:
        """Cost: the tokens of the input text without </s>, at most 1535. A longer text is cut at the
        first space after its first 1535 + CUT_MARGIN tokens (what the encoder sees is unchanged:
        the pre-tokenizer splits at spaces and the normaliser maps characters one by one), so a
        1 MB text is not tokenised again when the batch is prepared."""
        texts = [model_input(it.src, it.mt, it.ref) for it in items]
        out = []
        for text, enc in zip(texts, self._measure_tok.encode_batch(texts) if texts else []):
            n = len(enc.ids)  # with </s>
            cuts: Dict[str, int] = {}
            k = self.seg_limit + CUT_MARGIN
            if n > k + 2:
                p = text.find(" ", enc.offsets[k][1])
                if p > 0:
                    cuts["input"] = p
            out.append(Measure(cost=min(n, MAX_INPUT_LENGTH) - 1, truncated=n > MAX_INPUT_LENGTH, cuts=cuts))
        return out

    def prepare(self, items: Sequence[Item], options: Sequence[ItemOptions],
                measures: Sequence[Measure]) -> PreparedBatch:
        """predict.py's tokenisation, </s> removed, padded to the batch's longest (pad id 0, mask 0)."""
        import torch

        texts = [model_input(it.src, it.mt, it.ref)[:ms.cuts.get("input")] for it, ms in zip(items, measures)]
        rows = [enc.ids[:-1] for enc in self._prepare_tok.encode_batch(texts)]
        width = max(1, max(len(r) for r in rows))
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, :len(r)] = 1
        return PreparedBatch(items, options, measures, {"input_ids": ids, "attention_mask": mask})

    def forward(self, prepared: PreparedBatch):
        import torch

        batch = {k: v.to(self.device, non_blocking=True) for k, v in prepared.cpu_batch.items()}
        with torch.inference_mode():
            return self.model(batch["input_ids"], batch["attention_mask"]).float().cpu()

    def decode(self, prepared: PreparedBatch, scores) -> List[Dict]:
        out = []
        for score, ms in zip(scores.tolist(), prepared.measures):
            out.append({"score": score if math.isfinite(score) else None, "truncated": ms.truncated})
        return out

    def warm_up(self) -> None:
        items = [Item(src="Warm-up sentence.", mt="Warm-up sentence."),
                 Item(src="Warm-up sentence.", mt="Warm-up sentence.", ref="Warm-up sentence.")]
        for it in items:
            self.run([it], [ItemOptions()], self.measure([it]))

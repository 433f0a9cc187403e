"""Tiny random-weight COMET checkpoints built offline (scorer env only: needs unbabel-comet 2.2.7).

    python -m src.tiny_models qe [OUT] [--with-small]      (with .venv-scorer/bin/python)

OUT defaults to .cache/tiny-comet/<hash of this file>/, so every caller (scorer tests, reward
tests in the train env through .venv-scorer/bin/python, CI reruns) shares one build, and editing
this file invalidates it. experiment=smoke_tiny builds into <model.build_dir>/qe instead. The last
stdout line is the absolute OUT path.

Layout under OUT:
    spm/corpus.txt, spm/spm.model          SentencePiece unigram model trained on a local corpus
    encoders/xlmr/, encoders/xlmr-xl/      XLM-R and XLM-R-XL shaped encoders (hidden 32, 2 layers)
    models/<name>/hparams.yaml, models/<name>/checkpoints/model.ckpt for
        comet-da       regression_metric               src+mt+ref   (wmt22-comet-da shape)
        referenceless  referenceless_regression_metric src+mt
        cometkiwi      unified_metric [mt, src]        src+mt       (wmt22/23-cometkiwi shape)
        unified-wl     unified_metric + word level     src+mt(+ref), tags O/minor/major
        xcomet         xcomet_metric on XLM-R-XL       src+mt(+ref), tags O/minor/major/critical
    models/metricx/, tokenizers/mt5/       a MetricX-24 shaped mT5 (HF directory) and its tokenizer:
                                           src/tiny_models/metricx.py
    models/xcomet-small/ (--with-small)   xcomet on a hidden-256 x 4-layer XL encoder that lives
                                          inside the model dir (encoder/), for benchmarks
    tiny_build.json                        written last: the tree is complete for this builder

Every build happens in a sibling temp dir that is renamed into place as the last step (atomic.py),
so a killed build never leaves a tree that looks complete. Checkpoints carry the FINAL absolute
encoder path as `pretrained_model`, so comet.load_from_checkpoint never touches the hub.
"""
from __future__ import annotations

import hashlib
import os
import random
import sys
from pathlib import Path

from . import metricx
from .atomic import atomic_build, ensure

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SEED = 1234
REPO_ROOT = Path(__file__).resolve().parents[2]
BASE_MODELS = ("comet-da", "referenceless", "cometkiwi", "unified-wl", "xcomet")
SMALL_MODEL = "xcomet-small"
# the tiny encoders' shape (build_encoder_dir defaults): what a config's scorer.models.*.encoder_shape
# says for these checkpoints (conf/scorer/tiny.yaml)
ENCODER_SHAPE = {"layers": 2, "hidden": 32, "ffn": 64, "heads": 2}


def builder_hash() -> str:
    """Of this file and metricx.py: editing either builder invalidates the tree."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(Path(__file__).with_name("metricx.py").read_bytes())
    return h.hexdigest()[:16]


def default_out() -> Path:
    return REPO_ROOT / ".cache" / "tiny-comet" / builder_hash()


# ----------------------------------------------------------------------------------------------
# Corpus and tokenizer
# ----------------------------------------------------------------------------------------------
EN = ("the cat dog house school child fire teacher city river market book water tree "
      "small big old new red green quickly slowly could be was were opened closed stopped "
      "they we you he she it is are has have will would should in on at with from to of "
      "and but or because translation quality model sentence word error minor major critical "
      "evaluation metric reference source system good bad very not").split()
DE = ("der die das Katze Hund Haus Schule Kind Feuer Lehrer Stadt Fluss Markt Buch Wasser "
      "Baum klein groß alt neu rot grün schnell langsam konnte wurde waren geöffnet geschlossen "
      "gestoppt sie wir ihr er es ist sind hat haben wird würde sollte in auf mit von zu und "
      "aber oder weil Übersetzung Qualität Satz Wort Fehler Kindergärten Einhalt geboten").split()
ZH = list("猫狗房子学校孩子火老师城市河市场书水树小大旧新红绿快慢可以被是的了在和但或因为翻译质量模型"
          "句子词错误严重轻微参考源系统好坏很不我们你他她它有会应该打开关闭停止")
JA = list("猫犬家学校子供火先生都市川市場本水木小大古新赤緑速遅できたされたですますのはがをにでとしかし"
          "翻訳品質文単語誤り重大軽微参照原文良悪とてもない")


def _sentence(rng: random.Random, words, sep: str, lo: int = 4, hi: int = 14) -> str:
    return sep.join(rng.choice(words) for _ in range(rng.randint(lo, hi)))


def make_corpus(path: Path, n_per_lang: int = 120) -> None:
    rng = random.Random(SEED)
    lines = []
    for _ in range(n_per_lang):
        lines.append(_sentence(rng, EN, " ").capitalize() + ".")
        lines.append(_sentence(rng, DE, " ") + ".")
        lines.append(_sentence(rng, ZH, "", 6, 24) + "。")
        lines.append(_sentence(rng, JA, "", 6, 24) + "。")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def train_spm(corpus: Path, prefix: Path) -> Path:
    import sentencepiece as spm

    # XLM-R's id layout (unk=0, bos=1, eos=2, no pad); the HF tokenizer adds the fairseq offset.
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=1000, model_type="unigram",
        character_coverage=1.0,  # keep every CJK character
        hard_vocab_limit=False,  # the corpus is too small for exactly 1000 pieces
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, normalization_rule_name="nmt_nfkc",
        num_threads=1, minloglevel=2,
    )
    return prefix.with_suffix(".model")


def xlmr_fast_backend(spm_model: Path):
    """The `tokenizers` backend transformers' XLMRobertaConverter would build.

    Built by hand because sentencepiece 0.2.3's generated proto module needs protobuf>=5 while
    unbabel-comet pins protobuf<5, so the slow->fast conversion fails; transformers ships its
    own protobuf-4 compatible proto module, which reads the same model file.
    """
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram
    from transformers.utils import sentencepiece_model_pb2_new as pb

    proto = pb.ModelProto()
    proto.ParseFromString(spm_model.read_bytes())
    pieces = [(p.piece, p.score) for p in proto.pieces]
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += pieces[3:]  # spm's own <unk>,<s>,</s> are replaced by the fairseq specials above
    vocab += [("<mask>", 0.0)]
    tk = Tokenizer(Unigram(vocab, unk_id=3, byte_fallback=False))
    tk.normalizer = normalizers.Sequence([
        normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap),
        normalizers.Strip(left=False, right=True),
        normalizers.Replace(Regex(" {2,}"), "\u2581"),
    ])
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tk.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tk.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)],
    )
    return tk


def build_encoder_dir(spm_model: Path, out_dir: Path, xl: bool,
                      hidden: int = 32, layers: int = 2, heads: int = 2) -> Path:
    import torch
    from transformers import (XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizerFast,
                              XLMRobertaXLConfig, XLMRobertaXLModel)

    out_dir.mkdir(parents=True, exist_ok=True)
    tok = XLMRobertaTokenizerFast(vocab_file=str(spm_model),
                                  tokenizer_object=xlmr_fast_backend(spm_model),
                                  model_max_length=512)
    tok.save_pretrained(str(out_dir))
    cfg_cls, model_cls = (XLMRobertaXLConfig, XLMRobertaXLModel) if xl else (
        XLMRobertaConfig, XLMRobertaModel)
    cfg = cfg_cls(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers,
                  num_attention_heads=heads, intermediate_size=hidden * 2,
                  max_position_embeddings=514,  # COMET's max_positions = 512, like the real ones
                  type_vocab_size=1, pad_token_id=tok.pad_token_id,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(SEED)
    model_cls(cfg, add_pooling_layer=False).save_pretrained(str(out_dir))
    return out_dir


# ----------------------------------------------------------------------------------------------
# COMET checkpoints
# ----------------------------------------------------------------------------------------------
COMMON = dict(nr_frozen_epochs=0.0, keep_embeddings_frozen=True, dropout=0.1, batch_size=4,
              load_pretrained_weights=False, local_files_only=True)


def save_checkpoint(model, model_dir: Path, final_encoder: Path) -> Path:
    import pytorch_lightning as pl
    import torch
    import yaml

    (model_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    hparams = dict(model.hparams)
    # Runtime switches that load_from_checkpoint passes itself.
    hparams.pop("load_pretrained_weights", None)
    hparams.pop("local_files_only", None)
    # The model was built from the temp tree; after the rename the encoder lives here.
    hparams["pretrained_model"] = str(final_encoder)
    ckpt = {"state_dict": model.state_dict(), "hyper_parameters": hparams,
            "pytorch-lightning_version": pl.__version__, "epoch": 0, "global_step": 0}
    path = model_dir / "checkpoints" / "model.ckpt"
    torch.save(ckpt, path)
    (model_dir / "hparams.yaml").write_text(yaml.safe_dump(hparams, sort_keys=False))
    return path


def _model_specs(enc: Path, enc_xl: Path) -> dict:
    from comet.models import ReferencelessRegression, RegressionMetric, UnifiedMetric, XCOMETMetric

    head = dict(hidden_sizes=[64, 32], activations="Tanh", final_activation=None)
    return {
        "comet-da": (RegressionMetric, enc, dict(
            encoder_model="XLM-RoBERTa", pool="avg", layer="mix",
            layer_transformation="softmax", layer_norm=False, **head)),
        "referenceless": (ReferencelessRegression, enc, dict(
            encoder_model="XLM-RoBERTa", pool="avg", layer="mix",
            layer_transformation="softmax", layer_norm=False, **head)),
        "cometkiwi": (UnifiedMetric, enc, dict(
            encoder_model="XLM-RoBERTa", sent_layer="mix", layer_transformation="sparsemax",
            layer_norm=True, word_layer=2, input_segments=["mt", "src"],
            word_level_training=False, **head)),
        "unified-wl": (UnifiedMetric, enc, dict(
            encoder_model="XLM-RoBERTa", sent_layer="mix", layer_transformation="softmax",
            layer_norm=True, word_layer=2, input_segments=["mt", "src", "ref"],
            word_level_training=True, error_labels=["minor", "major"], loss_lambda=0.65, **head)),
        "xcomet": (XCOMETMetric, enc_xl, dict(
            encoder_model="XLM-RoBERTa-XL", sent_layer="mix", layer_transformation="softmax",
            layer_norm=False, word_layer=2, error_labels=["minor", "major", "critical"], **head)),
    }


def build_base(tmp: Path, final: Path) -> None:
    import torch

    (tmp / "spm").mkdir(parents=True)
    make_corpus(tmp / "spm" / "corpus.txt")
    spm_model = train_spm(tmp / "spm" / "corpus.txt", tmp / "spm" / "spm")
    build_encoder_dir(spm_model, tmp / "encoders" / "xlmr", xl=False)
    build_encoder_dir(spm_model, tmp / "encoders" / "xlmr-xl", xl=True)
    torch.manual_seed(SEED)
    for name, (cls, enc, kw) in _model_specs(tmp / "encoders" / "xlmr",
                                              tmp / "encoders" / "xlmr-xl").items():
        model = cls(**COMMON, pretrained_model=str(enc), **kw)
        if name in ("xcomet", "unified-wl"):
            # Random tag heads mostly say "O"; lean towards errors so decoded spans are not empty.
            with torch.no_grad():
                bias = [0.0, 0.6, 0.3, 0.1][: model.hidden2tag.bias.numel()]
                model.hidden2tag.bias.copy_(torch.tensor(bias))
        final_enc = final / enc.relative_to(tmp)
        save_checkpoint(model, tmp / "models" / name, final_enc)
    metricx.build(tmp, tmp / "spm" / "corpus.txt")


def build_small(tmp: Path, final: Path, spm_model: Path) -> None:
    """XCOMET (2.5M parameters) on a small XL-shaped encoder: enough compute per sample that batching
    matters in the benchmark, still fast on a laptop CPU."""
    import torch
    from comet.models import XCOMETMetric

    enc = build_encoder_dir(spm_model, tmp / "encoder", xl=True, hidden=256, layers=4, heads=4)
    torch.manual_seed(SEED)
    model = XCOMETMetric(**COMMON, encoder_model="XLM-RoBERTa-XL", pretrained_model=str(enc),
                         sent_layer="mix", layer_transformation="softmax", layer_norm=False,
                         word_layer=4, hidden_sizes=[256, 128])
    save_checkpoint(model, tmp, final / "encoder")


def ensure_built(out: Path | None = None, with_small: bool = False) -> Path:
    """Returns the absolute tree path, building whatever part is missing."""
    return ensure_built_status(out, with_small)[0]


def ensure_built_status(out: Path | None = None, with_small: bool = False) -> tuple[Path, str]:
    """(absolute tree path, 'built' | 'reused'), building whatever part is missing."""
    out = (out or default_out()).resolve()
    status = ensure(out, {"builder": "qe", "hash": builder_hash()}, lambda tmp: build_base(tmp, out))
    if with_small:
        spm_model = out / "spm" / "spm.model"
        final = out / "models" / SMALL_MODEL
        atomic_build(final, lambda tmp: build_small(tmp, final, spm_model))
    return out, status


def checkpoint(out: Path, name: str) -> Path:
    return out / "models" / name / "checkpoints" / "model.ckpt"


def main(argv: list[str]) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    args = [a for a in argv if not a.startswith("--")]
    unknown = [a for a in argv if a.startswith("--") and a != "--with-small"]
    if unknown or len(args) > 1:
        print("error: usage: python -m src.tiny_models qe [OUT] [--with-small] (scorer env)", file=sys.stderr)
        return 2
    out, status = ensure_built_status(Path(args[0]) if args else None, with_small="--with-small" in argv)
    names = list(BASE_MODELS) + ([SMALL_MODEL] if "--with-small" in argv else [])
    for name in names:
        ck = checkpoint(out, name)
        print(f"{name:14s} {ck}  ({ck.stat().st_size / 1e6:.2f} MB)")
    mx = out / metricx.MODEL_DIR
    print(f"{'metricx':14s} {mx}  ({sum(f.stat().st_size for f in mx.iterdir()) / 1e6:.2f} MB; "
          f"tokenizer {out / metricx.TOKENIZER_DIR})")
    print(f"tiny QE checkpoints {status}")
    print(out)
    return 0

"""A tiny random-weight MetricX-24 checkpoint, built offline (scorer env: transformers with MT5).

Built by src/tiny_models/qe.py into the same tree as the tiny COMET checkpoints (`python -m
src.tiny_models qe`), so tests and experiment=smoke_tiny share one build:

    models/metricx/     config.json (architectures: MT5ForRegression, as google/metricx-24-hybrid-*-v2p6)
                        + model.safetensors: an mT5 encoder-decoder, d_model 16, 2 + 2 layers
    tokenizers/mt5/     spiece.model + tokenizer_config.json + special_tokens_map.json: what google/mt5-xl
                        ships (no tokenizer.json), on a SentencePiece model trained on the local corpus

Why the vocabulary has 250112 rows: MetricX reads its score from the logit of token 250089
("<extra_id_10>" of mT5's tokenizer) at the first decoder position (metricx24/models.py,
MT5ForRegression.forward), a fixed id; mT5's embedding has 250112 rows. At d_model 16 the two
untied 250112-row matrices (shared embedding, lm_head) are 32 MB in fp32, the bulk of the file.

Why row 250089 of lm_head is set, not random: a random row gives logits around 0 and MetricX clips
them to [0, 25], so most scores would be exactly 0 and a test comparing scores would compare
zeros. The row is set so the scores of the corpus's sentences spread around 6 inside (0, 25), with a
standard deviation of 1.5: small numbers, so fp32 rounding (batched against one by one) stays far
below the tests' 1e-5.
"""
from __future__ import annotations

import json
from pathlib import Path

SEED = 1234
# mT5's vocabulary rows (google/mt5-xl config.json vocab_size) and MetricX's prediction id
MT5_VOCAB_ROWS = 250112
PREDICTION_ID = 250089
# the tiny model's shape; ENCODER_SHAPE in conf terms (conf/scorer model entries' encoder_shape)
D_MODEL, D_KV, D_FF, LAYERS, HEADS = 16, 8, 32, 2, 2
ENCODER_SHAPE = {"layers": LAYERS, "hidden": D_MODEL, "ffn": D_FF, "heads": HEADS}
MODEL_DIR = Path("models") / "metricx"
TOKENIZER_DIR = Path("tokenizers") / "mt5"


def train_t5_spm(corpus: Path, prefix: Path) -> Path:
    """A SentencePiece unigram model with mT5's special ids (pad 0, eos 1, unk 2, no bos)."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=1000, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
        normalization_rule_name="nmt_nfkc", num_threads=1, minloglevel=2)
    return prefix.with_suffix(".model")


def build_tokenizer(spm_model: Path, out_dir: Path) -> Path:
    """The slow T5Tokenizer's files (sentencepiece only; the fast one's conversion needs protobuf>=5,
    which unbabel-comet's pin excludes), 100 extra ids as mT5's."""
    from transformers import T5Tokenizer

    tok = T5Tokenizer(vocab_file=str(spm_model), extra_ids=100, legacy=True, model_max_length=1536)
    tok.save_pretrained(str(out_dir))
    return out_dir


def _set_prediction_row(model, tokenizer, texts: list[str]) -> None:
    """lm_head row PREDICTION_ID := a row whose logits on `texts` have mean 6 and std 1.5."""
    import torch

    enc = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask,
                    decoder_input_ids=torch.zeros(len(texts), 1, dtype=torch.long), output_hidden_states=True)
        h = out.decoder_hidden_states[-1][:, 0].float()  # after the decoder's final layer norm
        mean = h.mean(0)
        spread = h - mean
        gen = torch.Generator().manual_seed(SEED)
        w = torch.randn(h.shape[1], generator=gen)
        w = w - (w @ mean) / (mean @ mean) * mean  # orthogonal to the mean: it only spreads
        w = w * (1.5 / (spread @ w).std().clamp_min(1e-6))
        row = w + 6.0 * mean / (mean @ mean)
        model.lm_head.weight[PREDICTION_ID] = row.to(model.lm_head.weight.dtype)


def build(tmp: Path, corpus: Path) -> None:
    """models/metricx and tokenizers/mt5 under `tmp` (the tree qe.py builds), from `corpus`'s lines."""
    import torch
    from transformers import MT5Config, MT5ForConditionalGeneration

    spm_dir = tmp / "spm-mt5"
    spm_dir.mkdir(parents=True)
    tok_dir = build_tokenizer(train_t5_spm(corpus, spm_dir / "spm"), tmp / TOKENIZER_DIR)
    from transformers import T5Tokenizer

    tokenizer = T5Tokenizer.from_pretrained(str(tok_dir), legacy=True)
    cfg = MT5Config(vocab_size=MT5_VOCAB_ROWS, d_model=D_MODEL, d_kv=D_KV, d_ff=D_FF, num_layers=LAYERS,
                    num_decoder_layers=LAYERS, num_heads=HEADS, feed_forward_proj="gated-gelu",
                    tie_word_embeddings=False, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
                    eos_token_id=1)
    torch.manual_seed(SEED)
    # MT5ForRegression (metricx24/models.py) has exactly these modules (shared, encoder, decoder,
    # lm_head), so MT5ForConditionalGeneration's weights are its weights
    model = MT5ForConditionalGeneration(cfg).eval()
    lines = corpus.read_text(encoding="utf-8").splitlines()
    texts = [f"source: {lines[i]} candidate: {lines[i + 1]}" for i in range(0, 64, 2)]
    _set_prediction_row(model, tokenizer, texts)
    out = tmp / MODEL_DIR
    model.save_pretrained(str(out))
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config["architectures"] = ["MT5ForRegression"]  # what the real MetricX-24 checkpoints say
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")

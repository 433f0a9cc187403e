"""Issue 51 (finding 12): `prepare` with the tiny tokenizer (what the CPU hint points to: 576 byte-level
tokens) printed length stats and applied --max-prompt-tokens as if they were what training sees, and
nothing said they are not. Now the report says so in one line (and stats.json keeps it), for the tiny
tokenizer and for a tokenizer directory without a model; a model's own directory gets no such line."""
from __future__ import annotations

import json

import pytest

from src.data.prepare import main
from src.data.tokens import TEST_VOCAB, load_tokenizer


def _prepare(pairs, tokenizer, out, capsys) -> tuple[list[str], dict]:
    argv = ["--input", str(pairs), "--split", "train", "--template", "base", "--max-prompt-tokens", "200",
            "--tokenizer", str(tokenizer), "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    return notes, json.loads(out.with_suffix(".stats.json").read_text(encoding="utf-8"))


def test_the_tiny_tokenizers_lengths_are_said_not_to_be_the_policys(pairs_jsonl, tiny_tokenizer_dir, tmp_path, capsys):
    tok = load_tokenizer(tiny_tokenizer_dir)
    assert len(tok) == 576 < TEST_VOCAB  # the vocabulary the issue measured
    notes, stats = _prepare(pairs_jsonl, tiny_tokenizer_dir, tmp_path / "train.parquet", capsys)
    assert len(notes) == 1, notes
    assert notes[0].startswith("note: the token lengths and the --max-prompt-tokens filter are counted with the tiny "
                               f"test tokenizer in {tiny_tokenizer_dir} ({len(tok)} tokens")
    assert "prepare with --tokenizer <that model's dir>" in notes[0]
    assert stats["tokenizer_note"] == notes[0].removeprefix("note: ")


@pytest.fixture(scope="module")
def real_sized(tmp_path_factory):
    """A tokenizer with a real vocabulary size (the tiny one padded with reserved tokens), without a model."""
    from src.tiny_models.tokenizer import build_tiny_tokenizer

    return build_tiny_tokenizer(tmp_path_factory.mktemp("real_sized"), vocab_size=TEST_VOCAB + 64)


def test_a_tokenizer_without_a_model_is_named_and_a_models_own_is_not(pairs_jsonl, real_sized, tmp_path, capsys):
    notes, stats = _prepare(pairs_jsonl, real_sized, tmp_path / "a.parquet", capsys)
    assert notes == [f"note: the token lengths and the --max-prompt-tokens filter are counted with {real_sized}, a "
                     f"tokenizer without a model (no config.json there), not necessarily the policy's; verl counts a "
                     f"run's prompts with its model's own tokenizer (model.path): prepare with --tokenizer <that "
                     f"model's dir> for lengths and a filter that match training"]
    # the same tokenizer in a model's directory (its config.json beside it): the lengths are the model's
    (real_sized / "config.json").write_text(json.dumps({"model_type": "qwen2"}), encoding="utf-8")
    try:
        notes, stats = _prepare(pairs_jsonl, real_sized, tmp_path / "b.parquet", capsys)
    finally:
        (real_sized / "config.json").unlink()
    assert notes == [] and stats["tokenizer_note"] is None

"""The prepared parquet through verl's own RLHFDataset (the class the trainer builds from
data.train_files / data.val_files), with the tiny Qwen-style tokenizer."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from src.data.prepare import main


@pytest.fixture(scope="module")
def rl_dataset_cls():
    from verl.utils.dataset.rl_dataset import RLHFDataset

    return RLHFDataset


def _dataset(cls, path, tokenizer, tmp_path, max_prompt_length):
    config = OmegaConf.create(
        {
            "max_prompt_length": max_prompt_length,
            "filter_overlong_prompts": True,
            "filter_overlong_prompts_workers": 1,
            "cache_dir": str(tmp_path / "verl_cache"),
        }
    )
    return cls(data_files=str(path), tokenizer=tokenizer, config=config)


@pytest.mark.parametrize("template", ["base", "chat", "rl"])
def test_rlhf_dataset_loads_rows_and_keeps_them_intact(
    tmp_path, tokenizer, tiny_tokenizer_dir, pairs_jsonl, rl_dataset_cls, template
):
    out = tmp_path / f"{template}.parquet"
    assert main(["--input", str(pairs_jsonl), "--directions", "both", "--split", "val", "--template", template,
                 "--tokenizer", str(tiny_tokenizer_dir), "--out", str(out)]) == 0
    ds = _dataset(rl_dataset_cls, out, tokenizer, tmp_path, max_prompt_length=4096)
    assert len(ds) == 8
    item = ds[1]
    assert item["data_source"] == "pairs/en-zh"
    assert item["reward_model"]["ground_truth"] == "这只猫坐在垫子上。"
    assert item["extra_info"]["src"] == "The cat sat on the mat."
    assert item["extra_info"]["split"] == "val"
    assert item["index"] == 1  # verl reads the row index from extra_info["index"]
    roles = [m["role"] for m in item["raw_prompt"]]
    assert roles == (["system", "user"] if template == "chat" else ["user"])
    assert "English text into Chinese:\nThe cat sat on the mat." in item["raw_prompt"][-1]["content"]


def test_prompt_token_limit_matches_verls_own_count(tmp_path, tokenizer, tiny_tokenizer_dir, pairs_jsonl,
                                                     rl_dataset_cls):
    """A row that passes --max-prompt-tokens N survives verl's data.max_prompt_length=N filter, and the
    longest kept prompt is exactly at verl's limit (verl drops it at N-1): both count the same tokens."""
    out = tmp_path / "train.parquet"
    assert main(["--input", str(pairs_jsonl), "--split", "train", "--template", "chat", "--tokenizer",
                 str(tiny_tokenizer_dir), "--out", str(out)]) == 0
    longest = json.loads(out.with_suffix(".stats.json").read_text())["directions"]["zh-en"]["tokens"]["prompt"]["max"]

    limited = tmp_path / "limited.parquet"
    assert main(["--input", str(pairs_jsonl), "--split", "train", "--template", "chat", "--tokenizer",
                 str(tiny_tokenizer_dir), "--max-prompt-tokens", str(longest - 1), "--out", str(limited)]) == 0
    n_limited = len(_dataset(rl_dataset_cls, limited, tokenizer, tmp_path, max_prompt_length=4096))
    assert n_limited == 3  # the long pair is gone

    assert len(_dataset(rl_dataset_cls, out, tokenizer, tmp_path, max_prompt_length=longest)) == 4
    assert len(_dataset(rl_dataset_cls, out, tokenizer, tmp_path, max_prompt_length=longest - 1)) == n_limited

"""The data group's parquet, prepared by src.data.prepare at the paths the data group names,
loads through verl's own RLHFDataset configured by the `data` section of the verl config the
launcher builds (prompt length, overlong filter, chat template switch)."""
import json

import pytest
from omegaconf import open_dict

from src import verl_config
from src.data.prepare import main as prepare
from src.config import compose_config
from src.plan import build_plan
from tests.fixtures.tiny_tokenizer import build_tiny_tokenizer

PAIRS = [{"src": "这只猫坐在垫子上。", "tgt": "The cat sat on the mat.", "lang_pair": "zh-en"},
         {"src": "今天天气很好。", "tgt": "The weather is nice today.", "lang_pair": "zh-en"}]


@pytest.mark.parametrize("use_chat_template", [False, True])
def test_rlhf_dataset_reads_the_data_group(tmp_path, use_chat_template):
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tok_dir = build_tiny_tokenizer(tmp_path / "tok")
    cfg = compose_config([f"paths.data_root={tmp_path}/data", f"paths.results_root={tmp_path}/res",
                          f"model.use_chat_template={str(use_chat_template).lower()}"])
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in PAIRS), encoding="utf-8")
    train_file = cfg["data"]["train_files"]
    assert train_file == f"{tmp_path}/data/wmt_zh_en/train.parquet"
    assert prepare(["--input", str(pairs), "--directions", "both", "--split", "train", "--name", "wmt_zh_en",
                    "--template", cfg["data"]["template"], "--tokenizer", str(tok_dir), "--out", train_file]) == 0

    verl_cfg = verl_config.build(build_plan(cfg, run_dir=str(tmp_path / "run")), cfg)
    assert verl_cfg.data.train_files == train_file
    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir), local_files_only=True)
    data_cfg = verl_cfg.data.copy()
    with open_dict(data_cfg):
        data_cfg.cache_dir = str(tmp_path / "cache")  # verl's default is under ~/.cache
    ds = RLHFDataset(data_files=verl_cfg.data.train_files, tokenizer=tokenizer, config=data_cfg)
    assert len(ds) == 4
    row = ds[0]
    assert row["data_source"].startswith("wmt_zh_en/")
    assert row["extra_info"]["split"] == "train"
    text = tokenizer.apply_chat_template(row["raw_prompt"], add_generation_prompt=True, tokenize=False,
                                         **verl_cfg.data.apply_chat_template_kwargs)
    # chat template off: the R1-Zero plain-text prompt goes to the model as is
    assert ("<|im_start|>" in text) == use_chat_template
    assert row["raw_prompt"][-1]["content"] in text

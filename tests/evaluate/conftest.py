"""Fixtures for the evaluation tests (train env: .venv/bin/python -m pytest tests/evaluate).

The QE scoring service is the train-env tests' live tiny service (real unbabel-comet code on tiny
random-weight checkpoints, tests/conftest.py `scorer_service`), shared rather than rebuilt; its model
names are the ones conf/scorer gives the real checkpoints (comet_da, cometkiwi_da, xcomet_xl), so
evaluation's defaults talk to it unchanged. Test sets are written with src.data.rows.make_row, the
same function src.data.prepare writes rows with.
"""
from __future__ import annotations

import json

import pytest

from src.data.parquet_io import write_parquet_atomic
from src.data.rows import Example, make_row
from tests.helpers.scorer_service import TOKEN

# (src, ref, src_lang, tgt_lang, template, response): well-formed, broken but with a <translate>
# part, no tag at all, empty answer; both directions and both response formats
CASES = [
    ("这只猫坐在垫子上。", "The cat sat on the mat.", "zh", "en", "chat",
     "<think>simple</think><translate>The cat sat on the mat.</translate>"),
    ("今天天气很好。", "The weather is nice today.", "zh", "en", "chat",
     "<think>weather</think><translate>Today the weather is very good.</translate>"),
    ("机器翻译是自然语言处理的重要任务。", "Machine translation is an important NLP task.", "zh", "en", "rl",
     "Sure! <translate>Machine translation is a key task of NLP.</translate>"),
    ("我们去公园散步吧。", "Let's take a walk in the park.", "zh", "en", "chat", "Let us walk in the park."),
    ("The cat sat on the mat.", "这只猫坐在垫子上。", "en", "zh", "chat",
     "<think>cat</think><translate>猫坐在垫子上。</translate>"),
    ("The weather is nice today.", "今天天气很好。", "en", "zh", "rl", "<translate>今天的天气很好。</translate>"),
    ("We use reinforcement learning.", "我们使用强化学习。", "en", "zh", "rl", "<translate></translate>"),
]


@pytest.fixture
def testset(tmp_path):
    """(parquet path, responses jsonl path) for CASES, index = row number."""
    rows = [make_row(Example(src, ref, sl, tl), dataset_name="tiny", template=tpl, split="test", index=i)
            for i, (src, ref, sl, tl, tpl, _) in enumerate(CASES)]
    data = tmp_path / "data" / "test.parquet"
    write_parquet_atomic(rows, data)
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"index": i, "response": c[-1]}, ensure_ascii=False) + "\n"
                                 for i, c in enumerate(CASES)), encoding="utf-8")
    return data, responses


@pytest.fixture
def scorer_token_env(scorer_service, monkeypatch):
    monkeypatch.setenv("QE_SCORER_TOKEN", TOKEN)
    return scorer_service


def same_spans(got: list[dict], want: list[dict]) -> bool:
    """The same error spans: text, offsets and severity exactly, confidence to 1e-6 (fp32 values
    move in the 8th digit with the batch an item is scored in; the service batches by load)."""
    def key(spans):
        return [(s["text"], s["start"], s["end"], s["severity"]) for s in spans]
    return key(got) == key(want) and all(abs(a["confidence"] - b["confidence"]) <= 1e-6 for a, b in zip(got, want))

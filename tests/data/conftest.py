from __future__ import annotations

import json

import pytest


# zh-en pairs with one exact duplicate, one empty source, one whitespace-only target and one long
# source (for the length filter).
PAIRS = [
    {"src": "这只猫坐在垫子上。", "tgt": "The cat sat on the mat.", "lang_pair": "zh-en"},
    {"src": "今天天气很好。", "tgt": "The weather is nice today.", "src_lang": "zh", "tgt_lang": "en"},
    {"src": "这只猫坐在垫子上。", "tgt": "The cat sat on the mat.", "lang_pair": "zh-en"},
    {"src": "", "tgt": "Empty source.", "lang_pair": "zh-en"},
    {"src": "机器翻译。", "tgt": "   ", "lang_pair": "zh-en"},
    # Characters the tiny tokenizer never saw: byte-level, ~3 tokens each, far over any limit used.
    {"src": "龘靐齉" * 20, "tgt": "Zqxj vwk " * 20, "lang_pair": "zh-en"},
    {"src": "机器翻译是自然语言处理的重要任务。", "tgt": "Machine translation is an important NLP task.",
     "lang_pair": "zh-en"},
]


@pytest.fixture
def pairs_jsonl(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in PAIRS), encoding="utf-8")
    return path

"""One zh->en translation example and the numbers its reward is checked against, computed apart from
the reward code: sacrebleu's BLEU, and the QE service asked directly for the same item."""
from __future__ import annotations

import json

import pytest
import sacrebleu

SRC = "这只猫坐在垫子上。"
REF = "The cat sat on the mat."
MT = "The cat is sitting on the mat."
RESPONSE = f"<think>猫 is cat; 垫子 is mat.</think>\n<translate>{MT}</translate>"
DATA_SOURCE = "wmt_zh_en/zh-en"


def bleu(mt=MT, ref=REF) -> float:
    return sacrebleu.sentence_bleu(mt, [ref], tokenize="13a", use_effective_order=True).score


def clip01(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def kiwi_of(svc, mt=MT, src=SRC) -> float:
    return svc.results("cometkiwi_da", [{"src": src, "mt": mt}])[0]["score"]


def xcomet_of(svc, mt=MT, src=SRC, ref=None) -> dict:
    item = {"src": src, "mt": mt, "lang": "en", **({"ref": ref} if ref else {})}
    return svc.results("xcomet_xl", [item], ["score", "spans", "word_tags"])[0]


def ok_share(result: dict) -> float:
    tags = [w["tag"] for w in result["word_tags"] if w["tag"] in ("OK", "BAD")]
    return sum(t == "OK" for t in tags) / len(tags)


EVERY_KEY = {"score", "score_rounded", "format_ok", "format_error", "answer", "bleu", "comet", "kiwi", "xcomet",
             "mqm", "n_minor", "n_major", "n_critical", "ok_ratio", "degenerate_empty", "degenerate_source_copy",
             "degenerate_wrong_script", "degenerate_length_ratio", "src", "translation", "error_spans"}


def check_common(out: dict, info: dict) -> dict:
    """What every row's reward holds for RESPONSE; returns its reward_extra_info."""
    extra = out["reward_extra_info"]
    assert EVERY_KEY <= set(extra)
    assert out["reward_score"] == pytest.approx(extra["score"])
    assert extra["score_rounded"] == round(extra["score"], 2)
    assert (extra["format_ok"], extra["src"], extra["translation"]) == (1.0, info["src"], MT)
    assert extra["bleu"] == pytest.approx(bleu())
    assert isinstance(extra["error_spans"], str) and isinstance(json.loads(extra["error_spans"]), list)
    return extra

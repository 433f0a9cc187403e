"""Every shipped reward group gives the same result dict as the reward code before the component
registry (issue 25): the fixture tests/fixtures/reward_golden.json was written by that code (commit
396bdce) for a fixed set of responses, against the tiny QE service (deterministic random weights).

A change that moves a number of any group on any of these responses fails here; a change meant to
move one regenerates the fixture on purpose:
    QE_RL_WRITE_REWARD_GOLDEN=1 .venv/bin/python -m pytest tests/rewards/test_reward_golden.py
and the diff of the fixture shows what moved.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from tests.helpers.reward_config import extra_info, kwargs_for

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "reward_golden.json"
SRC = "这只猫坐在垫子上，看着窗外的鸟。"
REF = "The cat sat on the mat, watching the birds outside the window."

# (name, response, reference, extra_info overrides)
RESPONSES = [
    ("good", f"<think>猫 = cat</think>\n<translate>The cat sits on the mat and watches the birds outside.</translate>", REF, {}),
    ("close", "<think>x</think><translate>The cat sat on the mat, watching the birds outside the window.</translate>", REF, {}),
    ("poor", "<think>?</think><translate>A dog runs in the park.</translate>", REF, {}),
    ("format_broken", "The cat sits on the mat.", REF, {}),
    ("tags_twice", "<think>a</think><translate>x</translate><translate>y</translate>", REF, {}),
    ("empty", "<think>a</think><translate>  </translate>", REF, {}),
    ("source_copy", f"<think>a</think><translate>{SRC}</translate>", REF, {}),
    ("wrong_script", "<think>a</think><translate>猫坐在垫子上看鸟。</translate>", REF, {}),
    ("too_long", "<think>a</think><translate>" + "the cat " * 60 + "</translate>", REF, {}),
    ("no_reference", "<think>a</think><translate>The cat sits on the mat.</translate>", "", {}),
    ("val_good", "<think>猫</think><translate>The cat sits on the mat and watches the birds.</translate>", REF,
     {"split": "val"}),
    ("val_copy", f"<think>a</think><translate>{SRC}</translate>", REF, {"split": "val"}),
    ("translate_only", "<translate>The cat sits on the mat.</translate>", REF, {"template": "rl"}),
]

# (name, reward group, overrides): every shipped group and the options that change the arithmetic
GROUPS = [
    ("comet", "comet", ()),
    ("comet_train", "comet", ("reward.mode=train",)),
    ("comet_da", "comet", ("reward.sentence_models=[comet_da]", "reward.weights.kiwi=0", "reward.weights.comet=1")),
    ("comet_discrete", "comet", ("reward.discrete.enable=true",)),
    ("xcomet_xl", "xcomet_xl", ()),
    ("xcomet_xl_mqm", "xcomet_xl", ("reward.weights.xcomet=0", "reward.weights.mqm=1")),
    ("xcomet_xl_ref", "xcomet_xl", ("reward.span.reference=true",)),
    # mode=eval: the span model is scored at validation only, so the training weights are named (before
    # issue 33 they fell back to the validation weights silently; these are the same numbers)
    ("xcomet_xl_eval", "xcomet_xl", ("reward.mode=eval", "reward.weights.bleu=1", "reward.weights.kiwi=1")),
    ("word_qe", "word_qe", ()),
    ("word_qe_probs", "word_qe", ("reward.span.word_tag_source=probs", "reward.weights.kiwi=0.5")),
    ("xcomet_xl_token", "xcomet_xl", ("reward.credit=token",)),
]


def _plain(value):
    if isinstance(value, float):
        return None if not math.isfinite(value) else round(value, 9)
    return value


def _results(loop) -> dict:
    from src.rewards.compute import compute_score

    out = {}
    for group, reward, overrides in GROUPS:
        kw = kwargs_for(reward, *overrides)
        for name, response, reference, info_over in RESPONSES:
            info = extra_info(SRC, **info_over)
            res = loop.run_until_complete(compute_score("wmt_zh_en/zh-en", response, reference, info, **kw))
            out[f"{group}/{name}"] = {k: _plain(v) for k, v in sorted(res.items())}
    return out


# The tiny QE models' numbers depend on the CPU: oneDNN and torch pick other kernels (AVX2, AVX-512, AMX)
# that sum in another order, so an fp32 score or span confidence moves in its 7th-8th significant digit
# from one x86 machine to another (0.480833643249103 vs 0.48083363686289105 seen). 1e-6 is far above
# that and far below any change of the reward arithmetic, whose smallest step here is 1e-3.
FLOAT_TOLERANCE = 1e-6


def _differences(path: str, want, got) -> list[str]:
    """Where `got` differs from `want`: floats beyond FLOAT_TOLERANCE, anything else at all. A string
    holding JSON (error_spans is serialised for verl's metrics) is compared as the JSON it holds."""
    if isinstance(want, str) and isinstance(got, str) and want != got and want[:1] in "[{" and got[:1] in "[{":
        try:
            want, got = json.loads(want), json.loads(got)
        except ValueError:
            return [f"{path}: {want!r} -> {got!r}"]
    if isinstance(want, float) and isinstance(got, (float, int)) and not isinstance(got, bool):
        return [] if abs(want - got) <= FLOAT_TOLERANCE else [f"{path}: {want} -> {got}"]
    if isinstance(want, dict) and isinstance(got, dict):
        diffs = [f"{path}: new keys {sorted(set(got) - set(want))}"] if set(got) - set(want) else []
        for key, value in want.items():
            diffs += _differences(f"{path}.{key}", value, got.get(key, "<missing>"))
        return diffs
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (w, g) in enumerate(zip(want, got)) for d in _differences(f"{path}[{i}]", w, g)]
    return [] if want == got else [f"{path}: {want!r} -> {got!r}"]


def test_every_group_scores_as_before_the_registry(loop, scorer_env):
    got = _results(loop)
    if os.environ.get("QE_RL_WRITE_REWARD_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert sorted(got) == sorted(want)
    diffs = [d for case, res in want.items() for d in _differences(case, res, got[case])]
    assert diffs == []


def test_the_comparison_allows_cpu_rounding_and_nothing_more():
    """The golden comparison itself: the spans' confidence as another CPU computes it passes; a moved
    span, a changed severity or a confidence moved by more than rounding fails."""
    span = {"start": 0, "end": 28, "severity": "minor", "text": "The cat", "confidence": 0.480833643249103}
    want = {"score": 0.25, "error_spans": json.dumps([span])}
    assert _differences("c", want, {"score": 0.25 + 3e-8, "error_spans": json.dumps(
        [{**span, "confidence": 0.48083363686289105}])}) == []
    for moved in ({"end": 29}, {"severity": "major"}, {"confidence": 0.4809}):
        got = {"score": 0.25, "error_spans": json.dumps([{**span, **moved}])}
        assert len(_differences("c", want, got)) == 1, moved
    assert _differences("c", want, {"score": 0.2501, "error_spans": want["error_spans"]}) == ["c.score: 0.25 -> 0.2501"]
    assert _differences("c", want, {**want, "extra": 1.0}) == ["c: new keys ['extra']"]
    assert _differences("c", want, {"score": 0.25, "error_spans": "[]"}) != []


def test_the_golden_set_is_not_trivial():
    """The fixture covers every path of compute_score: a broken format, each degenerate flag,
    validation rows, and real QE numbers that differ between responses."""
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert len(want) == len(GROUPS) * len(RESPONSES)
    scores = {round(r["score"], 6) for r in want.values()}
    assert len(scores) >= 15
    assert any(r["format_ok"] == 0.0 for r in want.values())
    for flag in ("degenerate_empty", "degenerate_source_copy", "degenerate_wrong_script", "degenerate_length_ratio"):
        assert any(r.get(flag) == 1.0 for r in want.values()), flag
    assert any(r.get("xcomet") is not None for r in want.values())
    assert any(r.get("ok_ratio") is not None for r in want.values())
    assert any(r.get("comet") is not None for r in want.values())

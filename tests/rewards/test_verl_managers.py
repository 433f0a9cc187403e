"""The reward function run by verl 0.9.1's own reward managers (`naive`, `dapo`), loaded from the
verl config the launcher builds for each reward group, against the live tiny QE service.

Each component is checked against an independent computation: sacrebleu for BLEU, the service
itself (asked directly) for CometKiwi / XCOMET / MQM / spans / word tags, and the configured
weights for the total.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.reward_config import extra_info
from tests.helpers.reward_example import (DATA_SOURCE, RESPONSE, SRC, bleu, check_common, clip01, kiwi_of, ok_share,
                                          xcomet_of)
from tests.helpers.verl_reward_harness import manager, run, sample


def test_comet_group_naive_training_row(tokenizer, scorer_env):
    mgr = manager(tokenizer, "reward=comet", "algo=grpo")
    assert type(mgr).__name__ == "NaiveRewardManager"
    before = scorer_env.items_by_model().get("xcomet_xl", 0)
    info = extra_info(SRC)
    extra = check_common(run(mgr, sample(tokenizer, RESPONSE, info)), info)
    kiwi = kiwi_of(scorer_env)
    assert extra["kiwi"] == pytest.approx(kiwi, abs=1e-4)
    # MT-R1-Zero "Merge": format 1 + BLEU/100 + CometKiwi
    assert extra["score"] == pytest.approx(1.0 + bleu() / 100 + clip01(kiwi), abs=1e-4)
    assert extra["xcomet"] is None and extra["mqm"] is None and extra["comet"] is None
    # mode=off: the span model is never asked
    assert scorer_env.items_by_model().get("xcomet_xl", 0) == before


def test_xcomet_group_dapo_training_row(tokenizer, scorer_env):
    mgr = manager(tokenizer, "reward=xcomet_xl", "algo=dapo")
    from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager

    assert isinstance(mgr, DAPORewardManager)  # verl's (subclassed: src/rewards/managers.py)
    info = extra_info(SRC)
    out = run(mgr, sample(tokenizer, RESPONSE, info))
    extra = check_common(out, info)
    expected = xcomet_of(scorer_env)  # QE mode: no reference
    assert extra["xcomet"] == pytest.approx(expected["score"], abs=1e-4)
    assert extra["mqm"] == pytest.approx(expected["mqm"], abs=1e-4)
    severities = [s["severity"] for s in expected["spans"]]
    assert [extra[f"n_{s}"] for s in ("minor", "major", "critical")] == [
        float(severities.count(s)) for s in ("minor", "major", "critical")]
    assert [(s["start"], s["end"], s["severity"]) for s in json.loads(extra["error_spans"])] == [
        (s["start"], s["end"], s["severity"]) for s in expected["spans"]]
    assert extra["kiwi"] is None  # not in this group's training reward
    assert extra["score"] == pytest.approx(1.0 + clip01(expected["score"]), abs=1e-4)
    # dapo manager: overlong buffer applied (nothing to cut here) and the filter key present
    assert extra["overlong_reward"] == 0 and out["reward_score"] == pytest.approx(extra["score"])


def test_word_qe_group_naive_training_row(tokenizer, scorer_env):
    mgr = manager(tokenizer, "reward=word_qe", "algo=grpo")
    info = extra_info(SRC)
    extra = check_common(run(mgr, sample(tokenizer, RESPONSE, info)), info)
    expected = xcomet_of(scorer_env)
    assert extra["ok_ratio"] == pytest.approx(ok_share(expected))
    assert extra["score"] == pytest.approx(1.0 + ok_share(expected), abs=1e-6)


@pytest.mark.parametrize("reward,algo,span_logged", [("comet", "dapo", False), ("xcomet_xl", "grpo", True),
                                                     ("word_qe", "dapo", True)])
def test_validation_rows_get_the_validation_reward(tokenizer, scorer_env, reward, algo, span_logged):
    mgr = manager(tokenizer, f"reward={reward}", f"algo={algo}")
    info = extra_info(SRC, split="val")
    extra = check_common(run(mgr, sample(tokenizer, RESPONSE, info)), info)
    kiwi = kiwi_of(scorer_env)
    # every group: format + CometKiwi + BLEU, each logged on its own
    assert extra["kiwi"] == pytest.approx(kiwi, abs=1e-4)
    assert extra["score"] == pytest.approx(1.0 + bleu() / 100 + clip01(kiwi), abs=1e-4)
    if span_logged:  # mode=train logs the span model at validation too
        expected = xcomet_of(scorer_env)
        assert extra["xcomet"] == pytest.approx(expected["score"], abs=1e-4)
        assert extra["ok_ratio"] == pytest.approx(ok_share(expected))
    else:
        assert extra["xcomet"] is None and extra["ok_ratio"] is None


def test_test_split_counts_as_validation(tokenizer, scorer_env):
    mgr = manager(tokenizer, "reward=xcomet_xl", "algo=grpo")
    extra = run(mgr, sample(tokenizer, RESPONSE, extra_info(SRC, split="test")))["reward_extra_info"]
    assert extra["score"] == pytest.approx(1.0 + bleu() / 100 + clip01(kiwi_of(scorer_env)), abs=1e-4)


def test_a_batch_through_the_manager_and_verl_validation_metrics(tokenizer, scorer_env):
    """Many trajectories at once on one loop (the shared client under concurrency), then verl's own
    validation metric code on the stacked results: strings skipped, None skipped, numbers averaged."""
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    from src.rewards.client import close_clients

    mgr = manager(tokenizer, "reward=xcomet_xl", "algo=grpo")
    responses = [RESPONSE, "no tags at all", "<think>x</think><translate></translate>",
                 f"<think>y</think><translate>{SRC}</translate>", "<think>z</think><translate>A cat on a mat.</translate>"]
    infos = [extra_info(SRC, split="val", index=i) for i in range(len(responses))]

    async def all_of():
        import asyncio

        return await asyncio.gather(*(mgr.run_single(sample(tokenizer, r, i)) for r, i in zip(responses, infos)))

    outs = mgr.loop.run_until_complete(all_of())
    mgr.loop.run_until_complete(close_clients())
    extras = [o["reward_extra_info"] for o in outs]
    assert all(set(e) == set(extras[0]) for e in extras)  # verl stacks key by key
    assert [e["format_ok"] for e in extras] == [1.0, 0.0, 1.0, 1.0, 1.0]
    assert [e["degenerate_empty"] for e in extras] == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert extras[3]["degenerate_source_copy"] == 1.0 and extras[3]["kiwi"] is not None  # measured at validation
    assert extras[3]["score"] == 1.0 + (-1.0)  # but scored with the penalty

    infos_dict = {k: [e[k] for e in extras] for k in extras[0]}
    metrics = process_validation_metrics([DATA_SOURCE] * len(extras), [f"u{i}" for i in range(len(extras))],
                                         infos_dict)
    per_var = metrics[DATA_SOURCE]
    assert per_var["kiwi"]["mean@1"] == pytest.approx(np.mean([e["kiwi"] for e in extras if e["kiwi"] is not None]))
    assert per_var["format_ok"]["mean@1"] == pytest.approx(0.8)
    assert "error_spans" not in per_var and "translation" not in per_var

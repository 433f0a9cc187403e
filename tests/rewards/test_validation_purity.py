"""Validation scores are the reward function's score under both algos: verl 0.9.1's dapo manager
adds the overlong penalty to every row (verl/experimental/reward_loop/reward_manager/dapo.py,
DAPORewardManager.run_single); the manager the launcher configures for algo=dapo keeps it for
training rows only. Driven through verl's own load_reward_manager + run_single on mgr.loop, with
the real reward function against the live tiny QE service.
"""
from __future__ import annotations

import pytest

from tests.helpers.reward_config import extra_info
from tests.helpers.reward_example import MT, SRC
from tests.helpers.verl_reward_harness import manager, run, sample

# max_response_length 300 with the 256-token buffer: anything past 44 response tokens is "overlong"
SHORT_BUDGET = ("data.max_response_length=300",)
LONG_RESPONSE = "<think>" + " ".join(["the cat and the mat"] * 40) + f"</think>\n<translate>{MT}</translate>"


def _long_enough(tokenizer) -> None:
    n = len(tokenizer(LONG_RESPONSE, add_special_tokens=False)["input_ids"])
    assert n > 300 - 256 + 20, f"the long response has only {n} tokens: it would not be penalised"


@pytest.mark.parametrize("algo", ["grpo", "dapo"])
def test_validation_score_has_no_overlong_penalty(tokenizer, scorer_env, algo):
    _long_enough(tokenizer)
    mgr = manager(tokenizer, "reward=comet", f"algo={algo}", *SHORT_BUDGET)
    out = run(mgr, sample(tokenizer, LONG_RESPONSE, extra_info(SRC, split="val")))
    extra = out["reward_extra_info"]
    assert extra["format_ok"] == 1.0
    assert out["reward_score"] == extra["score"]
    if algo == "dapo":
        assert (extra["overlong_reward"], extra["overlong"]) == (0.0, False)


def test_dapo_training_rows_keep_verls_overlong_penalty(tokenizer, scorer_env):
    from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager

    _long_enough(tokenizer)
    mgr = manager(tokenizer, "reward=comet", "algo=dapo", *SHORT_BUDGET)
    assert isinstance(mgr, DAPORewardManager)
    data = sample(tokenizer, LONG_RESPONSE, extra_info(SRC, split="train"))
    out = run(mgr, data)
    extra = out["reward_extra_info"]
    # verl's own formula (DAPORewardManager.run_single), on the same row
    valid = int(data[0].batch["attention_mask"][-data[0].batch["responses"].shape[-1]:].sum())
    cfg = mgr.overlong_buffer_cfg
    expected = min(-(valid - (mgr.max_resp_len - cfg.len)) / cfg.len * cfg.penalty_factor, 0)
    assert expected < 0
    assert extra["overlong_reward"] == pytest.approx(expected)
    assert out["reward_score"] == pytest.approx(extra["score"] + expected)


def test_validation_scores_agree_across_algos(tokenizer, scorer_env):
    """The same validation row scores the same under grpo and dapo: their val curves compare."""
    info = extra_info(SRC, split="test")
    scores = [run(manager(tokenizer, "reward=comet", f"algo={a}", *SHORT_BUDGET),
                  sample(tokenizer, LONG_RESPONSE, info))["reward_score"] for a in ("grpo", "dapo")]
    assert scores[0] == pytest.approx(scores[1], abs=1e-6)

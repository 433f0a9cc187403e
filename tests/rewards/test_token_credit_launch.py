"""reward.credit through the plan into verl's config, validated by verl (validate_config, its worker
config classes and batch splitting: tests/launcher/test_verl_oracle.py verl_accepts), for every
GPU count and both algorithms; sequence credit leaves verl's config byte-identical."""
from __future__ import annotations

import copy
import itertools

import pytest

from src import verl_config
from src.config import compose_config
from src.plan import PlanError, build_plan
from tests.helpers.launches import launch
from tests.helpers.verl_oracle import verl_accepts

COMBOS = list(itertools.product(["grpo", "dapo"], ["2", "3", "4", "8"]))


def build(tmp_path, *overrides: str, drop_credit_keys: bool = False):
    cfg = compose_config([*overrides, f"paths.results_root={tmp_path}/results"])
    if drop_credit_keys:  # the config as it was before reward.credit existed
        cfg = copy.deepcopy(cfg)
        del cfg["reward"]["credit"], cfg["reward"]["token_credit"]
    plan = build_plan(cfg, run_dir=str(tmp_path / "run"))
    return cfg, plan, verl_config.build(plan, cfg)


@pytest.mark.parametrize("algo,gpus", COMBOS, ids=[f"{a}-gpus{g}" for a, g in COMBOS])
def test_token_credit_dry_run_is_accepted_by_verl(tmp_path, algo, gpus):
    cfg, plan, v = build(tmp_path, "reward=xcomet_xl", "reward.credit=token", f"algo={algo}", f"gpus={gpus}")
    assert verl_accepts(v)["padding"] == 0
    assert v.algorithm.adv_estimator == "grpo_token"
    agent = v.actor_rollout_ref.rollout.agent
    assert agent.agent_loop_manager_class == "src.rewards.credit.agent_loop.TokenCreditAgentLoopManager"
    assert agent.default_agent_loop == "token_credit_agent"
    tc = v.reward.custom_reward_function.reward_kwargs.token_credit
    # xcomet_xl: answer = 1.0 x XCOMET clipped to [0, 1], so a critical error costs 1.0
    assert (tc.scale, tc.weight, tc.source) == (1.0, 1.0, "spans")
    assert dict(tc.severity_weights) == {"minor": 1.0, "major": 5.0, "critical": 10.0, "bad": 5.0}
    # the memory and batch plans do not change with the credit
    _, seq_plan, seq_v = build(tmp_path, "reward=xcomet_xl", f"algo={algo}", f"gpus={gpus}")
    assert (plan.batch, plan.memory) == (seq_plan.batch, seq_plan.memory)
    if algo == "dapo":  # DAPO's dynamic sampling still filters on the reward's rounded score
        assert v.algorithm.filter_groups.enable and v.algorithm.filter_groups.metric == "score_rounded"
        assert v.actor_rollout_ref.actor.loss_agg_mode == "token-mean"


@pytest.mark.parametrize("reward", ["comet", "xcomet_xl", "word_qe"])
def test_sequence_credit_leaves_the_verl_config_byte_identical(tmp_path, reward):
    _, _, with_key = build(tmp_path, f"reward={reward}")
    _, _, without = build(tmp_path, f"reward={reward}", drop_credit_keys=True)
    assert verl_config.to_yaml(with_key) == verl_config.to_yaml(without)


def test_word_qe_with_probability_tags_penalises_bad_words(tmp_path):
    _, plan, v = build(tmp_path, "reward=word_qe", "reward.credit=token", "reward.span.word_tag_source=probs")
    assert plan.token_credit.source == "words"
    assert v.reward.custom_reward_function.reward_kwargs.token_credit.source == "words"


@pytest.mark.parametrize("overrides,needle", [
    (["reward=comet", "reward.credit=token"], "needs the span model's error spans in the training reward"),
    (["reward=xcomet_xl", "reward.credit=tokens"], "reward.credit must be sequence or token, got 'tokens'"),
    (["reward=xcomet_xl", "reward.credit=token", "reward.token_credit.weight=-1"], "reward.token_credit.weight"),
    (["reward=xcomet_xl", "reward.credit=token", "reward.token_credit.severity_weights.minor=-1"],
     "severity_weights.minor"),
    (["reward=xcomet_xl", "reward.credit=token", "+verl.trainer.use_v1=false"], "needs verl's V1 trainer"),
])
def test_what_cannot_work_is_refused_in_one_line(tmp_path, overrides, needle):
    with pytest.raises(PlanError, match=needle) as exc:
        build(tmp_path, *overrides)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("override,needle", [
    ("+verl.algorithm.adv_estimator=grpo", "needs algorithm.adv_estimator=grpo_token, got 'grpo'"),
    ("+verl.actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent", "default_agent_loop"),
])
def test_verl_overrides_that_undo_the_credit_are_refused(tmp_path, override, needle):
    from src.rewards.credit.ranges import CreditConfigError

    with pytest.raises(CreditConfigError, match=needle) as exc:
        build(tmp_path, "reward=xcomet_xl", "reward.credit=token", override)
    assert "\n" not in str(exc.value)


def test_cli_dry_run_shows_the_credit_and_refuses_in_one_line(tmp_path):
    paths = [f"paths.output_dir={tmp_path}/outputs", f"paths.results_root={tmp_path}/results",
             f"paths.data_root={tmp_path}/data", f"paths.model_root={tmp_path}/models"]
    ok = launch(["reward=xcomet_xl", "reward.credit=token", "algo=dapo", "gpus=4", "dry_run=true", *paths])
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "token: grpo_token, weight 1" in ok.stdout and "critical -1" in ok.stdout
    bad_root = tmp_path / "refused"
    bad = launch(["reward=comet", "reward.credit=token", "dry_run=true",
                  *(p.replace(str(tmp_path), str(bad_root)) for p in paths)])
    assert bad.returncode == 2
    assert "reward.credit=token needs the span model" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    assert not any(p.is_file() for p in bad_root.rglob("*"))  # refused before anything is written


def test_training_entry_registers_the_estimator_only_for_token_credit(tmp_path, monkeypatch):
    import numpy as np
    import torch
    from verl.trainer.ppo import core_algos

    from src.rewards.credit import estimator

    monkeypatch.delitem(core_algos.ADV_ESTIMATOR_REGISTRY, "grpo_token", raising=False)
    monkeypatch.setattr(estimator, "_SETTINGS", {})
    _, _, seq = build(tmp_path, "reward=xcomet_xl")
    estimator.register_for(seq)  # what src/trainer/entry.py runs in the TaskRunner's process
    assert "grpo_token" not in core_algos.ADV_ESTIMATOR_REGISTRY
    with pytest.raises(RuntimeError, match="before src.rewards.credit.estimator.configure"):
        estimator.compute_grpo_token_advantage(torch.zeros(2, 3), torch.ones(2, 3), np.array(["a", "a"]))
    _, _, tok = build(tmp_path, "reward=xcomet_xl", "reward.credit=token", "reward.token_credit.weight=0.25")
    monkeypatch.delitem(core_algos.ADV_ESTIMATOR_REGISTRY, "grpo_token", raising=False)
    estimator.register_for(tok)
    assert core_algos.get_adv_estimator_fn("grpo_token") is estimator.compute_grpo_token_advantage
    assert estimator._settings() == (0.25, 1.0)

"""verl's own code as the oracle for the batch sizes the plan derives (not src/plan/verl_rules.py): the
oracle's tests. The oracle, tests/helpers/verl_oracle.py `verl_accepts(verl_cfg)`, runs on a generated verl
config what verl 0.9.1 runs on it before and inside its workers, calling verl's functions wherever they
exist (that module's docstring lists them)."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from src import verl_config
from src.plan import build_plan
from tests.helpers.verl_oracle import verl_accepts


def plan_and_build(compose, tmp_path, overrides):
    cfg = compose([*overrides, f"paths.results_root={tmp_path}/results"])
    plan = build_plan(cfg, run_dir=str(tmp_path / "run"))
    return cfg, plan, verl_config.build(plan, cfg)


@pytest.mark.parametrize("gpus", ["2", "3", "4", "8"])
def test_default_plan_passes_verl_with_no_padding(compose, tmp_path, gpus):
    _, plan, verl_cfg = plan_and_build(compose, tmp_path, [f"gpus={gpus}"])
    sizes = verl_accepts(verl_cfg)
    b = plan.batch
    assert sizes["padding"] == 0
    assert sizes["mini_batches"] == [b.mini_batch_prompts * b.samples_per_prompt // int(gpus)] * (b.prompts_per_step // b.mini_batch_prompts)
    assert set(sizes["micro_batches"]) == {b.micro_batch_per_gpu} and set(sizes["log_prob_micro_batches"]) == {b.log_prob_micro_batch_per_gpu}


def test_plan_moves_intent_to_values_verl_accepts(compose, tmp_path):
    # 5 GPUs and a mini batch of 12 prompts x 4 samples (48 % 5 != 0): the plan must move it
    _, plan, verl_cfg = plan_and_build(compose, tmp_path, [
        "gpus=5", "batch.prompts_per_step=50", "batch.mini_batch_prompts=12",
        "batch.samples_per_prompt=4"])
    assert verl_accepts(verl_cfg)["padding"] == 0


# The oracle can fail: each case is a config verl refuses, and the message is that of the verl
# code that refuses it.
MICRO = "data size must be divisible by force_group_size"  # engine/utils.py prepare_micro_batches
@pytest.mark.parametrize("gpus, key, value, match", [
    ("3", "actor_rollout_ref.actor.ppo_mini_batch_size", 7, "mini_batch_size=56 % data_parallel_size=3"),
    ("4", "actor_rollout_ref.actor.ppo_mini_batch_size", 7, MICRO),  # 56/4 = 14 rows, micro 8
    ("4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 5, MICRO),
    ("4", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", 7, MICRO),
    ("4", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", 5, MICRO),
    ("4", "actor_rollout_ref.actor.ppo_mini_batch_size", 96, r"train_batch_size \(48\) must be >="),
    ("4", "actor_rollout_ref.rollout.tensor_model_parallel_size", 3, "rollout world_size 4 % infer_world_size 3"),
])
def test_oracle_refuses_what_verl_refuses(compose, tmp_path, gpus, key, value, match):
    _, _, verl_cfg = plan_and_build(compose, tmp_path, [f"gpus={gpus}"])
    verl_accepts(verl_cfg)
    OmegaConf.update(verl_cfg, key, value)
    with pytest.raises((AssertionError, ValueError), match=match):
        verl_accepts(verl_cfg)

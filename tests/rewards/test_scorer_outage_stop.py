"""What stops the trainer instead of letting it train on less or spin (src/trainer/guard.py,
src/plan/stop_rules.py), and how the reason reaches the user (src/node/training.py).

The verl config is the launcher's, validated by verl; the sampler class is loaded from it the way
verl's trainer loads it (verl/trainer/ppo/v1/trainer_base.py _build_replay_buffer:
load_extern_type on trainer.v1.sampler.custom_sampler and the same keyword arguments).
"""
from __future__ import annotations

import sys

import pytest

from src.node import training
from src.plan import PlanError
from src.plan.stop_rules import stop_rules
from tests.helpers.verl_reward_harness import verl_config_for


def _buffer(*overrides: str):
    from verl.utils.import_utils import load_extern_type

    cfg = verl_config_for("reward=comet", *overrides)
    sampler = cfg.trainer.v1.sampler
    cls = load_extern_type(sampler.custom_sampler.path, sampler.custom_sampler.name)
    refills: list[int] = []
    buf = cls(trainer_mode=cfg.trainer.v1.trainer_mode, trainer_config=cfg.trainer.v1.get("sync", {}),
              max_off_policy_threshold=sampler.max_off_policy_threshold,
              max_off_policy_strategy=sampler.max_off_policy_strategy, sampler_kwargs=sampler.sampler_kwargs,
              refill_fn=lambda n: refills.append(n) or n)
    return cfg, buf, refills


def test_grpo_buffer_is_verls_sync_buffer_without_filter():
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    cfg, buf, _ = _buffer("algo=grpo")
    assert isinstance(buf, ReplayBuffer)
    assert buf.filter_groups_metric is None and buf.gen_batch_size == cfg.data.train_batch_size
    assert buf.guard.lost_groups_allowed == 0 and buf.guard.max_gen_batches == 0


def test_dapo_buffer_filters_on_the_rounded_score_and_is_bounded(monkeypatch, tmp_path):
    from src.trainer import stop_reason
    from src.trainer.guard import TrainingGuardStop  # imports verl: only where used
    stop_file = tmp_path / "training_stop.txt"
    monkeypatch.setenv("QE_TRAINING_STOP_FILE", str(stop_file))
    cfg, buf, refills = _buffer("algo=dapo")
    assert buf.filter_groups_metric == "score_rounded" == cfg.algorithm.filter_groups.metric
    assert buf.gen_batch_size == 1 and buf.guard.max_gen_batches == 10
    P = cfg.data.train_batch_size
    buf.guard.begin("train", 7)
    buf.guard.classified({f"u{i}" for i in range(P)}, {f"u{i}" for i in range(P)})
    for _ in range(9):  # batches 2..10: within the bound, dispatched to verl's refill
        buf.refill_fn(P)
    assert refills == [P] * 9 and buf.guard.gen_batches == 10
    with pytest.raises(TrainingGuardStop) as err:
        buf.refill_fn(1)
    msg = str(err.value)
    assert "\n" not in msg and len(refills) == 9
    assert msg.startswith("DAPO stopped at step 7: 10 generation batches drawn")
    assert "100% of 48 finished groups were filtered" in msg and "'score_rounded'" in msg
    assert "algo.filter_groups.max_num_gen_batches=10" in msg
    # no process died: the FSDP workers that verl's unwinding ends after it are not the cause (src/node/deaths.py)
    assert stop_reason.read(stop_file) == msg and stop_reason.rules_out_a_death(stop_file)


def test_lost_group_stops_at_once_by_default_and_names_the_scorer(monkeypatch, tmp_path):
    from src.trainer import stop_reason
    from src.trainer.guard import StepGuard, TrainingGuardStop  # imports verl: only where used
    monkeypatch.setenv("QE_SCORER_URL", "http://127.0.0.1:4711")
    monkeypatch.setenv("QE_SCORER_LOG", "/runs/x/scorer/node-0.log")
    stop_file = tmp_path / "training_stop.txt"
    monkeypatch.setenv("QE_TRAINING_STOP_FILE", str(stop_file))
    guard = StepGuard(lost_groups_allowed=0, max_gen_batches=0, filter_metric=None, train_batch_size=48)
    guard.begin("train", 3)
    guard.failed(set())
    assert guard.metrics()["training_guard/lost_groups"] == 0
    with pytest.raises(TrainingGuardStop) as err:
        guard.failed({"uid-a"})
    msg = str(err.value)
    assert msg.startswith("training stopped at step 3: 1 training group(s) lost")
    assert "http://127.0.0.1:4711" in msg and "/runs/x/scorer/node-0.log" in msg
    assert stop_file.read_text().strip() == msg
    assert not stop_reason.rules_out_a_death(stop_file)   # a dead vLLM engine makes lost groups: the watch judges


def test_a_budget_counts_lost_groups_per_step_and_per_run():
    from src.trainer.guard import StepGuard  # imports verl: only where used
    reasons: list[str] = []
    guard = StepGuard(lost_groups_allowed=2, max_gen_batches=0, filter_metric=None, train_batch_size=48,
                      on_stop=reasons.append)
    guard.begin("train", 1)
    guard.failed({"a"})
    guard.failed({"a"})  # the same group seen at the next poll is not lost twice
    assert guard.metrics()["training_guard/lost_groups"] == 1 and not reasons
    guard.begin("train", 2)
    guard.failed({"b"})
    assert guard.metrics()["training_guard/lost_groups"] == 1
    assert guard.metrics()["training_guard/lost_groups_total"] == 2 and not reasons
    guard.failed({"c"})
    assert len(reasons) == 1 and "3 in this run, scorer.lost_groups_allowed=2" in reasons[0]


@pytest.mark.parametrize("key,value,expected", [
    ("scorer.lost_groups_allowed", -1, "scorer.lost_groups_allowed must be an integer >= 0, got -1"),
    ("max_num_gen_batches", 0, "algo.filter_groups.max_num_gen_batches must be a positive integer, got 0"),
])
def test_bad_stop_rules_are_one_line(key, value, expected):
    cfg = {"scorer": {"lost_groups_allowed": 0},
           "algo": {"filter_groups": {"enable": True, "metric": "score_rounded", "max_num_gen_batches": 10}}}
    if key.startswith("scorer."):
        cfg["scorer"]["lost_groups_allowed"] = value
    else:
        cfg["algo"]["filter_groups"]["max_num_gen_batches"] = value
    with pytest.raises(PlanError, match=expected):
        stop_rules(cfg)


def test_runner_turns_the_trainers_stop_file_into_one_line(tmp_path):
    # a training command that stops itself the way src/trainer/guard.py does
    code = ("import os,sys; open(os.environ['QE_TRAINING_STOP_FILE'],'w').write('training stopped at step 4: x\\n');"
            "print('Traceback (most recent call last): ...'); sys.exit(1)")
    log = tmp_path / "train.log"
    (tmp_path / "training_stop.txt").write_text("stale reason of the previous attempt\n")
    with pytest.raises(training.ServiceFailure, match=r"^training stopped at step 4: x$"):
        training.run([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin"}, log_path=log)
    # exit 0 or a failure without the file: no stale reason from an earlier attempt
    assert training.run([sys.executable, "-c", "import sys; sys.exit(3)"], env={"PATH": "/usr/bin:/bin"},
                      log_path=log) == 3


def test_dapo_filter_key_excludes_the_overlong_penalty(tokenizer, scorer_env):  # noqa: F811
    """Decision: DAPO's group filter reads `score_rounded`, the reward function's score without the
    overlong penalty that verl's dapo manager adds afterwards (verl/experimental/reward_loop/
    reward_manager/dapo.py DAPORewardManager.run_single: reward = score + overlong_reward, extra info
    from the function as it returned it). As in the DAPO recipe (which filters on `acc`), the filter
    asks whether a group differs in translation quality; length alone is shaped by the penalty, and
    a group of equally good answers of different lengths must not keep an easy prompt in the batch."""
    from tests.helpers.reward_example import MT, REF, SRC
    from tests.helpers.verl_reward_harness import manager, run, sample
    from tests.helpers.reward_config import extra_info

    mgr = manager(tokenizer, "reward=comet", "algo=dapo")
    cfg = verl_config_for("reward=comet", "algo=dapo")
    buffer_len = cfg.reward.reward_kwargs.overlong_buffer_cfg.len
    expected_len = cfg.reward.reward_kwargs.max_resp_len - buffer_len
    filler = ""
    while len(tokenizer(filler, add_special_tokens=False)["input_ids"]) < expected_len + buffer_len // 2:
        filler += "猫 is cat. "
    out = run(mgr, sample(tokenizer, f"<think>{filler}</think>\n<translate>{MT}</translate>", extra_info(SRC),
                          reference=REF))
    extra = out["reward_extra_info"]
    penalty, reward = float(extra["overlong_reward"]), float(out["reward_score"])  # verl gives tensors here
    assert penalty < 0 and bool(extra["overlong"])
    assert reward == pytest.approx(extra["score"] + penalty)
    assert extra["score_rounded"] == round(extra["score"], 2) != round(reward, 2)
    assert cfg.trainer.v1.sampler.sampler_kwargs.filter_metric == "score_rounded"

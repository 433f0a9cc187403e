"""src/trainer/entry.py against verl 0.9.1's real trainer classes: the time-limit save.

The trainer under test is verl's own PPOTrainerSync with TimeLimitSave mixed in, and its
`_save_checkpoint` is verl's own. It is built partially (object.__new__, attributes set here):
verl's __init__ builds the replay buffer on TransferQueue and `init()` starts GPU worker groups,
neither of which exists on CPU. Two attributes stand in for GPU parts and only record: the actor
worker group's `save_checkpoint` (FSDP shards) and the checkpoint manager's `update_weights`
(the weight sync into vLLM that PPOTrainerSync.on_step_end does). Everything else the save
touches is verl's: the checkpoint callback, the dataloader state (torchdata's
StatefulDataLoader), the tracker file, and `find_latest_ckpt_path`, which resume reads.
That `python -m src.trainer` runs verl's main with this class in our TaskRunner actor is seen in real steps:
tests/loop/test_smoke_on_cpu.py (its line in train.log), and the saves it makes at a time limit in
tests/loop/test_reward_paths.py and tests/slurm/test_real_loop_sweep.py.
"""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from src.trainer import entry as train_entry
from src.trainer import time_limit
from tests.helpers.verl_trainer_stand_ins import partial_trainer


def trainer(tmp_path: Path, step: int, total: int, save_freq: int):
    return partial_trainer(tmp_path, step, total, save_freq)


def test_the_time_limited_trainer_is_verls_own_class_with_the_hook_first():
    from verl.trainer.ppo.v1 import PPOTrainerSync
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    cls = train_entry.time_limited(PPOTrainerSync)
    assert issubclass(cls, PPOTrainerSync) and cls is train_entry.time_limited(PPOTrainerSync)
    assert cls.__mro__[1] is train_entry.TimeLimitSave
    # the seam: fit calls on_step_end after the step's periodic save and before logging its
    # metrics, and leaves its loop when global_steps passes total_training_steps
    fit = inspect.getsource(PPOTrainer.fit)
    assert "self.global_steps <= self.total_training_steps" in fit
    assert fit.index("self._save_checkpoint()") < fit.index("self.on_step_end()") < fit.index(
        "self.logger.log(data=metrics")


def test_the_task_runner_points_verls_registry_at_the_time_limited_class_only_while_it_runs():
    from verl.trainer.main_ppo import TaskRunnerV1
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls

    assert issubclass(train_entry.TimeLimitTaskRunner, TaskRunnerV1.__ray_actor_class__)
    with train_entry.time_limited_trainer("sync"):
        assert get_trainer_cls("sync") is train_entry.time_limited(PPOTrainerSync)
    assert get_trainer_cls("sync") is PPOTrainerSync


def test_no_request_no_save(tmp_path):
    t = trainer(tmp_path, step=7, total=100, save_freq=5)
    t.on_step_end()
    assert t.checkpoint_manager.steps == [7]          # verl's own on_step_end still ran
    assert t.actor_rollout_wg.saves == [] and t.total_training_steps == 100
    assert time_limit.saved(tmp_path / "ckpt") is None


def test_on_request_the_step_is_saved_by_verls_checkpoint_code_and_fit_ends_after_it(tmp_path):
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    ckpt = tmp_path / "ckpt"
    t = trainer(tmp_path, step=7, total=100, save_freq=5)
    time_limit.request(ckpt, "SIGUSR2", 30)
    t.on_step_end()
    assert t.actor_rollout_wg.saves == [7]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "7"
    assert (ckpt / "global_step_7" / "data.pt").is_file()       # verl's dataloader state
    assert find_latest_ckpt_path(str(ckpt)) == str(ckpt / "global_step_7")   # what resume_mode=auto loads
    assert t.total_training_steps == 7                         # fit's loop ends after this step
    assert time_limit.saved(ckpt) == {"step": 7, "saved_now": True, "finished": False}


def test_a_step_the_periodic_save_just_wrote_is_not_saved_twice(tmp_path):
    ckpt = tmp_path / "ckpt"
    t = trainer(tmp_path, step=10, total=100, save_freq=5)
    time_limit.request(ckpt, "SIGUSR2", 30)
    t.on_step_end()
    assert t.actor_rollout_wg.saves == []
    assert time_limit.saved(ckpt) == {"step": 10, "saved_now": False, "finished": False}


@pytest.mark.parametrize("save_freq", [-1, 0])
def test_a_run_without_periodic_saves_still_keeps_its_last_step(tmp_path, save_freq):
    t = trainer(tmp_path, step=3, total=100, save_freq=save_freq)
    time_limit.request(tmp_path / "ckpt", "SIGUSR2", 30)
    t.on_step_end()
    assert t.actor_rollout_wg.saves == [3]


def test_the_last_step_says_the_run_finished(tmp_path):
    t = trainer(tmp_path, step=100, total=100, save_freq=5)
    time_limit.request(tmp_path / "ckpt", "SIGUSR2", 30)
    t.on_step_end()
    assert t.actor_rollout_wg.saves == []             # verl saves the last step itself
    assert json.loads((tmp_path / "ckpt" / "time_limit" / "saved.json").read_text())["finished"] is True


def test_the_last_step_marks_the_run_finished_without_a_request_and_no_earlier_step_does(tmp_path):
    ckpt = tmp_path / "ckpt"
    t = trainer(tmp_path, step=99, total=100, save_freq=5)
    t.on_step_end()
    assert time_limit.finished(ckpt) is None
    t.global_steps = 100
    t.on_step_end()
    assert time_limit.finished(ckpt) == 100 and t.actor_rollout_wg.saves == []
    assert time_limit.saved(ckpt) is None


def test_a_new_launch_clears_the_last_attempts_flags(tmp_path):
    ckpt = tmp_path / "ckpt"
    time_limit.request(ckpt, "SIGUSR2", 30)
    time_limit.record_saved(ckpt, 4, saved_now=True, finished=False)
    time_limit.record_finished(ckpt, 4)
    time_limit.clear(ckpt)
    assert not time_limit.requested(ckpt) and time_limit.saved(ckpt) is None and time_limit.finished(ckpt) is None

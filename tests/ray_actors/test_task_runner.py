"""What verl's TaskRunner does when one of our names does not resolve there: src/trainer/entry.py
resolve_registrations, run in the TaskRunner before verl's `run`, stops in one line (written to the stop file the
launcher reads) instead of a lookup's traceback minutes later. That every name does resolve inside the real
TaskRunner actor, of a launch started outside the code, is asserted on the training log of a real run
(tests/loop/test_reward_paths.py run 1: token credit, DAPO and the guard, the names this module's project config
has), which starts the Ray and the TaskRunner this module started for it before.
"""
from __future__ import annotations

import copy
import os

import pytest


def test_a_name_that_does_not_resolve_stops_in_one_line(project, tmp_path, monkeypatch):
    """The check in this process, on the project config with the reward function misnamed."""
    from omegaconf import open_dict
    from verl.trainer.ppo import core_algos

    from src.rewards.credit.estimator import register_for
    from src.trainer.entry import resolve_registrations
    from src.trainer.guard import TrainingGuardStop

    # what TimeLimitTaskRunner.run does first; the registry as it was after the test
    monkeypatch.delitem(core_algos.ADV_ESTIMATOR_REGISTRY, "grpo_token", raising=False)
    register_for(project.verl_config)
    stop_file = tmp_path / "training_stop.txt"
    monkeypatch.setenv("QE_TRAINING_STOP_FILE", str(stop_file))
    config = copy.deepcopy(project.verl_config)
    with open_dict(config):
        config.reward.custom_reward_function.name = "compute_scores"
    with pytest.raises(TrainingGuardStop) as err:
        resolve_registrations(config)
    msg = str(err.value)
    assert "\n" not in msg and stop_file.read_text().strip() == msg
    assert msg.startswith("reward function pkg://src.rewards.compute:compute_scores does not resolve in verl's "
                          f"TaskRunner (pid {os.getpid()}): AttributeError: Object not found in module")
    assert "(the code root must be on it on every node)" in msg

"""src/trainer/entry.py against verl 0.9.1's real trainer classes: the time-limit save.

The trainer under test is verl's own PPOTrainerSync with TimeLimitSave mixed in, and its
`_save_checkpoint` is verl's own. It is built partially (object.__new__, attributes set here):
verl's __init__ builds the replay buffer on TransferQueue and `init()` starts GPU worker groups,
neither of which exists on CPU. Two attributes stand in for GPU parts and only record: the actor
worker group's `save_checkpoint` (FSDP shards) and the checkpoint manager's `update_weights`
(the weight sync into vLLM that PPOTrainerSync.on_step_end does). Everything else the save
touches is verl's: the checkpoint callback, the dataloader state (torchdata's
StatefulDataLoader), the tracker file, and `find_latest_ckpt_path`, which resume reads.
"""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from src import verl_config
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


def test_the_entry_runs_verls_main_with_the_time_limited_trainer_in_the_task_runner_actor(tmp_path):
    """`python -m src.trainer` as the runner starts it, on CPU: Hydra, verl's validate_config,
    verl's run_ppo with a local Ray, our TaskRunner actor (imported by reference from src), verl's
    TaskRunnerV1.run building the time-limited trainer. Training cannot start on CPU: the run ends
    in verl's trainer init where it asks Ray for GPUs, after the trainer was built."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tests.fixtures.tiny_tokenizer import build_tiny_tokenizer

    model = build_tiny_tokenizer(tmp_path / "model")
    policy = Qwen2ForCausalLM(Qwen2Config(vocab_size=640, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128))
    policy.config.architectures = ["Qwen2ForCausalLM"]
    policy.save_pretrained(model)
    data = tmp_path / "train.parquet"
    pq.write_table(pa.table({"extra_info": [{"split": "train"}]}), data)
    config = verl_config.compose([
        "trainer.n_gpus_per_node=1", "+ray_kwargs.ray_init.num_cpus=13", "trainer.logger=[console]",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}", "algorithm.adv_estimator=grpo", "data.train_batch_size=8",
        f"data.train_files={data}", f"data.val_files={data}", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.model.path={model}", f"critic.model.path={model}"])
    (tmp_path / "verl_config.yaml").write_text(OmegaConf.to_yaml(config))
    repo = Path(train_entry.__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RAY_"))}
    # Ray's socket paths must stay under 108 bytes: not under pytest's tmp_path
    ray_tmp = tempfile.mkdtemp(prefix="qe-ray-", dir="/tmp")
    env.update(PYTHONPATH=str(repo), RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=ray_tmp)
    proc = subprocess.Popen([sys.executable, "-m", "src.trainer", f"--config-path={tmp_path}",
                             "--config-name=verl_config", f"hydra.run.dir={tmp_path / 'run'}", "hydra.output_subdir=null"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        try:  # the local Ray it started
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode != 0, out[-3000:]
    assert (f"src.trainer: trainer TimeLimitedPPOTrainerSync; on a Slurm time limit it saves the step in progress "
            f"(asked through {tmp_path / 'ckpt' / 'time_limit'})") in out, out[-5000:]
    # verl built the trainer and ran its init up to the GPU boundary (verl/single_controller/ray/base.py,
    # ResourcePoolManager._check_resource_available)
    assert "ray::TimeLimitTaskRunner.run()" in out and "Total available GPUs 0 is less than total desired GPUs 1" in out, \
        out[-5000:]

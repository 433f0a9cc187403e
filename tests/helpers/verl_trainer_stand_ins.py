"""What stands in for the GPU parts of verl's trainer when verl's own PPOTrainerSync is driven step by
step on CPU (tests/launcher/test_train_entry.py, tests/launcher/test_time_limit_watch.py): the actor
worker group's checkpoint save and the rollout replicas' weight sync."""
from __future__ import annotations

from pathlib import Path


class ActorWorkerGroup:
    """Stands in for the FSDP actor worker group (GPU): records each save (its step and the keep count
    verl passed), writes a shard of `shard_bytes` (a real write: a full file system fails it), and calls
    `during_save(local_path)` first when given (what a test looks at while a save is in progress)."""

    def __init__(self, shard_bytes: int = 5, during_save=None):
        self.saves: list[int] = []
        self.keep_counts: list = []
        self.shard_bytes = shard_bytes
        self.during_save = during_save

    def save_checkpoint(self, local_path, remote_path, global_step, max_ckpt_to_keep=None):
        if self.during_save is not None:
            self.during_save(local_path)
        Path(local_path).mkdir(parents=True, exist_ok=True)
        (Path(local_path) / "model_world_size_1_rank_0.pt").write_bytes(b"s" * self.shard_bytes)
        self.saves.append(global_step)
        self.keep_counts.append(max_ckpt_to_keep)


class WeightSync:
    """Stands in for the rollout replicas' weight sync (GPU) that PPOTrainerSync.on_step_end runs."""

    def __init__(self):
        self.steps: list[int] = []

    def update_weights(self, step):
        self.steps.append(step)


def partial_trainer(tmp_path: Path, step: int, total: int, save_freq: int, ckpt: Path | None = None,
                    verl_overrides: tuple[str, ...] = (), workers: ActorWorkerGroup | None = None):
    """verl's own PPOTrainerSync with the project's mixins (src/trainer/entry.py time_limited), built
    partially: verl's __init__ builds the replay buffer on TransferQueue and `init()` starts GPU worker
    groups, neither of which exists on CPU; the actor worker group and the weight sync stand in (above).
    Everything a save touches otherwise is verl's: `_save_checkpoint`, the checkpoint callback, the
    dataloader state (torchdata's StatefulDataLoader), the tracker file."""
    from omegaconf import OmegaConf, open_dict
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from src import verl_config
    from src.trainer import entry as train_entry

    ckpt = ckpt or tmp_path / "ckpt"
    config = verl_config.compose([f"trainer.default_local_dir={ckpt}", f"trainer.save_freq={save_freq}",
                                  *verl_overrides])
    OmegaConf.resolve(config)
    with open_dict(config):
        config.trainer.total_training_steps = total
    t = object.__new__(train_entry.time_limited(PPOTrainerSync))
    t.config, t.global_steps, t.total_training_steps = config, step, total
    t.trainer_mode, t.use_critic, t.timing_raw = "sync", False, {}
    t.actor_rollout_wg, t.checkpoint_manager = workers or ActorWorkerGroup(), WeightSync()
    t.train_dataloader = StatefulDataLoader(list(range(8)), batch_size=2)
    t.checkpoint_callback = build_checkpoint_callback(config)
    return t

"""What stands in for the GPU parts of verl's trainer when verl's own PPOTrainerSync is driven step by
step on CPU (tests/launcher/test_train_entry.py, tests/launcher/test_time_limit_watch.py): the actor
worker group's checkpoint save and the rollout replicas' weight sync."""
from __future__ import annotations

from pathlib import Path


class ActorWorkerGroup:
    """Stands in for the FSDP actor worker group (GPU): records each save, writes a shard."""

    def __init__(self):
        self.saves: list[int] = []

    def save_checkpoint(self, local_path, remote_path, global_step, max_ckpt_to_keep=None):
        Path(local_path).mkdir(parents=True, exist_ok=True)
        (Path(local_path) / "model_world_size_1_rank_0.pt").write_bytes(b"shard")
        self.saves.append(global_step)


class WeightSync:
    """Stands in for the rollout replicas' weight sync (GPU) that PPOTrainerSync.on_step_end runs."""

    def __init__(self):
        self.steps: list[int] = []

    def update_weights(self, step):
        self.steps.append(step)

"""src/trainer/checkpoints.py against verl 0.9.1's own `_save_checkpoint`: a checkpoint is kept whole or not
at all.

The trainer is verl's PPOTrainerSync with the project's mixins, built partially
(tests/helpers/verl_trainer_stand_ins.py partial_trainer): the FSDP worker group's save stands in, and writes
its shard for real, so a full file system (a small tmpfs, tests/helpers/limited_dirs.py) fails it as it would
fail FSDP's. The tracker, the dataloader state, the checkpoint callback and the resume lookup
(`find_latest_ckpt_path`) are verl's.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from src.trainer import checkpoints
from tests.helpers.launches import launch
from tests.helpers.limited_dirs import small_fs
from tests.helpers.verl_trainer_stand_ins import ActorWorkerGroup, partial_trainer

REPO = Path(__file__).resolve().parents[2]


def _resume_point(ckpt: Path) -> str | None:
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    return find_latest_ckpt_path(str(ckpt))


@pytest.mark.parametrize("keep_key", ["trainer.max_actor_ckpt_to_keep=1", "+trainer.remove_previous_ckpt_in_save=true"])
def test_with_a_keep_count_the_older_step_goes_only_after_the_tracker_names_the_new_one(tmp_path, keep_key):
    ckpt = tmp_path / "ckpt"
    seen = []

    def during_save(local_path):
        # what a kill at this moment would leave: the tracker's step, and whether its shards are there
        step = checkpoints.tracked_step(ckpt)
        seen.append((step, step is not None and (ckpt / f"global_step_{step}" / "actor").is_dir()))

    workers = ActorWorkerGroup(during_save=during_save)
    t = partial_trainer(tmp_path, step=1, total=10, save_freq=1, verl_overrides=(keep_key,),
                        workers=workers)
    for step in (1, 2, 3):
        t.global_steps = step
        t._save_checkpoint()
        assert checkpoints.step_dirs(ckpt) == [step] and checkpoints.tracked_step(ckpt) == step
    assert workers.keep_counts == [None, None, None]  # no worker deletes anything (verl's register_checkpoint)
    assert seen == [(None, False), (1, True), (2, True)]  # while a save runs, the tracked step is whole
    assert _resume_point(ckpt) == str(ckpt / "global_step_3")
    # verl's own keys are as the user set them after each save
    key = keep_key.lstrip("+").split("=")[0].split(".")[1]
    assert t.config.trainer[key] in (1, True)


def test_two_kept_and_none_kept_means_every_step(tmp_path):
    t = partial_trainer(tmp_path, step=1, total=10, save_freq=1, verl_overrides=("trainer.max_actor_ckpt_to_keep=2",))
    for step in (1, 2, 3, 4):
        t.global_steps = step
        t._save_checkpoint()
    assert checkpoints.step_dirs(tmp_path / "ckpt") == [3, 4]
    t = partial_trainer(tmp_path / "all", step=1, total=10, save_freq=1)
    for step in (1, 2, 3):
        t.global_steps = step
        t._save_checkpoint()
    assert checkpoints.step_dirs(tmp_path / "all" / "ckpt") == [1, 2, 3]


def test_a_disk_that_fills_while_saving_leaves_the_previous_checkpoint_whole(tmp_path, capsys):
    """A 1 MiB file system: step 1's 600 KiB shard fits, step 2's does not (ENOSPC from the real write).
    With a keep count of 1, verl's own retention would already have deleted step 1's shards by then."""
    with small_fs(tmp_path / "disk", size_k=1024) as disk:
        ckpt = disk / "ckpt"
        t = partial_trainer(tmp_path, step=1, total=10, save_freq=1, ckpt=ckpt,
                            verl_overrides=("trainer.max_actor_ckpt_to_keep=1",),
                            workers=ActorWorkerGroup(shard_bytes=600 * 1024))
        t._save_checkpoint()
        shard = (ckpt / "global_step_1" / "actor" / "model_world_size_1_rank_0.pt").read_bytes()
        t.global_steps = 2
        with pytest.raises(OSError, match="No space left on device"):
            t._save_checkpoint()
        out = capsys.readouterr().out
        lines = [line for line in out.splitlines() if line.startswith("checkpoint:")]
        # the free space read before the partial save is removed (what is left of 1 MiB after step 1's 600 KiB)
        (line,) = lines
        assert line.startswith(f"checkpoint: saving step 2 failed (the disk is full: ") and line.endswith(
            f" KiB free on the file system of {ckpt}; [Errno 28] No space left on device); removed the partial "
            f"{ckpt / 'global_step_2'}; the last whole checkpoint is step 1 in {ckpt}"), out
        assert checkpoints.step_dirs(ckpt) == [1] and checkpoints.tracked_step(ckpt) == 1
        assert (ckpt / "global_step_1" / "actor" / "model_world_size_1_rank_0.pt").read_bytes() == shard
        assert _resume_point(ckpt) == str(ckpt / "global_step_1")
        assert not [p for p in ckpt.iterdir() if p.name.startswith(".")]  # no temporary tracker left


def test_a_failed_saves_line_is_the_runs_stop_reason_unless_an_actor_died(tmp_path, capsys, monkeypatch):
    """The line is left where the launcher reads the trainer's stop reason (src/trainer/stop_reason.py), so it is
    the run's `error:` line, not verl's exception after it or the transfer queue's end in verl's unwinding; the
    full disk's advice only where the disk was full. A save failed by a dead worker leaves none: the death watch
    names the worker (src/node/deaths.py); the reason it leaves rules out a death, so the workers verl's unwinding ends
    after it are not taken for the fault."""
    from ray.exceptions import ActorDiedError

    from src.trainer import stop_reason
    from src.trainer.stop_reason import STOP_FILE_ENV

    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step_1" / "actor").mkdir(parents=True)
    stop_file = tmp_path / "training_stop.txt"
    monkeypatch.setenv(STOP_FILE_ENV, str(stop_file))
    for reason, free in ((OSError(28, "No space left on device"), "free space on that disk, then "),
                         (RuntimeError("a worker failed"), "")):
        checkpoints.KeptWhole._undo_save(ckpt, 2, 1, reason)
        (printed,) = capsys.readouterr().out.splitlines()
        assert printed.startswith("checkpoint: saving step 2 failed (") and printed.endswith(
            f"the last whole checkpoint is step 1 in {ckpt}")
        assert stop_reason.read(stop_file) == f"{printed}; {free}run the same command again: it resumes from there"
        assert stop_reason.rules_out_a_death(stop_file)
        stop_file.unlink()
    checkpoints.KeptWhole._undo_save(ckpt, 2, 1, ActorDiedError())
    assert capsys.readouterr().out.startswith("checkpoint: saving step 2 failed (") and not stop_file.exists()


def test_a_save_cut_short_is_removed_before_training_and_an_unreadable_tracker_is_one_line(tmp_path):
    ckpt = tmp_path / "ckpt"
    for step in (2, 4, 6):
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    checkpoints.write_tracker(ckpt, 4)
    assert checkpoints.discard_partial(ckpt) == [
        f"checkpoint: removed {ckpt / 'global_step_6'}, a save that did not finish (the last whole checkpoint is step 4)"]
    assert checkpoints.step_dirs(ckpt) == [2, 4]
    (ckpt / checkpoints.TRACKER).write_text("")  # what open("w") leaves when the write after it fails
    with pytest.raises(checkpoints.CheckpointError) as err:
        checkpoints.discard_partial(ckpt)
    assert "\n" not in str(err.value) and "does not name a step ('')" in str(err.value)
    assert "steps 2, 4" in str(err.value) and f"echo STEP > {ckpt / checkpoints.TRACKER}" in str(err.value)
    assert checkpoints.step_dirs(ckpt) == [2, 4]  # nothing removed on a refusal


def _launch(tmp_path: Path, ckpt: Path):
    (tmp_path / "models" / "Qwen2.5-0.5B-Instruct").mkdir(parents=True, exist_ok=True)
    from src.data.parquet_io import write_parquet_atomic
    from src.data.rows import Example, make_row

    for split in ("train", "val"):
        rows = [make_row(Example("今天天气很好。", "The weather is nice today.", "zh", "en"), dataset_name="wmt_zh_en",
                         template="base", split=split, index=i) for i in range(24)]
        write_parquet_atomic(rows, tmp_path / "data" / "wmt_zh_en" / f"{split}.parquet")
    return launch(["model=qwen2.5_0.5b", "reward=comet", "gpus=1", "trainer.total_training_steps=6",
                   "batch.prompts_per_step=4", "batch.mini_batch_prompts=4", "debug.skip_scorer=true",
                   f"debug.train_command_override='{sys.executable} -c pass'",
                   f"+verl.trainer.default_local_dir={ckpt}", f"paths.output_dir={tmp_path}/out",
                   f"paths.results_root={tmp_path}/results", f"paths.model_root={tmp_path}/models",
                   f"paths.data_root={tmp_path}/data"],
                  env_extra={"CUDA_VISIBLE_DEVICES": "0", "SLURM_CPUS_PER_TASK": "16"}, timeout=600)


def test_a_launch_removes_a_save_cut_short_and_refuses_an_unreadable_tracker_before_writing(tmp_path):
    ckpt = tmp_path / "ckpt"
    for step in (3, 4):
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
    checkpoints.write_tracker(ckpt, 3)
    done = _launch(tmp_path, ckpt)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert (f"checkpoint: removed {ckpt / 'global_step_4'}, a save that did not finish (the last whole checkpoint "
            f"is step 3)") in done.stdout
    assert checkpoints.step_dirs(ckpt) == [3]

    (ckpt / checkpoints.TRACKER).write_text("3\x00")
    runs_before = sorted((tmp_path / "out" / "runs").iterdir())
    refused = _launch(tmp_path, ckpt)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "does not name a step" in errors[0], refused.stderr
    assert sorted((tmp_path / "out" / "runs").iterdir()) == runs_before  # no run dir for a launch that never ran


def test_retention_per_role_removes_a_step_whole_only_when_no_shards_are_left(tmp_path):
    ckpt = tmp_path / "ckpt"
    for step in (1, 2, 3, 4):
        for role in ("actor", "critic"):
            (ckpt / f"global_step_{step}" / role).mkdir(parents=True)
        (ckpt / f"global_step_{step}" / "data.pt").write_bytes(b"d")
    (ckpt / "global_step_5" / "actor").mkdir(parents=True)  # newer than the tracker's step: not retention's
    removed = checkpoints.retain(ckpt, {"actor": 1, "critic": 2}, newest=4)
    assert removed == [str(ckpt / "global_step_1"), str(ckpt / "global_step_2"), str(ckpt / "global_step_3" / "actor")]
    assert checkpoints.step_dirs(ckpt) == [3, 4, 5]
    assert (ckpt / "global_step_3" / "critic").is_dir() and (ckpt / "global_step_4" / "actor").is_dir()
    assert checkpoints.retain(ckpt, {"actor": None, "critic": None}, newest=4) == []

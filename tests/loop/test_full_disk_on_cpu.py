"""A disk that fills while a checkpoint is saved, in real steps (issue 48, item 3): verl's own trainer on the CPU
loop, its checkpoint dir on a small file system of its own (a tmpfs, tests/helpers/limited_dirs.py), a save every
step. Once step 1's checkpoint is whole (the tracker names it), the test fills that file system but for a fraction
of one checkpoint, as another job's output would: step 2's save runs out of space in verl's own writes.

src/trainer/checkpoints.py removes the partial `global_step_2/` and leaves the tracker at step 1; the run stops with
one line that says the disk is full and where the last whole checkpoint is, exit 1; verl's resume lookup finds step
1; nothing is left running (the cpu_loop fixture checks every process of the launch's Ray session ended). What the
first runs of this test found: the run's line blamed the transfer queue, then verl's TaskRunner, as dead processes
(both end in verl's unwinding after the save's error: src/node/deaths.py), and torch's writer on a full disk raises
"unexpected pos", not ENOSPC (src/trainer/checkpoints.py reads the free space instead).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from src.trainer import checkpoints
from tests.helpers.launches import checkpoint_dir, latest_run_dir
from tests.helpers.limited_dirs import small_fs

TIMEOUT_S = 900
WAIT_S = 600
ARGS = ["experiment=learn_tiny", "learn.enable=false", "trainer.val_before_train=false", "trainer.test_freq=-1",
        "trainer.save_freq=1", "trainer.total_training_steps=3"]
DISK_K = 64 * 1024  # a few tiny checkpoints (about 5 MB each)


def _fill_leaving(disk: Path, free_bytes: int) -> int:
    """Write a file on `disk` until `free_bytes` are left; its size."""
    stat = os.statvfs(disk)
    size = stat.f_bavail * stat.f_frsize - free_bytes
    with open(disk / "filler", "wb") as f:
        f.truncate(0)
        block = b"\0" * (1 << 20)
        left = size
        while left > 0:
            left -= f.write(block[:min(left, len(block))])
        f.flush()
        os.fsync(f.fileno())
    return size


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_a_disk_that_fills_while_saving_stops_the_run_in_one_line_and_keeps_the_last_checkpoint(
        cpu_loop, taught_build, tmp_path):
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    with small_fs(tmp_path / "disk", size_k=DISK_K) as disk:
        seen: dict[str, int] = {}

        def fill(out: Path, running) -> None:
            deadline = time.monotonic() + WAIT_S
            while True:
                latest = latest_run_dir(out)
                ckpt = checkpoint_dir(latest) if latest is not None else None
                if ckpt is not None and checkpoints.tracked_step(ckpt) == 1:
                    break
                assert running() and time.monotonic() < deadline, "the launch ended (or hung) before step 1's save"
                time.sleep(0.2)
            # a tenth of a checkpoint left: step 2's shards cannot all be written
            seen["checkpoint"] = _dir_bytes(ckpt / "global_step_1")
            seen["filler"] = _fill_leaving(disk, seen["checkpoint"] // 10)

        run = cpu_loop(ARGS + [f"model.build_dir={taught_build}", f"paths.results_root={disk}"], timeout_s=TIMEOUT_S,
                       during=fill)
        print(f"full disk while saving: {run.seconds:.0f} s (a checkpoint {seen.get('checkpoint', 0) / 1e6:.1f} MB)")
        out = run.output
        (run_dir,) = run.run_dirs
        ckpt = checkpoint_dir(run_dir)
        assert run.returncode == 1, out[-6000:]
        errors = [line for line in out.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, out[-6000:]
        (line,) = errors
        print(line)
        # the save's own line (src/trainer/checkpoints.py), not verl's exception after it, nor the transfer queue's
        # actors, which verl's unwinding ends (src/node/deaths.py ENDED_BY_UNWINDING)
        # torch's writer says only "unexpected pos" on a full disk: the line says what the file system had left
        assert line.startswith("error: checkpoint: saving step 2 failed (the disk is full: "), line
        assert f" KiB free on the file system of {ckpt}; " in line, line
        assert line.endswith(f"; removed the partial {ckpt / 'global_step_2'}; the last whole checkpoint is step 1 in "
                             f"{ckpt}; free space on that disk, then run the same command again: it resumes from "
                             f"there"), line
        # the partial save removed, the tracker at step 1, verl's resume lookup finds it whole
        assert checkpoints.step_dirs(ckpt) == [1] and checkpoints.tracked_step(ckpt) == 1, \
            sorted(p.name for p in ckpt.iterdir())
        assert find_latest_ckpt_path(str(ckpt)) == str(ckpt / "global_step_1")
        assert sorted(p.name for p in (ckpt / "global_step_1" / "actor").glob("*.pt")) == [
            f"{kind}_world_size_1_rank_0.pt" for kind in ("extra_state", "model", "optim")]
        assert not [p for p in ckpt.iterdir() if p.name.startswith(".")]  # no temporary tracker left
        (disk / "filler").unlink()
        shutil.rmtree(ckpt.parent, ignore_errors=True)  # the tmpfs goes with the test; its files first

"""A checkpoint is kept whole or not at all: verl's save with its retention moved after the tracker,
the tracker written atomically, a failed save undone, and a save a kill cut short discarded at launch.

What verl 0.9.1 guarantees, read in its code:
- `PPOTrainer._save_checkpoint` (verl/trainer/ppo/v1/trainer_base.py) writes the actor's (and critic's)
  shards, then data.pt, then `latest_checkpointed_iteration.txt` last; resume loads the step the tracker
  names (`find_latest_ckpt_path`, verl/utils/checkpoint/checkpoint_manager.py). A save killed while its
  shards are written leaves the tracker at the step before: the partial dir is never loaded.
- But with `trainer.max_actor_ckpt_to_keep` (or `max_critic_ckpt_to_keep`, or the deprecated
  `remove_previous_ckpt_in_save`) set, each worker's checkpoint manager deletes older steps' shards in
  `register_checkpoint`, at the end of the worker's own save, before the trainer writes the tracker. A kill
  or a full disk between the two leaves a tracker that names deleted shards: the run cannot resume.
- The tracker is written with `open(..., "w")`: truncated first, so a full disk at that write leaves it
  empty, and resume fails on `int("")`.

So the trainer subclass (`KeptWhole`, mixed in by src/trainer/entry.py) saves through verl's own
`_save_checkpoint` with the keep counts set to None for that call (no worker deletes anything), then:
- on success: the tracker written again atomically (a temporary file, fsync, rename), and only then the
  retention: older steps beyond the keep count removed, oldest first, never the one the tracker names;
- on a failure (a full disk, a worker's error): the partial `global_step_N/` removed (which also frees
  the space) and the tracker put back to the step it named, then one `checkpoint:` line and the error. That line
  is also the run's stop reason (src/trainer/stop_reason.py: the launcher's `error:` line), unless a Ray
  actor's death failed the save: the death watch names the dead process (src/node/deaths.py).
The peak is one checkpoint more than the keep count, while the new one is written (verl's own
retention with a keep count of 1 has the same peak).

And every launch, before training (src/pipeline/run.py through `discard_partial`): a `global_step_N/`
newer than the tracker's step is a save that did not finish (a SIGKILL in the middle): removed, with
a line, so the step is saved again whole when training reaches it.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from src.trainer import stop_reason

TRACKER = "latest_checkpointed_iteration.txt"  # verl's name (checkpoint_manager.get_checkpoint_tracker_filename)
STEP_DIR = re.compile(r"global_step_(\d+)$")
FULL_BELOW_BYTES = 1 << 20  # a save that failed with less than this free where it writes: the disk filled up
# verl's role dirs inside global_step_N/ (trainer_base.py _save_checkpoint: "actor", str(Role.Critic))
ROLES = ("actor", "critic")


class CheckpointError(RuntimeError):
    """A launch that cannot tell which checkpoint to resume from: one line."""


def tracked_step(checkpoint_dir: str | Path) -> Optional[int]:
    """The step verl's tracker names; None without a tracker. Raises CheckpointError when it is unreadable."""
    path = Path(checkpoint_dir) / TRACKER
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    if not text.isdigit():
        steps = ", ".join(str(s) for s in step_dirs(checkpoint_dir)) or "none"
        raise CheckpointError(
            f"{path} does not name a step ({text[:20]!r}): verl could not resume from it; the checkpoints there are "
            f"steps {steps}. Write the step to resume from into it (echo STEP > {path}), or move the dir away to "
            f"start over")
    return int(text)


def step_dirs(checkpoint_dir: str | Path) -> list[int]:
    """The steps that have a global_step_N/ dir, in order."""
    folder = Path(checkpoint_dir)
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name)))


def write_tracker(checkpoint_dir: str | Path, step: int) -> None:
    """The tracker naming `step`, replaced in one rename: a reader sees the old step or the new one."""
    folder = Path(checkpoint_dir)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{TRACKER}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(str(step))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / TRACKER)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def discard_partial(checkpoint_dir: str | Path) -> list[str]:
    """Before training: remove each global_step_N/ newer than the tracker's step (a save cut short).
    Returns a line per removed dir. Raises CheckpointError on an unreadable tracker."""
    tracked = tracked_step(checkpoint_dir)
    lines = []
    for step in step_dirs(checkpoint_dir):
        if tracked is None or step > tracked:
            path = Path(checkpoint_dir) / f"global_step_{step}"
            shutil.rmtree(path, ignore_errors=True)
            since = "no step was saved whole" if tracked is None else f"the last whole checkpoint is step {tracked}"
            lines.append(f"checkpoint: removed {path}, a save that did not finish ({since})")
    return lines


def keep_counts(trainer_config) -> dict[str, Optional[int]]:
    """verl's keep counts per role, as `_save_checkpoint` resolves them (trainer_base.py)."""
    if trainer_config.get("remove_previous_ckpt_in_save", False):
        return {"actor": 1, "critic": 1}
    return {"actor": trainer_config.get("max_actor_ckpt_to_keep", None),
            "critic": trainer_config.get("max_critic_ckpt_to_keep", None)}


def retain(checkpoint_dir: str | Path, keep: dict[str, Optional[int]], newest: int) -> list[str]:
    """After the tracker names `newest`: each role's shards kept in its newest `keep[role]` steps (None or
    <= 0: all); a step dir left with no role's shards removed whole. Never a step after `newest`, never
    `newest` itself. Returns the removed paths (a whole step dir as itself)."""
    steps = [s for s in step_dirs(checkpoint_dir) if s <= newest]
    old_for = {role: set(steps[:-count]) for role, count in keep.items() if isinstance(count, int) and count > 0}
    removed = []
    for step in steps[:-1]:
        folder = Path(checkpoint_dir) / f"global_step_{step}"
        going = [r for r, old in old_for.items() if step in old]
        if not going:
            continue
        if not any((folder / r).exists() for r in ROLES if r not in going):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
            continue
        for role in going:
            if (folder / role).exists():
                shutil.rmtree(folder / role, ignore_errors=True)
                removed.append(str(folder / role))
    return removed


def _a_death(exc: BaseException) -> bool:
    """Whether a save failed because a Ray actor died (ray/exceptions.py RayActorError, ActorDiedError)."""
    return any(c.__name__ in ("RayActorError", "ActorDiedError", "ActorUnavailableError") for c in type(exc).__mro__)


def _full_disk(ckpt: Path, exc: BaseException) -> Optional[str]:
    """'the disk is full: N KiB free on the file system of <ckpt>' when the save failed on a full disk; None
    otherwise."""
    try:
        stat = os.statvfs(ckpt)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize  # what this user may still write (root's reserve excluded)
    if free >= FULL_BELOW_BYTES and "No space left on device" not in str(exc):
        return None
    return f"the disk is full: {free // 1024} KiB free on the file system of {ckpt}"


def _reason(exc: BaseException) -> str:
    """The error's last line (a Ray task error carries the worker's whole traceback)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(exc).__name__


class KeptWhole:
    """Mixed in before verl's trainer class: `_save_checkpoint` keeps a checkpoint whole or not at all."""

    def _save_checkpoint(self):
        from omegaconf import open_dict

        trainer_cfg = self.config.trainer
        ckpt = Path(trainer_cfg.default_local_dir)
        step = self.global_steps
        if self.config.actor_rollout_ref.actor.get("checkpoint", {}).get("async_save", False):
            # verl writes no tracker for an async save (trainer_base.py): nothing here to order
            return super()._save_checkpoint()
        keep = keep_counts(trainer_cfg)
        before = tracked_step(ckpt)
        # the keys verl reads for the workers' retention, off for this call (those the config has)
        saved = {k: trainer_cfg[k] for k in ("max_actor_ckpt_to_keep", "max_critic_ckpt_to_keep",
                                             "remove_previous_ckpt_in_save") if k in trainer_cfg}
        with open_dict(trainer_cfg):
            for key in saved:
                trainer_cfg[key] = False if key == "remove_previous_ckpt_in_save" else None
        try:
            super()._save_checkpoint()
        except Exception as exc:
            self._undo_save(ckpt, step, before, exc)
            raise
        finally:
            with open_dict(trainer_cfg):
                for key, value in saved.items():
                    trainer_cfg[key] = value
        write_tracker(ckpt, step)
        for path in retain(ckpt, keep, newest=step):
            print(f"checkpoint: removed {path} (keeping {self._kept(keep)})", flush=True)

    @staticmethod
    def _kept(keep: dict) -> str:
        return ", ".join(f"the newest {n} {role}" for role, n in keep.items() if isinstance(n, int) and n > 0)

    @staticmethod
    def _undo_save(ckpt: Path, step: int, before: Optional[int], exc: BaseException) -> None:
        try:
            now = (ckpt / TRACKER).read_text(encoding="utf-8").strip()
        except OSError:
            now = None
        if now == str(step):
            # the tracker is verl's last write: the checkpoint is whole, what failed came after it
            print(f"checkpoint: step {step} was saved whole; what failed after it: {_reason(exc)}", flush=True)
            return
        partial = ckpt / f"global_step_{step}"
        # before the partial save frees it: torch's writer on a full disk says only "unexpected pos" (PyTorch's
        # inline_container.cc), not ENOSPC, so the disk's free space is what tells a full disk
        full = _full_disk(ckpt, exc)
        shutil.rmtree(partial, ignore_errors=True)  # first: it frees the space the tracker may need
        if before is not None:
            write_tracker(ckpt, before)
        elif now is not None:
            (ckpt / TRACKER).unlink(missing_ok=True)
        last = f"the last whole checkpoint is step {before} in {ckpt}" if before is not None else "no step was saved before"
        why = f"{full}; {_reason(exc)}" if full else _reason(exc)
        line = f"checkpoint: saving step {step} failed ({why}); removed the partial {partial}; {last}"
        print(line, flush=True)
        if not _a_death(exc):
            # the run's one line (a dead worker's is the death watch's, src/node/deaths.py): verl's own exception
            # follows, and the ends of the TaskRunner, the transfer queue's actors and, once verl's driver exits, the
            # FSDP workers in verl's unwinding: none of them is the fault (the CI of ace55b0 saw a worker's end first)
            stop_reason.leave(f"{line}; {'free space on that disk, then ' if full else ''}run the same command "
                              f"again: it resumes from there", rules_out_a_death=True)

"""The last completed step survives a Slurm time limit: the flag protocol between the runner and the trainer.

verl 0.9.1's V1 trainer saves every `save_freq` steps and at the last step only
(verl/trainer/ppo/v1/trainer_base.py, PPOTrainer.fit); the expiration save
(`trainer.esi_redundant_time`, `should_save_ckpt_esi`) exists in the legacy ray_trainer.py only.
So the save after the signal is ours, through verl's own checkpoint code:

  1. Slurm signals the job `signal_delay_s` before its time limit (submitit's sbatch line
     `--signal=USR2@<s>`, sent to the job step, i.e. to the job's Python process and its children).
  2. src/node/training.py (the job's process that started training) writes REQUESTED into the run's
     checkpoint dir. The checkpoint dir is the one path the trainer already knows
     (trainer.default_local_dir) and it is shared by every node (verl writes its shards there), so
     the flag reaches the trainer wherever Ray placed it, with no environment to forward.
  3. The trainer (src/trainer/entry.py, in verl's TaskRunner actor), at the end of the step it is
     in, saves that step with verl's own `_save_checkpoint()` unless verl's periodic save just did,
     writes SAVED (the step, and whether the run was finished anyway) and ends `fit` after the
     step's metrics are logged. verl exits 0.
  4. The runner then lets submitit requeue the job (its own USR2 handler: `scontrol requeue`,
     bounded by max_num_timeout) before it stops the scorer and Ray, so the requeue reaches Slurm
     before the limit; the requeued job resumes from that step (resume_mode=auto).
     If training has not ended `stop_by_s` after the signal (or REQUEUE_S, src/plan/time_limit.py, before the job's end),
     the runner stops it and requeues anyway: the run then resumes from its last periodic save.
  5. The trainer also writes FINISHED after its last step, request or not: Slurm may signal after
     the last step's check (during verl's shutdown), and a run whose steps are all done is not
     requeued (a requeued start would only load the last checkpoint and end).

Whose request: REQUESTED is honoured by whichever trainer reads the checkpoint dir, so one left by
an earlier attempt would end the next one after its first step, with exit 0, looking finished (a
Slurm job killed before its runner cleared it, then resumed locally or with --from-snapshot
--resume). So every launch clears the flags before its training starts (src/pipeline/run.py
through src/node/training.py clear_time_limit_flags, on every launch, not only under Slurm), and
the watch of a Slurm launch clears them again as it starts. Why the launcher clears rather than
the flag carrying the launch's identity for the trainer to compare: the runner is the one process
that knows a new training begins, and it needs nothing forwarded to the trainer, which runs in
verl's TaskRunner actor on whichever node of the Ray cluster Ray places it, where environment
variables the runner sets on node 0 do not reach (verl/trainer/main_ppo.py, run_ppo: no placement).
The protocol stays a plain file on the shared checkpoint dir. The one path around the launcher,
command.txt started by hand, is a record, not a launch (docs/snapshots.md): re-run with
--from-snapshot.

The test stand-in (tests/slurm/stand_in_train.py) speaks the same protocol through these helpers.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

FLAG_DIR = "time_limit"
REQUESTED = "requested.json"
SAVED = "saved.json"
FINISHED = "finished.json"


def flag_dir(checkpoint_dir: str | Path) -> Path:
    return Path(checkpoint_dir) / FLAG_DIR


def clear(checkpoint_dir: str | Path) -> None:
    """Before training starts, on every launch: no attempt sees an earlier attempt's flags."""
    for name in (REQUESTED, SAVED, FINISHED):
        (flag_dir(checkpoint_dir) / name).unlink(missing_ok=True)


def request(checkpoint_dir: str | Path, signal_name: str, stop_by_s: float) -> None:
    folder = flag_dir(checkpoint_dir)
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / REQUESTED, {"signal": signal_name, "at": time.time(), "stop_by_s": stop_by_s})


def requested(checkpoint_dir: str | Path) -> bool:
    """Asked once per step by the trainer: one stat on the shared checkpoint dir."""
    return (flag_dir(checkpoint_dir) / REQUESTED).exists()


def record_saved(checkpoint_dir: str | Path, step: int, saved_now: bool, finished: bool) -> None:
    """The trainer's answer: `step` is in the checkpoint dir (saved now, or by the periodic save)."""
    _write(flag_dir(checkpoint_dir) / SAVED, {"step": step, "saved_now": saved_now, "finished": finished})


def record_finished(checkpoint_dir: str | Path, step: int) -> None:
    """The trainer's last step has ended (fit saved it if the run saves at all)."""
    folder = flag_dir(checkpoint_dir)
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / FINISHED, {"step": step})


def finished(checkpoint_dir: str | Path) -> Optional[int]:
    """The last step of a training that ran all its steps, or None."""
    try:
        return int(json.loads((flag_dir(checkpoint_dir) / FINISHED).read_text(encoding="utf-8"))["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def saved(checkpoint_dir: str | Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads((flag_dir(checkpoint_dir) / SAVED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write(path: Path, data: dict) -> None:
    # write then rename: the reader on another node never sees half a file
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data) + "\n", encoding="utf-8")
    tmp.replace(path)

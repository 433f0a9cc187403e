"""The trainer's one-line reason for stopping a run, left where the launcher reads it.

The trainer stops a run it must not continue (src/trainer/guard.py: lost groups, unbounded DAPO resampling;
src/trainer/checkpoints.py: a save that failed) by writing one line to the file $QE_TRAINING_STOP_FILE names and
raising: src/node/training.py sets the variable for every launch and turns the line into the launcher's `error:`
line, so the user reads the reason, not verl's traceback. Kept apart from guard.py, which imports verl: the
launcher reads the name without it. This module owns the file's format: the writer and the reader are both here.

A reason may rule out a process's death as the stop's cause (a save that failed on a full disk, not on a dead
actor; DAPO's bound on resampling): the processes that end after it end in verl's unwinding (its driver's exit
takes the FSDP workers with it), and the launcher's death watch (src/node/deaths.py) must not take their ends for
the fault. A reason that does not (the guard's lost groups, which a dead vLLM engine makes) leaves the death watch
to judge.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

STOP_FILE_ENV = "QE_TRAINING_STOP_FILE"
# the file's second line when the reason rules out a death
_NOT_A_DEATH = "# not made by a process's death"


def leave(reason: str, *, rules_out_a_death: bool = False) -> None:
    """Write the reason where the runner reads it; the exception that follows stops the trainer.
    `rules_out_a_death`: the stopping code saw its cause, and it is not a process's death."""
    path = os.environ.get(STOP_FILE_ENV)
    if path:
        try:
            Path(path).write_text(reason + "\n" + (_NOT_A_DEATH + "\n" if rules_out_a_death else ""), encoding="utf-8")
        except OSError:
            pass  # the exception that follows still carries the reason into verl's log


def read(path: Path) -> Optional[str]:
    """The reason the trainer left at `path`; None when it left none."""
    lines = _lines(path)
    return lines[0] if lines else None


def rules_out_a_death(path: Path) -> bool:
    """Whether the trainer left a reason at `path` that no process's death made."""
    return _lines(path)[1:2] == [_NOT_A_DEATH]


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").strip().splitlines()
    except OSError:
        return []

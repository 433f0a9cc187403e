"""The trainer's one-line reason for stopping a run, left where the launcher reads it.

The trainer stops a run it must not continue (src/trainer/guard.py: lost groups, unbounded DAPO resampling;
src/trainer/checkpoints.py: a save that failed) by writing one line to the file $QE_TRAINING_STOP_FILE names and
raising: src/node/training.py sets the variable for every launch and turns the line into the launcher's `error:`
line, so the user reads the reason, not verl's traceback. Kept apart from guard.py, which imports verl: the
launcher reads the name without it.
"""
from __future__ import annotations

import os
from pathlib import Path

STOP_FILE_ENV = "QE_TRAINING_STOP_FILE"


def leave(reason: str) -> None:
    """Write the reason where the runner reads it; the exception that follows stops the trainer."""
    path = os.environ.get(STOP_FILE_ENV)
    if path:
        try:
            Path(path).write_text(reason + "\n", encoding="utf-8")
        except OSError:
            pass  # the exception that follows still carries the reason into verl's log

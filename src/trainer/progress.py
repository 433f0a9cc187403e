"""The line the trainer prints when a step ends: the launcher reads it from the training output (the
first step's end in src/node/startup.py; the terminal's progress line in src/node/console.py), whatever
loggers (console, wandb, file) the run has. It carries the run's total steps where the trainer knows
them (verl derives them from the epochs and the data when trainer.total_training_steps is null); lines
without it (written before it was added) still parse."""
from __future__ import annotations

import re
import time
from typing import NamedTuple, Optional

_FORMAT = "qe-rl: step {step} ended at {epoch:.3f}"
_PATTERN = re.compile(r"qe-rl: step (\d+) ended at (\d+\.\d+)(?: of (\d+) steps)?")


class StepEnd(NamedTuple):
    step: int
    epoch: float           # when it ended (epoch seconds, the trainer's clock)
    total: Optional[int]   # the run's steps; None where the line does not say


def step_end_line(step: int, epoch: float | None = None, total: int | None = None) -> str:
    line = _FORMAT.format(step=step, epoch=time.time() if epoch is None else epoch)
    return line + (f" of {int(total)} steps" if total else "")


def parse_progress(line: str) -> StepEnd | None:
    """The step-end line's fields, None for any other line."""
    m = _PATTERN.search(line)
    return StepEnd(int(m.group(1)), float(m.group(2)), int(m.group(3)) if m.group(3) else None) if m else None


def parse_step_end(line: str) -> tuple[int, float] | None:
    """(step, epoch seconds) of a step-end line, None for any other line."""
    ended = parse_progress(line)
    return (ended.step, ended.epoch) if ended else None

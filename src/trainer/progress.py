"""The line the trainer prints when a step ends: the launcher reads it from the training output (the
first step's end in src/node/startup.py), whatever loggers (console, wandb, file) the run has."""
from __future__ import annotations

import re
import time

_FORMAT = "qe-rl: step {step} ended at {epoch:.3f}"
_PATTERN = re.compile(r"qe-rl: step (\d+) ended at (\d+\.\d+)")


def step_end_line(step: int, epoch: float | None = None) -> str:
    return _FORMAT.format(step=step, epoch=time.time() if epoch is None else epoch)


def parse_step_end(line: str) -> tuple[int, float] | None:
    """(step, epoch seconds) of a step-end line, None for any other line."""
    m = _PATTERN.search(line)
    return (int(m.group(1)), float(m.group(2))) if m else None

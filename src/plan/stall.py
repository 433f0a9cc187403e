"""How long a run may go without a training step ending before the launcher calls it stalled.

A hung run (a collective that never returns, a vLLM engine that died while its caller waits) shows no
error: without a bound it sits at 0% GPU until the job's time limit. The launcher's stall guard
(src/node/stall.py) stops it at this bound instead. The first step has its own floor (start-up: Ray,
the workers, vLLM, validation before training); after it the bound follows the run: a multiple of the
longest gap between step ends seen so far (which includes the periodic saves and validations seen),
never below a minimum. `trainer.stall_timeout_s` fixes one bound for every step instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .values import PlanError


@dataclass(frozen=True)
class StallPlan:
    timeout_s: Optional[float]  # a fixed bound for every step (trainer.stall_timeout_s); None: derived
    first_step_s: float         # the bound until the first step ends
    multiple: float             # then: this times the longest gap between step ends so far ...
    min_s: float                # ... and at least this

    def limit(self, longest_gap_s: Optional[float]) -> float:
        """The bound now, given the longest gap between two step ends seen (None before a second step end;
        the first step's start-up is not a step)."""
        if self.timeout_s is not None:
            return self.timeout_s
        if longest_gap_s is None:
            return self.first_step_s
        return max(self.min_s, self.multiple * longest_gap_s)

    def describe(self) -> str:
        if self.timeout_s is not None:
            return f"no step ends within {self.timeout_s:.0f} s"
        return (f"no step ends within {self.first_step_s:.0f} s for the first, then {self.multiple:g} x the longest "
                f"step so far (at least {self.min_s:.0f} s)")


def plan_stall(trainer: dict) -> StallPlan:
    """From the `trainer:` config section (each value's range is the schema's)."""
    timeout = trainer.get("stall_timeout_s")
    first, multiple, low = (float(trainer[k]) for k in ("stall_first_step_s", "stall_multiple", "stall_min_s"))
    if multiple < 1:
        raise PlanError(f"trainer.stall_multiple={multiple:g} would call a run stalled before a step as long as its "
                        f"longest so far ends; set it to 2 or more, e.g. trainer.stall_multiple=5")
    return StallPlan(timeout_s=None if timeout is None else float(timeout), first_step_s=first, multiple=multiple,
                     min_s=low)

"""What a Slurm time limit costs a run: when the signal comes and how long training has to save.

The protocol that acts on it (the runner sets a flag in the checkpoint dir, the trainer saves the
step in progress and ends, submitit requeues) is src/trainer/time_limit.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from .values import PlanError, at_least

# Time the runner keeps for itself after training has ended: ask Slurm to requeue (`scontrol
# requeue`, seconds at most) before Slurm kills the job at its limit, then stop the scorer and Ray.
REQUEUE_S = 20


@dataclass(frozen=True)
class TimeLimitPlan:
    timeout_min: int          # Slurm's time limit per job (sbatch --time)
    signal_delay_s: int       # Slurm signals this long before the limit (sbatch --signal=USR2@<s>)
    stop_by_s: int            # after the signal, training must have ended by then (else it is stopped)
    max_num_timeout: int      # requeues after a time limit (submitit)
    max_stall_requeues: int   # requeues after a stall or a dead training process (src/slurm/requeue.py)


def plan_time_limit(slurm: dict) -> TimeLimitPlan:
    """From the `slurm:` config section. The signal must leave room for the requeue and must not
    come before the job could do anything."""
    timeout_min = at_least(slurm.get("timeout_min", 2880), 1, "slurm.timeout_min", "slurm.timeout_min=2880")
    delay = at_least(slurm.get("signal_delay_s", 300), 1, "slurm.signal_delay_s", "slurm.signal_delay_s=300")
    retries = at_least(slurm.get("max_num_timeout", 0), 0, "slurm.max_num_timeout", "slurm.max_num_timeout=5")
    faults = int(slurm.get("max_stall_requeues", 0))  # its range is the schema's
    if delay <= REQUEUE_S:
        raise PlanError(f"slurm.signal_delay_s={delay} leaves no time to finish and save the step in progress "
                        f"({REQUEUE_S} s of it go to the requeue); set it to one training step + one checkpoint "
                        f"save + {REQUEUE_S} s, e.g. slurm.signal_delay_s=300")
    if delay >= timeout_min * 60:
        raise PlanError(f"slurm.signal_delay_s={delay} is not shorter than the time limit "
                        f"slurm.timeout_min={timeout_min} ({timeout_min * 60} s): Slurm would signal the job as "
                        f"it starts; lower slurm.signal_delay_s or raise slurm.timeout_min")
    return TimeLimitPlan(timeout_min=timeout_min, signal_delay_s=delay, stop_by_s=delay - REQUEUE_S,
                         max_num_timeout=retries, max_stall_requeues=faults)

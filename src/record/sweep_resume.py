"""Which sweep this process resumes (`python -m src.launch --resume-sweep DIR`, src/pipeline/resume_sweep.py),
read where the jobs are started: a local sweep's task function (src/pipeline/run.py hydra_task) leaves the
jobs that succeeded alone, a Slurm sweep's submitter (src/slurm/sweep.py launch) does not submit them.
Both run in the launching process, so the state is this process's.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass
class Resumed:
    """The sweep being resumed (src/pipeline/resume_sweep.py argv_for sets it)."""
    sweep_dir: Path
    on_slurm: bool
    # the succeeded jobs' summary rows, by job number: left alone
    finished: dict[int, dict]
    # every recorded row, by job number (where each job ran before)
    rows: dict[int, dict]
    # every job's task overrides, by job number
    jobs: list[list[str]]

    def to_run(self) -> list[int]:
        return [i for i in range(len(self.jobs)) if i not in self.finished]


_current: Resumed | None = None


def start(resumed: Resumed) -> None:
    global _current
    _current = resumed


def current() -> Resumed | None:
    """The sweep this process resumes, or None (a new sweep)."""
    return _current


def left_alone(job_num: int, run_dir: Path) -> str | None:
    """In a resumed local sweep's task function: the line that says this job is left alone (it
    succeeded before), or None to run it."""
    resumed = current()
    row = resumed.finished.get(job_num) if resumed is not None and resumed.sweep_dir == run_dir.parent else None
    return f"[sweep] #{job_num} succeeded before: left alone ({row.get('run_dir')})" if row is not None else None


def own_run_dir_refusal(job_num: int, run_dir: str | Path | None) -> str | None:
    """Why job `job_num` of the resumed sweep would not run in its own run dir, or None."""
    resumed = current()
    before = (resumed.rows.get(job_num) or {}).get("run_dir") if resumed is not None else None
    if before and run_dir and Path(before) != Path(run_dir):
        return (f"job #{job_num} would run in {run_dir}, not in its own run dir {before} (run dirs are named "
                f"differently since): it would not resume there; launch a new sweep")
    return None

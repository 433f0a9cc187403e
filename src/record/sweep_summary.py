"""A sweep's outcome: every job's overrides, state, error, log and run dir, printed when the sweep
ends and kept in `<sweep dir>/summary.json`. One writer for both launchers: a Slurm sweep
(src/slurm/sweep.py) and a local `--multirun` (src/pipeline/local_sweep.py) end here, and
`python -m src.report <sweep dir>` reads the file back with `read`.

The exit is a SystemExit after the summary, not an exception through Hydra, whose handler would
add a stack-trace hint and a second, longer copy of the first failure.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Optional

from . import attempts

SUMMARY_FILE = "summary.json"
FAILED_EXIT = 1
# a row's state: "pending" only while the submitter waits (a summary is written when the sweep ends)
SUCCEEDED, FAILED, PENDING = "succeeded", "failed", "pending"


@dataclasses.dataclass
class SweepJob:
    idx: int
    overrides: list[str]
    run_dir: Optional[str]
    # the Slurm request (gpus_per_node, cpus_per_task, nodes); empty for a local job
    params: dict = dataclasses.field(default_factory=dict)
    # dry_run=true: planned and snapshotted in the submitting process; nothing is submitted
    dry: bool = False
    job_id: Optional[str] = None  # Slurm's; None for a local job
    log: Optional[str] = None
    state: str = PENDING
    error: Optional[str] = None
    result: Any = dataclasses.field(default=None, repr=False)

    def label(self) -> str:
        job = f" job {self.job_id}" if self.job_id else ""
        starts = attempts.count(self.run_dir)
        # a requeued job (time limit, preemption) resumed in its run dir: say so, it cost a start-up
        again = f", started {starts} times" if starts > 1 else ""
        return f"#{self.idx}{job} ({' '.join(self.overrides) or 'defaults'}{again})"


def report(jobs: list[SweepJob], sweep_dir: Path) -> list:
    """Print which jobs succeeded and which failed, write summary.json, exit 1 if any failed;
    else the jobs' results (Hydra's JobReturns)."""
    failed = [j for j in jobs if j.state != SUCCEEDED]
    lines = [f"[sweep] summary: {len(jobs) - len(failed)} succeeded, {len(failed)} failed "
             f"({sweep_dir / SUMMARY_FILE})"]
    for job in jobs:
        lines.append(f"  {'ok    ' if job.state == SUCCEEDED else 'FAILED'} {job.label()}"
                     + ("" if job.state == SUCCEEDED else f"\n           {job.error}"
                        + (f"\n           log: {job.log}" if job.log else "")))
    print("\n".join(lines), file=sys.stderr, flush=True)
    write(sweep_dir / SUMMARY_FILE, jobs)
    if failed:
        print(f"{len(failed)} of {len(jobs)} jobs of the sweep failed: "
              + ", ".join(f"#{j.idx}" + (f" (job {j.job_id})" if j.job_id else "") for j in failed),
              file=sys.stderr, flush=True)
        raise SystemExit(FAILED_EXIT)
    return [job.result for job in jobs]


def write(path: Path, jobs: list[SweepJob]) -> None:
    rows = {}
    if path.exists():  # a sweep launched in several batches
        rows = {r["idx"]: r for r in json.loads(path.read_text(encoding="utf-8"))}
    for j in jobs:
        rows[j.idx] = {"idx": j.idx, "job_id": j.job_id, "overrides": j.overrides, "state": j.state,
                       "error": j.error, "log": j.log, "run_dir": j.run_dir, "starts": attempts.count(j.run_dir),
                       "gpus_per_node": j.params.get("gpus_per_node"), "cpus_per_task": j.params.get("cpus_per_task"),
                       "nodes": j.params.get("nodes")}
    path.write_text(json.dumps([rows[k] for k in sorted(rows)], indent=2) + "\n", encoding="utf-8")


class SummaryError(ValueError):
    """summary.json exists but cannot be read as a sweep's summary (one line)."""


def read(sweep_dir: Path) -> list[dict] | None:
    """The rows of `<sweep dir>/summary.json`; None when there is none (a sweep still running: the
    file is written when it ends; or one written before local sweeps wrote it). SummaryError when
    the file is not a list of rows."""
    path = sweep_dir / SUMMARY_FILE
    if not path.is_file():
        return None
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SummaryError(f"{path} is not readable JSON ({e}); move it away to compare the runs without "
                           f"their recorded outcome") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise SummaryError(f"{path} is not a sweep summary (a list of job rows); move it away to compare the runs "
                           f"without their recorded outcome")
    return rows

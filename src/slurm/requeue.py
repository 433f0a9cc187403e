"""A Slurm job whose run hit a fault (it stalled: src/node/stall.py; a training process died: src/node/deaths.py)
is requeued, and resumes from its last checkpoint (resume_mode=auto), at most `slurm.max_stall_requeues` times.

A hang or a dead worker is often the node's, not the run's (a GPU that fell off the bus, a full /dev/shm, the OOM
killer after another job's leak): a requeue may land on another node and go on, where a failed job would wait for
a researcher. A fault that recurs at every start is not helped by more: the count is bounded, and kept over the
run's attempts in its checkpoint dir (every attempt of the run shares it; the run dir is also shared, but a
`--from-snapshot` rerun gets a new one).

The requeue is `scontrol requeue`, as submitit's own time-limit requeue does (submitit/slurm/slurm.py
SlurmJobEnvironment._requeue), on the array task's id where the job is one (`<array>_<task>`: a plain
SLURM_JOB_ID of an array's first task names the whole array to scontrol).
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping, Optional

FAULTS_FILE = "fault_requeues.json"
SCONTROL_TIMEOUT_S = 60


def job_id(environ: Mapping[str, str]) -> str:
    """The id scontrol takes for this job: `<array job>_<task>` in an array, else SLURM_JOB_ID."""
    array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else environ["SLURM_JOB_ID"]


def requeues_so_far(checkpoint_dir: str | Path) -> list[str]:
    """The faults this run was requeued after, oldest first."""
    try:
        return list(json.loads((Path(checkpoint_dir) / FAULTS_FILE).read_text())["faults"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _record(checkpoint_dir: Path, faults: list[str]) -> None:
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=checkpoint_dir, prefix=f".{FAULTS_FILE}.")
    with os.fdopen(fd, "w") as f:
        json.dump({"faults": faults}, f)
    os.replace(tmp, checkpoint_dir / FAULTS_FILE)


def after_fault(line: str, checkpoint_dir: str | Path, limit: int, environ: Mapping[str, str]) -> tuple[bool, str]:
    """Requeue this job after the fault `line` if fewer than `limit` requeues were made: (True, what to print
    after the fault's line). (False, why not) otherwise, or when scontrol refused (the job then fails)."""
    done = requeues_so_far(checkpoint_dir)
    if len(done) >= limit:
        already = f"requeued {len(done)} time(s) after a fault already" if done else "no requeue after a fault"
        return False, f"{already} (slurm.max_stall_requeues={limit})"
    jid = job_id(environ)
    # counted before the requeue: a requeue that Slurm carried out but whose answer was lost still counts
    _record(Path(checkpoint_dir), done + [line])
    try:
        subprocess.run(["scontrol", "requeue", jid], check=True, capture_output=True, text=True,
                       timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        why = getattr(exc, "stderr", None) or str(exc)
        return False, f"scontrol requeue {jid} failed ({' '.join(str(why).split())[:200]})"
    return True, (f"requeueing the job {jid} ({len(done) + 1} of {limit} requeues after a fault, "
                  f"slurm.max_stall_requeues); it resumes from its last checkpoint")

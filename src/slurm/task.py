"""Where this process sits in a Slurm job, read from the environment Slurm gives each task."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class SlurmTask:
    """Where this process sits in its Slurm job (tasks_per_node=1: rank = node index)."""
    job_id: int
    restart: int
    rank: int
    ntasks: int
    cpus: Optional[int]


def slurm_task(environ: dict) -> Optional[SlurmTask]:
    if "SLURM_JOB_ID" not in environ:
        return None
    cpus = environ.get("SLURM_CPUS_PER_TASK")
    return SlurmTask(job_id=int(environ["SLURM_JOB_ID"]), restart=int(environ.get("SLURM_RESTART_COUNT", 0)),
                     rank=int(environ.get("SLURM_PROCID", 0)), ntasks=int(environ.get("SLURM_NTASKS", 1)),
                     cpus=int(cpus) if cpus else None)

"""A local `--multirun` keeps `<sweep dir>/summary.json` as a Slurm sweep does, with the same writer
(src/record/sweep_summary.py): each job writes its own row when it starts ("pending") and when it
ends ("succeeded", or "failed" with its error), so the file says which jobs are done while the sweep
still runs and stays true when the sweep is stopped. Hydra's basic launcher runs the jobs one after
another in this process, so no two jobs write at once. A Slurm sweep's summary is its submitter's
(src/slurm/sweep.py): its jobs write none.
"""
from __future__ import annotations

from pathlib import Path

from src.record import sweep_summary

from .precheck import SLURM_LAUNCHER


def summary_path(hydra_cfg) -> Path | None:
    """Where this job's row goes: None for a single run, or a job of a Slurm sweep."""
    from hydra.types import RunMode

    if hydra_cfg.mode != RunMode.MULTIRUN or hydra_cfg.launcher.get("_target_") == SLURM_LAUNCHER:
        return None
    return Path(hydra_cfg.sweep.dir) / sweep_summary.SUMMARY_FILE


def record(hydra_cfg, log: Path, state: str, error: str | None = None) -> None:
    """This job's row (`log`: its training log, named once it exists)."""
    path = summary_path(hydra_cfg)
    if path is None:
        return
    run_dir = Path(hydra_cfg.runtime.output_dir)
    job = sweep_summary.SweepJob(idx=int(hydra_cfg.job.num), overrides=list(hydra_cfg.overrides.task),
                                 run_dir=str(run_dir), state=state, error=error,
                                 log=str(log) if log.is_file() else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_summary.write(path, [job])

"""A local `--multirun` keeps `<sweep dir>/summary.json` as a Slurm sweep does, with the same writer
(src/record/sweep_summary.py): each job writes its own row when it starts ("pending") and when it
ends ("succeeded", or "failed" with its error), so the file says which jobs are done while the sweep
still runs and stays true when the sweep is stopped. Hydra's basic launcher runs the jobs one after
another in this process, so no two jobs write at once; when Hydra returns, src/launch.py prints the
summary from those rows with the Slurm sweep's `sweep_summary.report` (`finish` here). A job that fails
is recorded and ends normally for Hydra (it would print the error a second time, with a stack-trace
hint); the summary names it. A Slurm sweep's summary is its submitter's (src/slurm/sweep.py): its jobs
write none.
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


# the dir of the local sweep this process runs (Hydra's basic launcher runs its jobs here): `finish` reports it
_sweep_dir: Path | None = None


def record(hydra_cfg, log: Path, state: str, error: str | None = None) -> None:
    """This job's row (`log`: its training log, named once it exists)."""
    global _sweep_dir
    path = summary_path(hydra_cfg)
    if path is None:
        return
    _sweep_dir = path.parent
    run_dir = Path(hydra_cfg.runtime.output_dir)
    job = sweep_summary.SweepJob(idx=int(hydra_cfg.job.num), overrides=list(hydra_cfg.overrides.task),
                                 run_dir=str(run_dir), state=state, error=error,
                                 log=str(log) if log.is_file() else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_summary.write(path, [job])


def finish() -> int:
    """The end of a local sweep in this process (src/launch.py, once Hydra returns): the summary as a Slurm sweep
    prints it, from the rows its jobs wrote (issue 51 finding 8: it ended without one, or the sweep dir's path);
    the exit code, 1 when a job failed. 0 and nothing printed after a single run or a Slurm sweep."""
    global _sweep_dir
    sweep_dir, _sweep_dir = _sweep_dir, None
    rows = sweep_summary.read(sweep_dir) if sweep_dir is not None else None
    if not rows:
        return 0
    jobs = [sweep_summary.SweepJob(idx=r["idx"], overrides=list(r.get("overrides") or []), run_dir=r.get("run_dir"),
                                   state=r.get("state") or sweep_summary.PENDING, error=r.get("error"),
                                   log=r.get("log")) for r in rows]
    try:
        sweep_summary.report(jobs, sweep_dir)
    except SystemExit as exc:  # a job failed: the summary said which
        return int(exc.code)
    return 0

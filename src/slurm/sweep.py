"""A sweep on Slurm: submit it, run each job from the submitted code, report every outcome.

The body of hydra_plugins/qe_rl/slurm_launcher.py (hydra-submitit-launcher 1.2.0's
SlurmLauncher, extended):

- at submission, the code and conf/ are copied into `<sweep dir>/code/` (src/record/code_snapshot.py)
  and every job starts there (sbatch --chdir) and composes its config from that copy;
- each job's resources come from its plan (src/slurm/request.py); jobs with equal requests share
  a job array, so a sweep over gpus= is one array per GPU count;
- the submitter waits for all jobs, prints each failed job with its overrides, error and log
  path as soon as it ends, then a summary of which jobs succeeded and which failed (also in
  `<sweep dir>/summary.json`: src/record/sweep_summary.py, the writer a local sweep shares), and
  exits 1 if any failed. A job whose run failed is a failure here even when Slurm says COMPLETED
  (the job caught the error and returned it);
- a requeued job (preemption, `scontrol requeue`, or submitit's resubmission before the time
  limit) runs the same pickled job again: same overrides, same timestamped sweep dir (Hydra's
  cached ${now:}), hence the same run dir, whose snapshot it reuses, and the same checkpoint dir.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Sequence

from src.record import sweep_summary
from src.record.sweep_summary import FAILED, PENDING, SUCCEEDED, SweepJob

POLL_S = 1.0


# ---------------------------------------------------------------------------------------
# submitter side
# ---------------------------------------------------------------------------------------
def _plan_jobs(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
               code_dir: Path) -> list[SweepJob]:
    from omegaconf import open_dict

    from src.config import to_plain
    from src.plan import build_plan

    from . import request

    launcher_cfg = dict(launcher.params)
    loader = launcher.hydra_context.config_loader
    jobs = []
    for offset, overrides in enumerate(job_overrides):
        idx = initial_job_idx + offset
        cfg = loader.load_sweep_config(launcher.config, list(overrides))
        with open_dict(cfg.hydra.job):
            cfg.hydra.job.num = idx
        try:
            run_dir = str(Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir))
        except Exception:  # a custom subdir using values only the job knows
            run_dir = None
        composed = to_plain(cfg)  # our config only, as the job's task function sees it
        plan = build_plan(composed, run_dir=run_dir or "<run dir>")
        params = request.executor_params(
            launcher_cfg, plan, bool((composed.get("debug") or {}).get("nodes_as_tasks")),
            list((composed.get("slurm") or {}).get("setup") or []), code_dir=str(code_dir))
        jobs.append(SweepJob(idx=idx, overrides=list(overrides), run_dir=run_dir, params=params,
                             dry=bool(composed.get("dry_run"))))
    return jobs


def left_alone(jobs: list[SweepJob]) -> None:
    """A resumed sweep (--resume-sweep, src/record/sweep_resume.py): a job that succeeded before keeps its
    row and is not submitted; one whose run dir is named differently now is not submitted either (it would
    not resume in its own), and says why. The others stay pending: they are submitted."""
    from hydra.core.utils import JobReturn, JobStatus

    from src.record import sweep_resume

    resumed = sweep_resume.current()
    if resumed is None:
        return
    for job in jobs:
        row = resumed.finished.get(job.idx)
        if row is not None:
            job.state, job.job_id = SUCCEEDED, row.get("job_id")
            job.log, job.run_dir = row.get("log"), row.get("run_dir")
            # Hydra's sweeper reads a return from every job of the sweep (basic_sweeper.py sweep: r.return_value)
            job.result = JobReturn(overrides=list(job.overrides), status=JobStatus.COMPLETED)
            print(f"[sweep] #{job.idx} succeeded before: left alone ({job.run_dir})", flush=True)
            continue
        moved = sweep_resume.own_run_dir_refusal(job.idx, job.run_dir)
        if moved:
            job.job_id, job.state, job.error = "(not submitted)", FAILED, moved
            print(f"[sweep] FAILED {job.label()}: {moved}", file=sys.stderr, flush=True)


def _dry_run_here(launcher, jobs: list[SweepJob], sweep_dir: Path) -> None:
    """dry_run=true: each job planned, validated and snapshotted here, as a dry run on the node would
    (issue 33: a dry run called sbatch); Slurm checked each request without a submission before."""
    from hydra.core.utils import JobStatus, run_job, setup_globals
    from omegaconf import open_dict

    from . import request

    groups: dict[str, list[SweepJob]] = {}
    for job in jobs:
        groups.setdefault(request.request_key(job.params), []).append(job)
    for group in groups.values():
        # the pre-launch check had Slurm test each distinct request (src/pipeline/precheck.py): a refused
        # one never gets here, it is bad input (one line, exit 2, no sweep dir)
        print(f"[sweep] dry run: Slurm would accept {request.request_text(group[0].params)} for "
              f"{len(group)} job(s); nothing submitted", flush=True)
        setup_globals()
        for job in group:
            cfg = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(job.overrides))
            with open_dict(cfg.hydra.job):
                cfg.hydra.job.id, cfg.hydra.job.num = f"dry_run_{job.idx}", job.idx
            ret = run_job(hydra_context=launcher.hydra_context, task_function=launcher.task_function, config=cfg,
                          job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
            job.job_id, job.result = "(dry run)", ret
            if ret.status == JobStatus.COMPLETED:
                job.state = SUCCEEDED
            else:
                err = ret._return_value
                job.state, job.error = FAILED, f"{type(err).__name__}: {err}"


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
    import submitit
    from hydra.core.singleton import Singleton

    from src.record import code_snapshot

    from . import request

    config = launcher.config
    sweep_dir = Path(str(config.hydra.sweep.dir))
    code_dir = code_snapshot.unique_dir(sweep_dir)
    everything = _plan_jobs(launcher, job_overrides, initial_job_idx, code_dir)
    left_alone(everything)
    jobs = [job for job in everything if not job.dry and job.state == PENDING]
    dry = [job for job in everything if job.dry and job.state == PENDING]
    if dry:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        _dry_run_here(launcher, dry, sweep_dir)
    if not jobs:
        return sweep_summary.report(everything, sweep_dir)

    sweep_dir.mkdir(parents=True, exist_ok=True)
    code_snapshot.write(code_dir)
    launcher.code_dir = str(code_dir)  # pickled with the launcher: the job checks it runs from here
    print(f"[sweep] code and config copied to {code_dir}; jobs run from there", flush=True)

    groups: dict[str, list[SweepJob]] = {}
    for job in jobs:
        groups.setdefault(request.request_key(job.params), []).append(job)
    submitted = []
    for group in groups.values():
        executor = submitit.AutoExecutor(folder=launcher.params["submitit_folder"], cluster="slurm",
                                         slurm_max_num_timeout=launcher.params.get("max_num_timeout", 0))
        executor.update_parameters(**group[0].params)
        args = [(job.overrides, "hydra.sweep.dir", job.idx, f"job_id_for_{job.idx}", Singleton.get_state())
                for job in group]
        try:
            array = executor.map_array(launcher, *zip(*args))
        except Exception as exc:  # sbatch refused (e.g. more GPUs than any node has): the others go on
            lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
            reason = next((l for l in lines if "error" in l.lower()), lines[-1] if lines else type(exc).__name__)
            for job in group:
                job.job_id, job.state, job.error = "(not submitted)", FAILED, request.refusal(reason, job.params)
                print(f"[sweep] FAILED {job.label()}: {job.error}", file=sys.stderr, flush=True)
            continue
        p = group[0].params
        for job, sjob in zip(group, array):
            job.job_id, job.log = sjob.job_id, str(sjob.paths.stdout)
            print(f"[sweep] submitted {job.label()}: {p.get('nodes', 1)} node(s) x {p.get('gpus_per_node')} GPUs, "
                  f"{p.get('cpus_per_task')} CPUs/task", flush=True)
            submitted.append((job, sjob))
    try:
        _wait(submitted)
    except KeyboardInterrupt:
        ids = " ".join(j.job_id for j, _ in submitted if j.state == PENDING)
        print(f"\n[sweep] interrupted: the jobs keep running on Slurm; to stop them: scancel {ids}", file=sys.stderr)
        raise
    return sweep_summary.report(everything, sweep_dir)


def _wait(submitted: list) -> None:
    pending = list(submitted)
    while pending:
        for item in list(pending):
            job, sjob = item
            if not sjob.done():
                continue
            pending.remove(item)
            _collect(job, sjob)
            if job.state == FAILED:
                print(f"[sweep] FAILED {job.label()}: {job.error}\n"
                      f"        log: {job.log}\n        run dir: {job.run_dir}", file=sys.stderr, flush=True)
            else:
                print(f"[sweep] done {job.label()}", flush=True)
        if pending:
            time.sleep(POLL_S)


def _collect(job: SweepJob, sjob) -> None:
    from hydra.core.utils import JobStatus

    try:
        results = sjob.results()  # one JobReturn per task (node)
    except Exception as exc:  # the job died or raised outside the run: submitit's error
        job.state, job.error = FAILED, submitit_error(exc, sjob)
        return
    job.result = results[0]
    bad = [(rank, r) for rank, r in enumerate(results) if r.status != JobStatus.COMPLETED]
    if bad:
        rank, r = bad[0]
        where = f"node {rank}: " if len(results) > 1 else ""
        err = r._return_value
        job.state, job.error = FAILED, f"{where}{type(err).__name__}: {err}"
    else:
        job.state = SUCCEEDED


def submitit_error(exc: Exception, sjob) -> str:
    """The line that says what went wrong, out of submitit's multi-line error."""
    text = str(exc)
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("---")]
    if "failed during processing" in text:
        # FailedJobError: the job raised outside our run; its traceback, then where the logs are
        end = next((i for i, l in enumerate(lines) if l.startswith("You can check full logs")), len(lines))
        return lines[end - 1] if end > 1 else text
    # UncompletedJobError and the like: the job died without a result (killed, OOM, node failure)
    try:
        state = sjob.get_info(mode="force").get("State", "?")
    except Exception:  # noqa: BLE001 - diagnostics only
        state = "?"
    tail = f"; last error line: {lines[-1]}" if len(lines) > 3 else ""
    return f"{type(exc).__name__}: {' '.join(lines[:2])} (Slurm state: {state}){tail}"


# ---------------------------------------------------------------------------------------
# job side
# ---------------------------------------------------------------------------------------
def run_job(launcher, sweep_overrides: list[str], job_dir_key: str, job_num: int, singleton_state: dict):
    """In the Slurm job: compose this job's config from the code snapshot's conf/ and run it."""
    import submitit
    from hydra.core.singleton import Singleton
    from hydra.core.utils import run_job as hydra_run_job
    from hydra.core.utils import setup_globals
    from hydra.types import HydraContext
    from omegaconf import open_dict

    import src

    Singleton.set_state(singleton_state)
    setup_globals()
    code_dir = Path(launcher.code_dir).resolve()
    imported = Path(src.__file__).resolve().parent.parent
    if imported != code_dir:
        raise RuntimeError(f"this job imported the code from {imported}, not from its code snapshot {code_dir} "
                           f"(the job must start there: sbatch --chdir)")
    from src.config import hydra_internal, register

    register()
    # The config loader pickled at submission reads the checkout's conf/; compose from the copy.
    loader = hydra_internal.config_loader(str(code_dir / "conf"))
    launcher.hydra_context = HydraContext(config_loader=loader, callbacks=launcher.hydra_context.callbacks)
    sweep_config = loader.load_sweep_config(launcher.config, list(sweep_overrides))
    with open_dict(sweep_config.hydra.job) as job:
        job.id = submitit.JobEnvironment().job_id
        sweep_config.hydra.job.num = job_num
    return hydra_run_job(hydra_context=launcher.hydra_context, task_function=launcher.task_function,
                         config=sweep_config, job_dir_key=job_dir_key, job_subdir_key="hydra.sweep.subdir")

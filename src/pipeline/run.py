"""One run, in the order data flows: plan -> verl config (validated by verl) -> identity -> preflight
-> snapshot -> the node's processes (scorer, Ray, training). Or, on nodes 1..K-1 of a multi-node
Slurm job, that node's scorer and Ray worker. Every refusal is one line, before anything is written.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import shutil
import socket
import sys
from pathlib import Path

from omegaconf import OmegaConf

from src import config, verl_config
from src.data.checks import DataFileError
from src.node import console, environment, leftovers, preflight, ray_cluster, scorer_service, startup, training
from src.plan import PlanError, RunPlan, build_plan, with_train_rows, with_trains
from src.plan.table import render as render_plan
from src.plan.inputs import run_inputs
from src.record import attempts, fingerprint, identity, snapshot, sweep_resume
from src.record.sweep_summary import FAILED, PENDING, SUCCEEDED
from src.slurm import requeue
from src.slurm.task import slurm_task
from src.verl_config import checks as verl_checks
from src.verl_config import user_keys

from . import learning, local_sweep, smoke, tiny_build
from .errors import INTERRUPTED_EXIT, STALLED_EXIT, USAGE_EXIT, RunError, UsageError, verl_reason
from .lineage import Lineage, identify, lineage_line, verl_config_for
from .preset import moved_geometry_note
from .precheck import (SLURM_LAUNCHER, check_data_files, debug, detected_gpu_memory, input_notes, not_writable,
                       outside_multi_node_job)

TRAIN_LOG = "train.log"  # the training command's output, in the run dir


def execute(composed: dict, overrides: list[str], run_dir: Path, environ: dict | None = None,
            lineage: Lineage | None = None) -> int:
    """`run`, with its RunError printed as one line; returns the exit code."""
    try:
        run(composed, overrides, run_dir, environ, lineage)
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    return 0


def run(composed: dict, overrides: list[str], run_dir: Path, environ: dict | None = None,
        lineage: Lineage | None = None) -> None:
    """One run (or, in a multi-node Slurm job, this node's part of it). Raises RunError.
    `lineage`: how a --from-snapshot run relates to the run it came from (None: a new run)."""
    environ = dict(os.environ if environ is None else environ)
    dry = bool(composed["dry_run"])
    clock = startup.StartupClock()  # from this process's start: the launch's start-up phases (timings.json)
    # the device variables a scheduler exported, made what verl's workers accept, before anything counts GPUs
    environ, device_notes = environment.device_environ(composed["accelerator"]["device"], environ)
    for note in device_notes:
        print(f"note: {note}")
    try:
        plan = build_plan(composed, run_dir=str(run_dir), gpu_memory_gb=detected_gpu_memory(composed, environ))
        task = slurm_task(environ)
        refusal = outside_multi_node_job(plan, dry, task)
        if refusal:
            raise UsageError(refusal)
    except (PlanError, UsageError) as exc:
        _remove_if_empty(run_dir)
        raise RunError(str(exc), USAGE_EXIT) from None
    if task is None or plan.nodes == 1:
        _run_node0(composed, overrides, run_dir, environ, plan, task, lineage, clock)
    elif task.rank > 0:
        # nodes 1..K-1 of a multi-node job: no snapshot, no verl; a Ray worker (and scorer) only
        if not dry:
            _worker_node(composed, plan, task, run_dir, environ)
    elif dry:
        _run_node0(composed, overrides, run_dir, environ, plan, task, lineage, clock)
    else:
        try:
            _run_node0(composed, overrides, run_dir, environ, plan, task, lineage, clock)
        finally:
            # the other nodes wait for node 0's Ray head: however this ends, let them go
            ray_cluster.release_workers(run_dir, task)


def _run_node0(composed: dict, overrides: list[str], run_dir: Path, environ: dict, plan: RunPlan, task,
               lineage: Lineage | None = None, clock: startup.StartupClock | None = None) -> None:
    """The run itself (node 0 of a multi-node job): verl config, identity, preflight, snapshot, training."""
    dry = bool(composed["dry_run"])
    try:
        try:
            # a `+verl.` key verl's tree lacks would be added silently (src/verl_config/user_keys.py)
            user_keys.check_user_keys(plan)
        except verl_checks.VerlValueError as exc:
            raise UsageError(str(exc)) from None
        refused = learning.refusal(composed)  # experiment=learn_tiny: a verdict it could read
        if refused:
            raise UsageError(refused)
        try:
            # a --from-snapshot run replays the snapshot's own (src/pipeline/replay.py)
            verl_cfg = verl_config_for(plan, composed, lineage)
        except Exception as exc:  # verl's own validation said no
            raise UsageError(f"verl rejected the config: {verl_reason(exc, overrides)}") from None
        plan, verl_cfg, ident = identify(plan, composed, overrides, verl_cfg, lineage)
        # what verl trains, read from the config it runs (the plan table and plan.json show it)
        plan = with_trains(plan, composed, OmegaConf.to_container(verl_cfg, resolve=True))
        # a dir holds one run: refused before anything is written (dry runs too; they write nothing)
        refusal = identity.check_dir(Path(verl_cfg.trainer.default_local_dir), ident, plan.run_id)
        if refusal:
            raise UsageError(refusal)
        # online wandb without a login fails at verl's wandb.init, minutes after Ray, the workers and vLLM started
        wandb_refusal = preflight.wandb_login_refusal(plan, environ)
        if wandb_refusal and not dry:
            raise UsageError(wandb_refusal)
        if not dry:
            # this node's GPUs and CPUs first: a node that cannot run it learns so before anything is built
            preflight.check_node(plan, environ)
            # experiment=smoke_tiny / learn_tiny: the tiny models and prompts, built once, before anything reads them
            tiny_build.prepare(plan, composed, environ)
        # a dry run notes each model, data or QE file a real launch would not find (issue 51); dry runs
        # too: the val/train rows' split tags decide which reward they get (the splits
        # as the reward function receives them; absent only in snapshots older than the key)
        checked: dict = {}  # {(file, template): rows}: the train file's rows give the plan its step count
        data_notes = ((input_notes(plan, composed) if dry else []) + check_data_files(plan, composed, checked)
                      + ([f"{wandb_refusal} (a real launch is refused)"] if wandb_refusal else []))
        plan = with_train_rows(plan, checked.get((plan.train_files, (composed.get("data") or {}).get("template"))))
        splits = OmegaConf.select(verl_cfg, "reward.custom_reward_function.reward_kwargs.validation_splits")
        if splits is not None:
            preflight.check_data_splits(plan, splits)
        command = train_command(composed, run_dir)
        if not dry:  # the node itself was checked above, before anything was built
            preflight.check_files(plan, scorer=_scorer_enabled(composed), environ=environ)
        # a read-only or full disk is found before the first file is written, not after the snapshot
        for path, what, key in ((run_dir, "the run dir", "paths.output_dir"),
                                *(() if dry else ((Path(plan.checkpoint_dir), "the checkpoint dir", "paths.results_root"),))):
            refusal = not_writable(path, what, key)
            if refusal:
                raise UsageError(refusal)
        verl_yaml = verl_config.to_yaml(verl_cfg)
        snap = snapshot.reuse(run_dir, verl_yaml)
        written = snap is None
        if snap is not None:
            print(f"run dir {run_dir} already holds this run's snapshot (a requeued or resumed job): reusing it")
        else:
            try:
                snap = snapshot.write(
                    run_dir, composed=composed, overrides=overrides, plan=plan.to_dict(), verl_yaml=verl_yaml,
                    command=command, scorer_python=composed["scorer"]["python"], environ=environ,
                    # what the files it reads look like now: a --from-snapshot re-run compares them
                    inputs=fingerprint.record((i.what, i.path, i.built) for i in run_inputs(
                        plan, composed["model"].get("build_dir"), scorer=_scorer_enabled(composed))))
            except OSError as exc:  # the disk filled up meanwhile: snapshot.write left no part of it
                raise UsageError(f"cannot write the snapshot in {run_dir} ({exc.strerror or exc}); free space "
                                 f"there or set paths.output_dir= elsewhere") from None
    except (PlanError, preflight.PreflightError, UsageError, snapshot.SnapshotMismatch, DataFileError) as exc:
        _remove_if_empty(run_dir)
        raise RunError(str(exc), USAGE_EXIT) from None
    render_plan(plan, command, str(snap / "verl_config.yaml"), lineage=lineage_line(plan, lineage),
                wandb_mode=preflight.wandb_mode(plan, environ))
    clock = clock or startup.StartupClock()
    clock.mark("plan")
    moved = moved_geometry_note(plan, overrides) if lineage is None else None
    if moved:
        print(f"note: {moved}")
    for note in data_notes:
        print(f"note: {note}")
    if dry:
        print(f"dry run: nothing started; snapshot in {snap}; nothing written to {plan.checkpoint_dir}")
        return
    try:
        # a save a kill cut short is never resumed from, and is saved again whole; an unreadable tracker
        # stops the launch here, before anything is written (src/trainer/checkpoints.py)
        for line in training.discard_partial_checkpoints(verl_cfg.trainer.default_local_dir):
            print(line, flush=True)
        identity.record(Path(verl_cfg.trainer.default_local_dir), ident, plan.run_id, plan.reproduces,
                        None if plan.differs_from_preset is None else list(plan.differs_from_preset))
        _record_attempt(run_dir, task, command)
        # training starts now: a time-limit request an earlier attempt left in the checkpoint dir is
        # not this launch's (src/trainer/time_limit.py, "Whose request")
        training.clear_time_limit_flags(verl_cfg.trainer.default_local_dir)
        if plan.wandb_dir:
            # wandb writes into the checkpoint dir (WANDB_DIR, src/node/environment.py); the run dir links to it,
            # so `wandb sync <sweep dir>/*/wandb` finds every run of a sweep, every attempt of each
            Path(plan.wandb_dir).mkdir(parents=True, exist_ok=True)
            if not (run_dir / "wandb").is_symlink():
                (run_dir / "wandb").symlink_to(plan.wandb_dir, target_is_directory=True)
    except training.CheckpointError as exc:
        if written:
            shutil.rmtree(snap, ignore_errors=True)
            _remove_if_empty(run_dir)
        raise RunError(str(exc), USAGE_EXIT) from None
    except OSError as exc:
        # nothing started: take back this launch's snapshot so no run dir holds a run that never ran
        if written:
            shutil.rmtree(snap, ignore_errors=True)
            _remove_if_empty(run_dir)
        raise RunError(f"cannot write the run's records ({exc.strerror or exc}: {getattr(exc, 'filename', '')}); "
                       f"nothing started; free space or set paths.output_dir / paths.results_root", USAGE_EXIT) from None
    if debug(composed).get("train_command_override"):
        print(f"WARNING: debug.train_command_override is set: running {shlex.join(command)} instead of verl",
              file=sys.stderr)
    env, scorer_devices = environment.run_env(plan, environ)
    rank = task.rank if task is not None else 0
    # the scorer first: its URL and token are in the env of everything started after it (this
    # node's Ray head, verl and its reward workers)
    stop = training.TrainingStop()
    clock.write_to(run_dir)

    def services(launch_clock: startup.StartupClock) -> list:
        """The node's services around one launch of training, each marked on that launch's clock."""
        started = [lambda e: scorer_service.scorer(plan, rank, run_dir, e, scorer_devices, on_fatal=stop,
                                                   enabled=_scorer_enabled(composed),
                                                   on_ready=lambda: launch_clock.mark("scorer_healthy"))]
        if plan.nodes > 1:
            # Ray gets the CPUs Slurm granted this task and the training GPUs (not the scorer's)
            started.append(lambda e: ray_cluster.head(task, plan.nodes, task.cpus or plan.node_cpus, plan.gpus_per_node,
                                                      run_dir, e, python=plan.trainer_python))
        return started

    def relaunch(e: dict, l: Path) -> int:
        """The smoke's second launch (its resume): its own clock, from now."""
        again = startup.relaunch(run_dir)
        return training.run(command, env=e, log_path=l, services=services(again), stop=stop, clock=again,
                            console=console.for_run(run_dir.name, bool(composed.get("verbose"))))

    log = run_dir / TRAIN_LOG
    # in a Slurm job: the time-limit signal has the step in progress saved, then the job requeued
    watch = (training.TimeLimitWatch(plan.checkpoint_dir, plan.time_limit.stop_by_s)
             if task is not None and plan.time_limit is not None else None)
    # outside Slurm, a SIGTERM to the launcher (a preemption) saves the step in progress too (PreemptionWatch says
    # why not under Slurm)
    preempt = (training.PreemptionWatch(plan.checkpoint_dir, plan.preempt_grace_s)
               if task is None and plan.preempt_grace_s else None)
    # a run whose steps stop ending is stopped, its stacks in the run dir (src/node/stall.py)
    stall = training.StallWatch(plan.stall, run_dir) if plan.stall is not None else None
    # a training process that dies stops the run in seconds, named (src/node/deaths.py)
    death = training.DeathWatch(plan.checkpoint_dir)
    try:
        code = training.run(command, env=env, log_path=log, services=services(clock), stop=stop, watch=watch,
                            clock=clock, console=console.for_run(run_dir.name, bool(composed.get("verbose"))),
                            preempt=preempt, stall=stall, death=death)
    except (training.Stalled, training.Died) as exc:
        _requeue_after_fault(str(exc), STALLED_EXIT if isinstance(exc, training.Stalled) else 1, plan, task, environ,
                             log)
    except (ray_cluster.RayBootstrapError, scorer_service.ScorerError, training.ServiceFailure) as exc:
        raise RunError(str(exc)) from None
    if smoke.requested(composed):  # experiment=smoke: check each stage, prove resume, print the verdict
        smoke.check(plan, run_dir, code, env, relaunch)
    if code != 0:
        raise RunError(failed_command(code, log), code)
    if learning.requested(composed):  # experiment=learn_tiny: did the trained and held-out metrics rise?
        learning.check(composed, run_dir, Path(env["VERL_FILE_LOGGER_PATH"]))


def _worker_node(composed: dict, plan: RunPlan, task, run_dir: Path, environ: dict) -> None:
    """Nodes 1..K-1: this node's scorer and Ray worker, for as long as node 0 runs."""
    try:
        try:
            preflight.run(plan, environ, scorer=_scorer_enabled(composed))
        except preflight.PreflightError as exc:
            raise RunError(f"node {task.rank}: {exc}", USAGE_EXIT) from None
        env, scorer_devices = environment.run_env(plan, environ)
        # a scorer that dies for good ends this node's Ray worker; verl on node 0 then fails
        failures: list[str] = []
        try:
            # the time-limit signal reaches this node's processes too: they must not die of it
            with training.SigtermAsInterrupt(), training.TimeLimitSignalBlocked(), \
                    scorer_service.scorer(plan, task.rank, run_dir, env, scorer_devices, on_fatal=failures.append,
                                          enabled=_scorer_enabled(composed)) as extra:
                env.update(extra)
                # what this node's vLLM and verl workers leave behind (their queues in /dev/shm, 160-250 MB
                # each): node 0 removes its own after training, this node after its Ray worker stopped
                left = leftovers.Leftovers()
                try:
                    ray_cluster.run_worker(task, task.cpus or plan.node_cpus, plan.gpus_per_node, run_dir, env,
                                           abort=lambda: failures[0] if failures else None,
                                           python=plan.trainer_python)
                finally:
                    removed = left.remove()
                    if removed:
                        print(f"node {task.rank}: removed {len(removed)} files verl/vLLM left behind "
                              f"(src/node/leftovers.py): {', '.join(removed[:5])}", flush=True)
        except (ray_cluster.RayBootstrapError, scorer_service.ScorerError) as exc:
            raise RunError(str(exc)) from None
    except RunError as exc:
        # node 0 waits for this node to join its Ray cluster: tell it not to
        ray_cluster.worker_failed(run_dir, task, str(exc))
        raise


def train_command(composed: dict, run_dir: Path) -> list[str]:
    """verl's command, or the debug stand-in that replaces it (tests)."""
    override = debug(composed).get("train_command_override")
    if override:
        return shlex.split(override)
    # accelerator.python: the loop env on CPU (conf/accelerator/cpu.yaml); else the launcher's own env
    python = composed["accelerator"].get("python") or sys.executable
    return training.verl_command(python, run_dir / snapshot.SNAPSHOT, run_dir)


def _scorer_enabled(composed: dict) -> bool:
    return not debug(composed).get("skip_scorer")


def _remove_if_empty(run_dir: Path) -> None:
    if run_dir.is_dir() and not any(run_dir.iterdir()):
        run_dir.rmdir()


# a Python exception's last line (`wandb.errors.errors.UsageError: No API key configured`), also as Ray prints
# it from a worker (`(TaskRunner pid=12) ValueError: ...`, `ray.exceptions.RayTaskError(ValueError): ...`)
_EXCEPTION = re.compile(r"^(?:\([^()]*\)\s+)?(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)"
                        r"(?:\([\w.]*\))?)(?::\s*(.*))?$")


def failed_command(code: int, log: Path) -> str:
    """The `error:` line of a training command that exited with `code`: the exception that ended it (the
    last exception line of its log: what follows it is shutdown and the launcher's cleanup, e.g. `removed N
    files ...`), or the log's last line where it raised none."""
    try:
        lines = [l.strip() for l in log.read_text(encoding="utf-8", errors="replace").splitlines() if l.strip()]
    except OSError:
        lines = []
    # only a traceback's exception: a line of verl's or vLLM's own log that names an error it handled is not one
    first = next((i for i, l in enumerate(lines) if l.endswith("Traceback (most recent call last):")), len(lines))
    for line in reversed(lines[first:]):
        match = _EXCEPTION.match(line)
        if match:
            name, message = match.group(1), (match.group(2) or "").strip()
            ended = f"{name}: {message}" if message else name
            return f"training command exited with code {code} ({ended[:300]}); log: {log}"
    return f"training command exited with code {code}; log: {log}" + (f" (last line: {lines[-1][:300]})" if lines else "")


def _requeue_after_fault(line: str, code: int, plan: RunPlan, task, environ: dict, log: Path) -> None:
    """A stalled run, or one whose training process died: in a Slurm job, requeued while slurm.max_stall_requeues
    allows (src/slurm/requeue.py), then the job process exits without a result (submitit then writes none, as after
    its own time-limit requeue: the requeued job runs the same submission again). Else, or past the bound, the run
    fails with the fault's line. Never returns."""
    if task is not None and task.rank == 0 and plan.time_limit is not None:
        requeued, said = requeue.after_fault(line, plan.checkpoint_dir, plan.time_limit.max_stall_requeues, environ)
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{line}; {said}\n")
        if requeued:
            print(f"{line}; {said}", file=sys.stderr, flush=True)
            raise SystemExit(code)
        line = f"{line}; {said}"
    raise RunError(line, code)


def _record_attempt(run_dir: Path, task, command: list[str]) -> None:
    """One line per start in <run dir>/attempts.jsonl: a requeued job shows as a second line."""
    entry = {"started": dt.datetime.now().isoformat(timespec="seconds"), "host": socket.gethostname(),
             "slurm_job_id": task.job_id if task else None, "slurm_restart": task.restart if task else None,
             "command": command}
    attempts.record(run_dir, entry)


def hydra_task(cfg) -> None:
    """The task function of the Hydra app (src/launch.py): one job of a run or a sweep, locally or in
    a Slurm job (submitit pickles it by reference to this module)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    config.register()
    hc = HydraConfig.get()
    composed = config.to_plain(cfg)
    environ = dict(os.environ)
    if hc.mode == RunMode.MULTIRUN:
        # the sweep's dir names it (timestamped once per sweep; a requeued job keeps it)
        environ.setdefault("QE_RL_SWEEP", "sweep-" + Path(hc.sweep.dir).name)
    if hc.launcher.get("_target_") == SLURM_LAUNCHER and composed["dry_run"]:
        # a Slurm sweep's dry run runs here, in the submitter: with the wandb mode its job would get
        # (conf/hydra/launcher/slurm.yaml exports it), so the plan's notes say what the job would meet
        environ["WANDB_MODE"] = str(composed["slurm"]["wandb_mode"])
    log = Path(hc.runtime.output_dir) / TRAIN_LOG
    if local_sweep.summary_path(hc) is not None:
        # a local sweep resumed with --resume-sweep (src/pipeline/resume_sweep.py): a job that succeeded stays as it is
        skipped = sweep_resume.left_alone(int(hc.job.num), Path(hc.runtime.output_dir))
        if skipped:
            print(skipped, flush=True)
            return
        moved = sweep_resume.own_run_dir_refusal(int(hc.job.num), hc.runtime.output_dir)
        if moved:
            print(f"error: {moved}", file=sys.stderr)
            local_sweep.record(hc, log, FAILED, moved)
            raise RunError(moved, USAGE_EXIT)
    # a local sweep's summary.json, row by row (a Slurm sweep's is its submitter's)
    local_sweep.record(hc, log, PENDING)
    try:
        run(composed, list(hc.overrides.task), Path(hc.runtime.output_dir), environ)
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        local_sweep.record(hc, log, FAILED, str(exc))
        if local_sweep.summary_path(hc) is not None:
            return  # a local sweep goes on; its summary names this job (local_sweep.finish)
        if hc.mode == RunMode.MULTIRUN:
            raise  # a Slurm job: failed, for its submitter's summary with its overrides and log
        sys.exit(exc.code)
    except KeyboardInterrupt as exc:
        # Ctrl-C, or Slurm's SIGTERM (preemption, requeue, scancel; src/node/training.py): training and
        # services are stopped. No result is written, so a requeued job simply runs again.
        # an interrupt with no reason of its own (Ctrl-C) reads as one; str(), since the exception itself is truthy
        why = str(exc) or "interrupt"
        print(f"stopped ({why}): a requeued or resumed run continues from the last checkpoint "
              f"in the checkpoint dir", file=sys.stderr)
        local_sweep.record(hc, log, FAILED, f"stopped ({why})")
        sys.exit(INTERRUPTED_EXIT)
    except Exception as exc:  # a bug, not a refusal: recorded, then Hydra shows it as ever
        local_sweep.record(hc, log, FAILED, f"{type(exc).__name__}: {exc}")
        raise
    local_sweep.record(hc, log, SUCCEEDED)

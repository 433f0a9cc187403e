"""The pre-launch check: every job of the command composed and planned before Hydra acts.

Bad input (unknown option, gpus=0, a batch pin that breaks a verl rule, a bad value in a sweep
file, hydra/launcher=slurm without Slurm) is refused with one line before Hydra makes a run dir or
a launcher submits: each combination of a sweep (command-line sweeps and a +sweep=<name> config's
hydra.sweeper.params) is composed and planned, with its Slurm request when hydra/launcher=slurm,
which Slurm itself checks (`sbatch --test-only`, one call per distinct request).
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from src import config
from src.config import override_grammar
from src.config.compose import added_key_refusal
from src.data import checks as data_checks
from src.config.schema import Placement
from src.node import input_files, preflight, scorer_service
from src.plan import PlanError, RunPlan, build_plan
from src.plan.batch import batch_for_rows
from src.plan.schedule import Schedule, steps_beyond_data
from src.plan.inputs import Input, run_inputs
from src.slurm import request as slurm_request
from src.slurm.task import SlurmTask, slurm_task
from src.verl_config import checks as verl_checks
from src.verl_config import user_keys

from .errors import UsageError

SLURM_LAUNCHER = "hydra_plugins.qe_rl.slurm_launcher.QeRlSlurmLauncher"


@dataclass(frozen=True)
class Checked:
    """What the pre-launch check found: the number of jobs, `hydra.mode` as the config sets it (None
    unless a config or override sets it: Hydra then runs one job, or a sweep with --multirun), and a single
    run's dir as conf/config.yaml names it (None for a sweep, or where the command sets hydra.run.dir itself):
    the launcher claims it (src/pipeline/run_dirs.py) and hands it to Hydra."""
    jobs: int
    hydra_mode: Any
    run_dir: str | None = None


def precheck(overrides: list[str], multirun: bool, environ: dict | None = None, ask_slurm: bool = True,
             quiet: bool = False, look_for_inputs: bool = True) -> int:
    """The number of jobs `check_launch` checked (raises as it does)."""
    return check_launch(overrides, multirun, environ, ask_slurm, quiet, look_for_inputs).jobs


def check_launch(overrides: list[str], multirun: bool, environ: dict | None = None, ask_slurm: bool = True,
                 quiet: bool = False, look_for_inputs: bool = True) -> Checked:
    """Compose and plan every combination (and its Slurm request when hydra/launcher=slurm, which
    Slurm itself checks with `sbatch --test-only` unless ask_slurm=False, after the files the jobs
    read were found on this machine unless look_for_inputs=False); raise UsageError on the first bad
    one. Prints a `note:` for each input a Slurm job reads that this machine cannot check (unless quiet)."""
    environ = dict(os.environ if environ is None else environ)
    try:
        refusal = added_key_refusal(overrides)
        if refusal:
            raise UsageError(refusal)
        fixed = config.fixed_overrides(overrides)
        base = config.compose(fixed, with_hydra=True)
        params = base.hydra.sweeper.get("params")
        sweeper_params = OmegaConf.to_container(params, resolve=True) if params is not None else {}
        launcher = OmegaConf.to_container(base.hydra.launcher, resolve=True)
        on_slurm = launcher.get("_target_") == SLURM_LAUNCHER
        if on_slurm and not multirun:
            raise UsageError("hydra/launcher=slurm submits only with --multirun (a single run is a sweep of one: "
                             "add --multirun)")
        combos = config.sweep_jobs(overrides, multirun, sweeper_params)
        # where Hydra makes the run (or sweep) dir before the run starts: a read-only or full
        # output dir would fail there with a traceback, or after a half-written run dir
        out_dir = OmegaConf.select(base, "hydra.sweep.dir" if multirun else "hydra.run.dir")
        refusal = not_writable(Path(str(out_dir)), "the run dir", "paths.output_dir")
        if refusal:
            raise UsageError(refusal)
        # `base` already holds the job config of a combination made of the fixed overrides alone
        # (a single run): not composing it again saves a third of a cached dry run
        fixed_job = [o for o in fixed if not config.is_hydra_override(o)]
        checked: dict = {}  # data files already checked (a sweep's jobs share them)
        inputs: dict = {}  # the files each job reads, checked once all jobs planned (a sweep's jobs share them)
        requests: dict[str, dict] = {}  # each distinct Slurm request, as the sweep submits it
        externals: dict = {}  # (url, models) -> (the scorer plan, whether every job using it is a dry run)
        for combo in combos:
            job = [o for o in combo if not config.is_hydra_override(o)]
            composed = config.to_plain(base) if job == fixed_job else config.compose_config(job)
            plan = build_plan(composed, run_dir="<run dir>", gpu_memory_gb=detected_gpu_memory(composed, environ))
            user_keys.check_user_keys(plan)
            check_data_files(plan, composed, checked)
            if not composed["dry_run"]:  # a dry run writes nothing into the checkpoint dir
                refusal = not_writable(Path(plan.checkpoint_dir), "the checkpoint dir", "paths.results_root")
                if refusal:
                    raise UsageError(refusal)
                # a Slurm job logs to wandb in the mode its sbatch script exports (slurm.wandb_mode); a dry
                # run says it in a note (src/pipeline/run.py)
                job_env = {**environ, "WANDB_MODE": str(composed["slurm"]["wandb_mode"])} if on_slurm else environ
                refusal = preflight.wandb_login_refusal(plan, job_env)
                if refusal:
                    raise UsageError(refusal)
            refusal = None if on_slurm else outside_multi_node_job(plan, composed["dry_run"], slurm_task(environ))
            if refusal:
                raise UsageError(refusal)
            if on_slurm:
                slurm_request.check(launcher, composed, environ)
                params = slurm_request.executor_params(
                    launcher, plan, bool(debug(composed).get("nodes_as_tasks")),
                    list((composed.get("slurm") or {}).get("setup") or []), code_dir=str(Path(str(out_dir)) / "code"))
                requests.setdefault(slurm_request.request_key(params), params)
                inputs.update(dict.fromkeys(job_inputs(plan, composed)))
            if external_scorer(plan, composed):
                key = (plan.scorer.url, plan.scorer.models)
                externals[key] = (plan.scorer, externals.get(key, (None, True))[1] and bool(composed["dry_run"]))
        for s, dry in externals.values() if look_for_inputs else ():  # once per service a sweep's jobs share
            problem = scorer_service.external_problem(s, environ)
            if problem and not dry:
                raise UsageError(problem)
            if problem and not quiet:
                print(f"note: {problem} (a real launch is refused)")
        for note in slurm_inputs_notes(inputs) if look_for_inputs else ():  # raises on one this machine sees missing
            if not quiet:
                print(f"note: {note}")
        if on_slurm and shutil.which("sbatch") is None:
            raise UsageError("hydra/launcher=slurm needs Slurm (no sbatch on PATH); on a workstation, start the "
                             "dev cluster first: see slurm/README.md")
        # a request no node of the partition can meet (more nodes, GPUs or CPUs than it has) is bad input
        # like any other: refused here, before a sweep dir exists, not reported as a failed job after
        for params in requests.values() if ask_slurm else ():
            reason = slurm_request.test_only(params)
            if reason is not None:
                raise UsageError(slurm_request.refusal(reason, params))
    except (PlanError, slurm_request.RequestError, config.SweepError, verl_checks.VerlValueError,
            data_checks.DataFileError) as exc:
        raise UsageError(str(exc)) from None
    except UsageError:
        raise
    except Exception as exc:  # Hydra's composition, schema and override-grammar errors
        raise UsageError(_explained(exc, overrides, multirun, environ)) from None
    from hydra.types import RunMode

    single = not multirun and base.hydra.mode in (None, RunMode.RUN)
    own_dir = any(o.lstrip("+~").split("=", 1)[0] == "hydra.run.dir" for o in overrides)
    return Checked(len(combos), base.hydra.mode, str(out_dir) if single and not own_dir else None)


def _explained(exc: BaseException, overrides: list[str], multirun: bool, environ: dict) -> str:
    """Hydra's error on one line, with what to do where Hydra's own text does not say it."""
    line = config.one_line(exc)
    # an override Hydra's lexer refuses (`paths.data_root=/data/数据`): the quoted form
    quoted = override_grammar.hint(overrides)
    if quoted:
        return f"{line} (Hydra's override grammar refuses it); {quoted}"
    # `rewad=comet`: Hydra suggests `+rewad=comet`, which would add a key nothing reads
    added = re.search(r"To append to your config use \+(\S+)", line)
    if added:
        better = added_key_refusal(["+" + added.group(1)])
        if better:
            return better.replace("+" + added.group(1), added.group(1), 1).replace(
                "): it would add a key nothing reads", ") nor a key of the config", 1).replace(
                ", so it would add a key nothing reads", "", 1)
    # `reward.weights.komet=1`: the `+` form is checked (the reward's component names); its refusal of the
    # name ('komet', with the nearest one) is the line, not Hydra's advice to add the misspelt name
    retry = config.plus_form(line, overrides)
    if retry:
        key, plus = retry
        try:
            precheck(plus, multirun, environ, quiet=True)
        except UsageError as refused:
            if repr(key.rsplit(".", 1)[-1]) in str(refused):
                return str(refused)
    return line


def not_writable(path: Path, what: str, key: str) -> str | None:
    """Why `path` cannot be created and written, or None. Probed for real in its nearest existing
    ancestor (a file written and removed: os.access says yes to root on a full disk), so nothing
    is left behind; dirs are not created here."""
    import errno
    import tempfile

    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{what} {path} cannot be made: {ancestor} is not a directory; set {key}= to a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".qe-rl-write-probe-", dir=ancestor)
        try:
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        why = exc.strerror or errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        fix = ("free space there or set {key}= elsewhere" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
               else "set {key}= to a dir you can write").format(key=key)
        return f"{what} {path} cannot be written ({why} in {ancestor}); {fix}"
    return None


def check_data_files(plan: RunPlan, composed: dict, checked: dict | None = None) -> list[str]:
    """data.template is a template, and the train/val parquet files, where they exist, are what
    src.data.prepare writes (columns, at least one row, that template): otherwise the run would
    fail at the first reward call on the GPU node. A missing file is preflight's business (a dry
    run plans data not prepared yet). Train data with fewer prompts than one step is refused for a
    real launch (issue 33: verl drops an incomplete batch, so it would train 0 steps). DataFileError.
    Returns what a dry run's plan says instead: each line a real launch of it would be refused for.
    `checked`: {(path, template): rows} of files already read (a sweep's jobs share them)."""
    checked = {} if checked is None else checked
    template = (composed.get("data") or {}).get("template")
    data_checks.check_template(template)
    for what, path, split in (("train data", plan.train_files, "train"), ("val data", plan.val_files, "val")):
        if (path, template) not in checked and Path(path).is_file():
            checked[(path, template)] = data_checks.check_prepared(path, what, template, split)
    dry = bool(composed.get("dry_run"))
    rows = checked.get((plan.train_files, template))
    if rows is None:  # not there (yet): the inputs' check says so (input_notes, slurm_inputs_notes)
        return []
    if rows < plan.batch.prompts_per_step:
        # a step the data fills, as the plan derives it (the step rounds up to the mini batch: both keys)
        fits = batch_for_rows(composed, plan.gpus_per_node, plan.world_size, rows)
        fix = (f"prepare more rows, or set batch.prompts_per_step={fits[0]} batch.mini_batch_prompts={fits[1]}"
               if fits else f"prepare at least {plan.batch.prompts_per_step} rows")
        short = (f"train data {plan.train_files} has {rows} prompts, fewer than one step's {plan.batch.prompts_per_step} "
                 f"(data.train_batch_size for G={plan.world_size}): verl drops an incomplete batch, so the run "
                 f"would train 0 steps; {fix}")
        if not dry:
            raise data_checks.DataFileError(short)
        return [f"{short} (a real launch is refused)"]
    beyond = steps_beyond_data(replace(_schedule(plan, composed), train_rows=rows))
    if beyond:
        if not dry:
            raise data_checks.DataFileError(beyond)
        return [f"{beyond} (a real launch is refused)"]
    return []


def _schedule(plan: RunPlan, composed: dict) -> Schedule:
    """The run's schedule: read from its verl config once that exists (src/plan/run_plan.py with_trains), before it
    (the pre-launch check of every job) from the keys the launcher sets it from."""
    if plan.schedule is not None:
        return plan.schedule
    trainer = composed["trainer"]
    return Schedule(epochs=int(trainer["total_epochs"]), max_steps=trainer.get("total_training_steps"),
                    save_freq=int(trainer["save_freq"]), test_freq=int(trainer["test_freq"]),
                    val_before_train=bool(trainer["val_before_train"]), prompts_per_step=plan.batch.prompts_per_step,
                    dynamic_sampling=False)


def job_inputs(plan: RunPlan, composed: dict) -> list[tuple[Input, tuple[str, ...]]]:
    """The files a job reads (src/plan/inputs.py), each with the job's slurm.node_local_dirs."""
    node_local = tuple(str(d) for d in (composed.get("slurm") or {}).get("node_local_dirs") or ())
    build_dir = (composed.get("model") or {}).get("build_dir")
    return [(inp, node_local) for inp in run_inputs(plan, build_dir, scorer=not debug(composed).get("skip_scorer"))]


def input_notes(plan: RunPlan, composed: dict) -> list[str]:
    """A dry run's notes on the files a real launch reads: every one it would not find (what a launch
    builds, model.build_dir, excepted), or could not check from here (slurm.node_local_dirs)."""
    notes = []
    for inp, node_local in job_inputs(plan, composed):
        missing = input_files.problem(inp)
        if missing is None:
            continue
        unseen = input_files.unseen_from_here(inp, node_local)
        notes.append(f"{unseen}: not checked here, the compute node checks it" if unseen
                     else f"{missing} (a real launch is refused)")
    return notes


def slurm_inputs_notes(inputs) -> list[str]:
    """Before a Slurm sweep is submitted: a file a job reads that this machine can see and is missing is
    bad input (UsageError, one line), found here instead of on the node after the wait in the queue; what
    cannot be checked from here (a hub id, a path under slurm.node_local_dirs) is returned as notes."""
    notes = []
    for inp, node_local in inputs:
        unseen = input_files.unseen_from_here(inp, node_local)
        if unseen:
            notes.append(f"{unseen}: not checked before submitting, the compute node checks it")
            continue
        missing = input_files.problem(inp)
        if missing:
            raise UsageError(f"{missing}; checked on this machine before submitting (a path that only the compute "
                             f"nodes have: list its dir in slurm.node_local_dirs)")
    return list(dict.fromkeys(notes))


def detected_gpu_memory(composed: dict, environ: dict) -> float | None:
    """GiB per GPU read from the visible GPUs, only when memory.gpu_gb is null (the plan stays pure)."""
    if (composed.get("memory") or {}).get("gpu_gb") is not None:
        return None
    return preflight.gpu_memory_gb(environ)


def outside_multi_node_job(plan: RunPlan, dry: bool, task: SlurmTask | None) -> str | None:
    """Why this process cannot run (its part of) a multi-node run, or None."""
    if plan.nodes > 1 and not dry and (task is None or task.ntasks != plan.nodes):
        return (f"nodes={plan.nodes} needs a Slurm job with one task on each of {plan.nodes} nodes, this process "
                f"has {'no Slurm job' if task is None else f'{task.ntasks} task(s)'}; submit it with "
                f"--multirun hydra/launcher=slurm")
    return None


def external_scorer(plan: RunPlan, composed: dict) -> bool:
    """The run's reward calls a QE service on another machine (scorer.placement=external), which must answer first."""
    return (plan.scorer is not None and plan.scorer.placement == Placement.external
            and not debug(composed).get("skip_scorer"))


def debug(composed: dict) -> dict:
    """The debug knobs (absent in snapshots written before they existed)."""
    return composed.get("debug") or {}

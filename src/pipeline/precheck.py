"""The pre-launch check: every job of the command composed and planned before Hydra acts.

Bad input (unknown option, gpus=0, a batch pin that breaks a verl rule, a bad value in a sweep
file, hydra/launcher=slurm without Slurm) is refused with one line before Hydra makes a run dir or
a launcher submits: each combination of a sweep (command-line sweeps and a +sweep=<name> config's
hydra.sweeper.params) is composed and planned, with its Slurm request when hydra/launcher=slurm.
"""
from __future__ import annotations

import os
import shutil

from omegaconf import OmegaConf

from src import config
from src.node import preflight
from src.plan import PlanError, RunPlan, build_plan
from src.slurm import request as slurm_request
from src.slurm.task import SlurmTask, slurm_task

from .errors import UsageError

SLURM_LAUNCHER = "hydra_plugins.qe_rl.slurm_launcher.QeRlSlurmLauncher"


def precheck(overrides: list[str], multirun: bool, environ: dict | None = None) -> int:
    """Compose and plan every combination (and its Slurm request when hydra/launcher=slurm);
    raise UsageError on the first bad one. Returns the number of jobs."""
    environ = dict(os.environ if environ is None else environ)
    try:
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
        # `base` already holds the job config of a combination made of the fixed overrides alone
        # (a single run): not composing it again saves a third of a cached dry run
        fixed_job = [o for o in fixed if not config.is_hydra_override(o)]
        for combo in combos:
            job = [o for o in combo if not config.is_hydra_override(o)]
            composed = config.to_plain(base) if job == fixed_job else config.compose_config(job)
            plan = build_plan(composed, run_dir="<run dir>", gpu_memory_gb=detected_gpu_memory(composed, environ))
            refusal = None if on_slurm else outside_multi_node_job(plan, composed["dry_run"], slurm_task(environ))
            if refusal:
                raise UsageError(refusal)
            if on_slurm:
                slurm_request.check(launcher, composed, environ)
                slurm_request.resources(plan, bool(debug(composed).get("nodes_as_tasks")))
        if on_slurm and shutil.which("sbatch") is None:
            raise UsageError("hydra/launcher=slurm needs Slurm (no sbatch on PATH); on a workstation, start the "
                             "dev cluster first: see slurm/README.md")
    except (PlanError, slurm_request.RequestError, config.SweepError) as exc:
        raise UsageError(str(exc)) from None
    except UsageError:
        raise
    except Exception as exc:  # Hydra's composition, schema and override-grammar errors
        raise UsageError(config.one_line(exc)) from None
    return len(combos)


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


def debug(composed: dict) -> dict:
    """The debug knobs (absent in snapshots written before they existed)."""
    return composed.get("debug") or {}

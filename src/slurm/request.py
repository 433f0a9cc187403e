"""What one job of a Slurm sweep asks the scheduler for: the launcher yaml plus the job's plan.

conf/hydra/launcher/slurm.yaml holds the choices that are the same for every job (partition,
account, time limit, setup lines, ...). GPUs, CPUs and nodes come from each job's RunPlan, where
they are derived (node_gpus, node_cpus, nodes); a sweep over gpus= therefore asks for different
resources per job, and the launcher submits one job array per distinct request.

Checked before anything is submitted (the pre-launch check, src/pipeline/precheck.py, calls `check`):
the derived resources are not set by hand, and no secret value from the environment appears in
what would be written to the sbatch script or the pickled job (secrets reach jobs only through
the environment that sbatch propagates), and then Slurm itself checks each distinct request
(`test_only`, `sbatch --test-only`): a request the partition cannot meet is refused in one line
(`refusal`) before a sweep dir exists.
"""
from __future__ import annotations

import json
import shlex
from typing import Any

from src.plan import RunPlan
from src.record.redact import secret_values

# set per job from the plan; a value in the launcher config would silently disagree with the plan
DERIVED = {"gpus_per_node": "gpus= (and scorer.placement/dedicated_gpus for the scorer's GPUs)",
           "cpus_per_task": "slurm.cpus_per_task", "gpus_per_task": "gpus=", "cpus_per_gpu": "slurm.cpus_per_task",
           "gres": "gpus="}
# launcher keys read from the `slurm:` section, whose values the plan checks (src/plan/time_limit.py):
# a different value set on hydra.launcher directly would bypass that check
FROM_SLURM_SECTION = ("timeout_min", "signal_delay_s", "max_num_timeout")
# launcher keys that configure the submitit executor itself, not sbatch
_NOT_SBATCH = ("_target_", "submitit_folder", "max_num_timeout")


class RequestError(ValueError):
    """One line: what is wrong with the Slurm request and what to set instead."""


def check(launcher: dict, composed: dict, environ: dict) -> None:
    for key, instead in DERIVED.items():
        if launcher.get(key) is not None:
            raise RequestError(f"hydra.launcher.{key}={launcher[key]} is derived from the plan for each job; "
                               f"set {instead} instead")
    if launcher.get("nodes", 1) != 1 or launcher.get("tasks_per_node", 1) != 1:
        raise RequestError("hydra.launcher.nodes/tasks_per_node are derived from the plan; set nodes=K instead")
    slurm = composed.get("slurm") or {}
    for key in FROM_SLURM_SECTION:
        if key in launcher and key in slurm and launcher[key] != slurm[key]:
            raise RequestError(f"hydra.launcher.{key}={launcher[key]} differs from slurm.{key}={slurm[key]}; "
                               f"set slurm.{key}={launcher[key]} instead (the plan checks it against the time limit)")
    # the setup lines go into the sbatch script as they are (submitit shell-quotes only what it adds):
    # a value interpolated into a quoted line (export HF_HOME='${paths.hf_home}') that holds the
    # quote itself would break the script on the compute node, after the wait in the queue
    for line in [*(launcher.get("setup") or []), *(slurm.get("setup") or [])]:
        try:
            shlex.split(str(line))
        except ValueError as exc:
            raise RequestError(f"Slurm setup line {line!r} is not a valid shell line ({exc}); a path with a quote "
                               f"in it? move it or fix the line (conf/hydra/launcher/slurm.yaml, slurm.setup)") from None
    text = json.dumps([launcher, composed], default=str)
    for name, value in sorted(environ.items()):
        if secret_values({name: value}) and value in text:
            raise RequestError(f"the value of ${name} appears in the config that would be written to the sbatch "
                               f"script and the submitit folder; pass secrets only through the environment")


def resources(plan: RunPlan, nodes_as_tasks: bool = False) -> dict[str, Any]:
    """The job's share of the request: one task per node with the node's GPUs and CPUs."""
    if plan.nodes > 1 and nodes_as_tasks:
        # debug.nodes_as_tasks: the K nodes as K tasks on one host (dev cluster), sharing its GPUs
        return {"nodes": 1, "tasks_per_node": plan.nodes, "gpus_per_node": plan.node_gpus * plan.nodes,
                "cpus_per_task": plan.node_cpus}
    return {"nodes": plan.nodes, "tasks_per_node": 1, "gpus_per_node": plan.node_gpus,
            "cpus_per_task": plan.node_cpus}


def executor_params(launcher: dict, plan: RunPlan, nodes_as_tasks: bool, setup_extra: list[str],
                    code_dir: str) -> dict[str, Any]:
    """submitit executor parameters for one job (`slurm_`-prefixed where submitit wants it)."""
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    params = {k: v for k, v in launcher.items() if k not in _NOT_SBATCH and v is not None}
    params.update(resources(plan, nodes_as_tasks))
    # Slurm signals the job this long before its limit; the runner then has the step in progress
    # saved (src/trainer/time_limit.py). From the plan, which checked it against the limit.
    params["timeout_min"] = plan.time_limit.timeout_min
    params["signal_delay_s"] = plan.time_limit.signal_delay_s
    params["setup"] = list(params.get("setup") or []) + list(setup_extra)
    extra = dict(params.get("additional_parameters") or {})
    # the job starts in the code copied at submission, so it imports that code and reads its conf/
    extra["chdir"] = code_dir
    params["additional_parameters"] = extra
    if plan.nodes > 1:
        # one node's task failing (e.g. its Ray worker) ends the job instead of leaving the others waiting
        params["srun_args"] = ["--kill-on-bad-exit=1"]
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    return {k if k in base else f"slurm_{k}": v for k, v in params.items()}


def request_key(params: dict) -> str:
    """Jobs with equal keys can share one job array."""
    return json.dumps(params, sort_keys=True, default=str)


def partition(params: dict) -> str | None:
    """The partition a job asks for, or None for the cluster's default one."""
    extra = params.get("slurm_additional_parameters") or params.get("additional_parameters") or {}
    return params.get("slurm_partition") or params.get("partition") or extra.get("partition")


def request_text(params: dict) -> str:
    """What a job asks Slurm for, in words (as the sweep's `submitted` lines say it)."""
    name = partition(params)
    where = f"partition {name}" if name else "the default partition"
    return (f"{params.get('nodes', 1)} node(s) x {params.get('gpus_per_node')} GPUs, {params.get('cpus_per_task')} "
            f"CPUs/task, {where}")


def partition_limits(params: dict) -> str:
    """What the partition offers (sinfo), for a refusal to name the limit the request passed."""
    import subprocess

    name = partition(params)
    cmd = ["sinfo", "-h", "-o", "%P %D %c %G"] + (["-p", str(name)] if name else [])
    try:
        rows = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return "sinfo did not answer"
    offers = []
    for row in (r.split() for r in rows if r.strip()):
        if len(row) == 4 and (name or row[0].endswith("*")):
            offers.append(f"partition {row[0].rstrip('*')}: {row[1]} node(s) with {row[2]} CPUs and {row[3]} each")
    return "; ".join(offers) or "sinfo lists no such partition"


def test_only(params: dict) -> str | None:
    """Slurm's refusal of this request, or None: `sbatch --test-only` checks the script submitit would
    write against the partition's limits, and submits nothing. Writes nothing that stays (the script
    goes to a temporary file; submitit's folder in it is named, never made)."""
    import subprocess
    import tempfile

    import submitit
    from submitit.slurm.slurm import _make_sbatch_string  # the script submitit submits; no public builder

    with tempfile.TemporaryDirectory(prefix="qe-rl-test-only-") as tmp:
        executor = submitit.AutoExecutor(folder=tmp, cluster="slurm")
        executor.update_parameters(**params)
        script = _make_sbatch_string(command="true", folder=tmp, **executor._executor.parameters)
        path = f"{tmp}/job.sh"
        with open(path, "w") as f:
            f.write(script)
        done = subprocess.run(["sbatch", "--test-only", path], capture_output=True, text=True, timeout=60)
    if done.returncode == 0:
        return None
    lines = [l.strip() for l in (done.stderr + done.stdout).splitlines() if l.strip()]
    return next((l for l in lines if "error" in l.lower() or "failure" in l.lower()), lines[-1] if lines else "?")


# what sbatch says when it reaches no controller: Slurm's error strings for SLURM_COMMUNICATIONS_*_ERROR and
# its socket errors (src/common/slurm_errno.c; each string is in Debian's libslurmfull.so). The request was never judged
_NO_CONTROLLER = ("unable to contact slurm controller", "socket timed out", "zero bytes were transmitted",
                  "communication connection failure")


def unanswered(reason: str) -> bool:
    """Whether sbatch's reason says no controller answered, rather than that the request was refused."""
    return any(words in reason.lower() for words in _NO_CONTROLLER)


def refusal(reason: str, params: dict) -> str:
    """One line: Slurm's reason, the request, what the partition offers and what to ask for instead. When no
    controller answered, it says that instead: fewer nodes or GPUs would not help, and sinfo cannot answer
    either."""
    if unanswered(reason):
        return (f"Slurm's controller did not answer sbatch ({reason}), so the request ({request_text(params)}) was "
                f"not checked and nothing was submitted; check that Slurm is up and reachable from here (sinfo; "
                f"SLURM_CONF names the cluster's config; on a workstation start the dev cluster: slurm/README.md) "
                f"and launch again")
    # more than one node (debug.nodes_as_tasks: as tasks on one node): fewer nodes is a way out too
    several = int(params.get("nodes") or 1) * int(params.get("tasks_per_node") or 1) > 1
    fewer = "fewer nodes (nodes=), " if several else ""
    return (f"sbatch refused the request ({request_text(params)}): {reason}; {partition_limits(params)}; "
            f"ask for {fewer}fewer GPUs per node (gpus=) or CPUs (slurm.cpus_per_task), or another partition "
            f"(slurm.partition)")

"""The environment of a node's training processes: the plan's accelerator variables, the GPU split
between training and the QE scorer, and what verl, its Ray workers and the reward function read.
"""
from __future__ import annotations

import datetime as dt
import os
import secrets
from pathlib import Path

from src.config import CODE_ROOT
from src.config.schema import Placement
from src.plan import RunPlan
from src.record.snapshot import SNAPSHOT
from src.verl_fixes import REGISTER_MODULE
from src.verl_fixes.weight_sync_socket import TAG_ENV

from . import ray_cluster

# Slurm's gres/gpu plugin names a job's GPUs in one variable per vendor API, all with the same indices, when
# gres.conf gives no vendor flag: CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK and
# GPU_DEVICE_ORDINAL (seen in an sbatch/srun job of Slurm 22.05: docs/troubleshooting.md). verl's Worker
# refuses ROCR_VISIBLE_DEVICES beside CUDA_VISIBLE_DEVICES ("Please don't set ROCR_VISIBLE_DEVICES when
# HIP/CUDA_VISIBLE_DEVICES is set", verl/single_controller/base/worker.py Worker._setup_env_cuda_visible_devices)
# and asserts HIP_VISIBLE_DEVICES equals it. On an NVIDIA node (and the CPU loop's fake GPUs, which its platform
# names by CUDA_VISIBLE_DEVICES too) the AMD variables select nothing: CUDA_VISIBLE_DEVICES is the one that counts.
AMD_DEVICE_VARS = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
# where the GPUs Slurm allotted are read from when CUDA_VISIBLE_DEVICES is absent, in this order: each holds
# the same indices Slurm would have put in CUDA_VISIBLE_DEVICES. SLURM_JOB_GPUS / SLURM_STEP_GPUS are not among
# them: they hold the node's global indices, which differ from what a process sees when Slurm constrains the
# job's devices (cgroups renumber them from 0); there CUDA's own enumeration (no variable) is already right.
CUDA_FALLBACK_VARS = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")
# accelerators whose processes take their GPUs from CUDA_VISIBLE_DEVICES (conf/accelerator/*.yaml `device`)
CUDA_NAMED_DEVICES = ("cuda", "cpu")


def device_environ(device: str, environ: dict) -> tuple[dict, list[str]]:
    """(the environment verl's workers accept on this accelerator, notes saying what was changed).

    Keeps the GPUs Slurm allotted: CUDA_VISIBLE_DEVICES stays as it is, or comes from the first of
    CUDA_FALLBACK_VARS that is set; the AMD variables are dropped so verl's Worker does not refuse them.
    Other accelerators (npu) are left alone."""
    if device not in CUDA_NAMED_DEVICES:
        return dict(environ), []
    env = dict(environ)
    notes = []
    if env.get("CUDA_VISIBLE_DEVICES") is None:
        source = next((v for v in CUDA_FALLBACK_VARS if env.get(v)), None)
        if source is not None:
            env["CUDA_VISIBLE_DEVICES"] = env[source]
            notes.append(f"CUDA_VISIBLE_DEVICES unset: set to {source}={env[source]}, the GPUs this job was given")
    dropped = [f"{v}={env.pop(v)}" for v in AMD_DEVICE_VARS if v in env]
    if dropped:
        notes.append(f"{', '.join(dropped)} left out of the training processes' environment (verl's workers refuse "
                     f"them beside CUDA_VISIBLE_DEVICES; on this accelerator they select nothing)")
    return env, notes


def split_devices(plan: RunPlan, environ: dict) -> tuple[dict, str | None]:
    """(env for training, CUDA_VISIBLE_DEVICES for the scorer; None: no scorer runs).

    shared: the scorer sees the one training GPU the plan chose. dedicated: the node has
    node_gpus = training + scorer GPUs (Slurm sets CUDA_VISIBLE_DEVICES to all of them): training
    sees the first gpus_per_node, the scorer the rest, so Ray never schedules onto the scorer's GPU.
    cpu: the scorer sees no GPU. Without CUDA_VISIBLE_DEVICES the node's GPUs are 0..node_gpus-1."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    devices = ([d.strip() for d in visible.split(",") if d.strip()] if visible
               else [str(i) for i in range(plan.node_gpus)])
    training = devices[:plan.gpus_per_node]
    training_env = {"CUDA_VISIBLE_DEVICES": ",".join(training)} if plan.scorer_gpus_per_node else {}
    s = plan.scorer
    if s is None:
        return training_env, None
    if s.placement == Placement.shared:
        scorer = training[s.training_gpu_index] if s.training_gpu_index < len(training) else str(s.training_gpu_index)
    elif s.placement == Placement.dedicated:
        scorer = ",".join(devices[plan.gpus_per_node:plan.node_gpus])
    else:
        scorer = ""
    return training_env, scorer


def run_env(plan: RunPlan, environ: dict) -> tuple[dict, str | None]:
    """The environment of the training processes on this node, and the scorer's GPUs. The run's own variables
    (src/trainer/run_vars.py RUN_VARS) are node 0's for every node: the trainer hands them to each Ray actor."""
    env = {**environ, **plan.accelerator_env}
    training_devices, scorer_devices = split_devices(plan, environ)
    env.update(training_devices)
    # verl's file logger truncates its file on open ("wb", verl/utils/tracking.py FileLogger): one
    # file per launch, in the checkpoint dir that every attempt of this run shares (a requeue, the
    # same command again, --from-snapshot --resume), so src/report reads all attempts as one series
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    metrics = Path(plan.checkpoint_dir) / "metrics"
    env["VERL_FILE_LOGGER_PATH"] = f"{metrics}/{stamp}-{Path(plan.run_dir).name}.jsonl"
    # verl's FileLogger opens that path without creating its dir
    metrics.mkdir(parents=True, exist_ok=True)
    # verl's fixes in every process of the run, before the accelerator's or the user's modules: the weight sync's
    # socket gets this launch's own tag, so two runs on one host do not share it (src/verl_fixes/weight_sync_socket.py)
    modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m and m != REGISTER_MODULE]
    env["VERL_USE_EXTERNAL_MODULES"] = ",".join([REGISTER_MODULE] + modules)
    env[TAG_ENV] = secrets.token_hex(6)
    env.setdefault("HF_HUB_OFFLINE", "1")
    if plan.wandb_offline:
        env["WANDB_MODE"] = "offline"
    # every attempt on this checkpoint dir continues one wandb run (env, not the verl config,
    # which must stay byte-identical across re-runs)
    env["WANDB_RUN_ID"] = plan.wandb_run_id
    env["WANDB_RESUME"] = "allow"
    # ... and its files, offline runs included, go where every attempt finds them: <checkpoint dir>/wandb
    # (plan.wandb_dir; wandb adds the `wandb/`), not into the working dir (a Slurm job's <sweep>/code/wandb)
    env["WANDB_DIR"] = plan.checkpoint_dir
    # verl's wandb.init passes project/name only (verl/utils/tracking.py Tracking.__init__); wandb
    # reads the group from WANDB_RUN_GROUP: a sweep's jobs are grouped by their sweep dir
    if environ.get("QE_RL_SWEEP"):
        env.setdefault("WANDB_RUN_GROUP", environ["QE_RL_SWEEP"])
    # verl, its Ray workers (on every node) and the reward function import `src` from the code
    # this run runs: the checkout, or a Slurm job's code snapshot
    env["PYTHONPATH"] = os.pathsep.join([str(CODE_ROOT)] + [p for p in [environ.get("PYTHONPATH")] if p])
    env["QE_RL_RUN_DIR"] = plan.run_dir
    env["QE_RL_CHECKPOINT_DIR"] = plan.checkpoint_dir
    env["QE_RL_VERL_CONFIG"] = str(Path(plan.run_dir) / SNAPSHOT / "verl_config.yaml")
    if plan.nodes == 1:
        env.update(ray_cluster.single_node_env(environ))
    return env, scorer_devices

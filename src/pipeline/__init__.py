"""Pipeline: a launch from composed config to running processes (pre-launch check, one run, --from-snapshot, --resume-sweep, the smoke verdict).
May import: src.config, src.data (the data files' checks), src.plan, src.verl_config, src.record, src.slurm, src.node, src.report (the smoke run's report).
"""
from .errors import INTERRUPTED_EXIT, USAGE_EXIT, RunError, UsageError
from .from_snapshot import ALLOW_CHANGED_INPUTS, from_snapshot, from_snapshot_command, snapshot_dir_of
from .lineage import Lineage, identify
from .local_sweep import finish as finish_local_sweep
from .precheck import SLURM_LAUNCHER, Checked, check_launch, precheck
from .resume_sweep import FLAG as RESUME_SWEEP_FLAG
from .resume_sweep import argv_for as resume_sweep_argv
from .run import execute, hydra_task, run, train_command
from .run_dirs import claim as claim_run_dir
from .smoke import on_cpu_without_gpu

__all__ = ["ALLOW_CHANGED_INPUTS", "INTERRUPTED_EXIT", "RESUME_SWEEP_FLAG", "SLURM_LAUNCHER", "USAGE_EXIT", "Checked",
           "Lineage", "RunError", "UsageError", "check_launch", "claim_run_dir", "execute", "finish_local_sweep",
           "from_snapshot", "from_snapshot_command", "hydra_task", "identify", "on_cpu_without_gpu", "precheck",
           "resume_sweep_argv", "run", "snapshot_dir_of", "train_command"]

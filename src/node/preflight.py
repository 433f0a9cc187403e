"""Checks before a real (non-dry) launch: each failure is one line with the numbers.

Run before the snapshot is written, so a run that cannot start leaves nothing behind.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from src.config.schema import Placement
from src.plan import RunPlan, ray_cpus_for
from src.plan.inputs import run_inputs, scorer_inputs

from . import input_files, scorer_service


class PreflightError(RuntimeError):
    pass


def visible_gpus(environ: dict) -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES if set, else what nvidia-smi lists."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    return len([line for line in out.stdout.splitlines() if line.startswith("GPU ")])


_SHARD = re.compile(r"model_world_size_(\d+)_rank_\d+\.pt$")


def checkpoint_world_sizes(checkpoint_dir: Path) -> set[int]:
    """World sizes the FSDP shards under a checkpoint dir were written for."""
    if not checkpoint_dir.is_dir():
        return set()
    return {int(m.group(1)) for p in checkpoint_dir.glob("global_step_*/actor/*.pt")
            if (m := _SHARD.search(p.name))}


def allocated_cpus(environ: dict) -> int:
    """CPUs this process may use: what Slurm granted the task, else the CPU affinity. (Inside a
    Slurm job the allocation is the truth; the affinity only reflects it where Slurm binds tasks.)"""
    granted = environ.get("SLURM_CPUS_PER_TASK")
    if granted and granted.isdigit():
        return int(granted)
    return len(os.sched_getaffinity(0))


def gpu_memory_gb(environ: dict) -> float | None:
    """Memory of the smallest visible GPU in GiB (nvidia-smi's MiB / 1024), None without GPUs.
    Used for the memory plan when memory.gpu_gb is null."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    cmd = [smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
        if not ids:
            return None
        cmd.append("--id=" + ",".join(ids))
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    sizes = [float(line) for line in out.stdout.split() if line.replace(".", "", 1).isdigit()]
    return min(sizes) / 1024 if out.returncode == 0 and sizes else None


def check_scorer(plan: RunPlan, environ: dict | None = None) -> None:
    """The QE service can start: its env's python and every checkpoint it loads exist, a model dir with
    the files its backend's descriptor says it holds (model_files; src/node/input_files.py words each
    problem). (It would fail on its own too, but only after the snapshot is written and with the run half
    started.) An external one (scorer.placement=external) answers and serves the reward's models."""
    s = plan.scorer
    if s is None:
        return
    if s.placement == Placement.external:
        problem = scorer_service.external_problem(s, dict(os.environ) if environ is None else environ)
        if problem:
            raise PreflightError(problem)
        return
    if not Path(s.python).is_file():
        raise PreflightError(f"scorer python not found at {s.python}: run `make setup` (creates .venv-scorer) or "
                             f"set scorer.python")
    _refuse_first(input_files.problems(scorer_inputs(s)))


def run(plan: RunPlan, environ: dict, cpu_count: int | None = None, gpus_per_node_needed: int | None = None,
        scorer: bool = True) -> None:
    """Every check of a node about to run its part: what it has, then the files it reads."""
    check_node(plan, environ, cpu_count, gpus_per_node_needed)
    check_files(plan, scorer, environ)


def check_files(plan: RunPlan, scorer: bool = True, environ: dict | None = None) -> None:
    """The model, the data files and (with `scorer`) the QE models exist (src/plan/inputs.py lists them).
    What a launch builds (model.build_dir) is built before this runs (src/pipeline/tiny_build.py)."""
    _refuse_first(input_files.problems(run_inputs(plan, scorer=False)))
    if scorer:
        check_scorer(plan, environ)


def _refuse_first(problems: list[str]) -> None:
    if problems:
        raise PreflightError(problems[0])


def check_node(plan: RunPlan, environ: dict, cpu_count: int | None = None,
               gpus_per_node_needed: int | None = None) -> None:
    """What this node has (GPUs, CPUs) and what its checkpoint dir holds: checked before anything is
    built or written (experiment=smoke_tiny builds its models only after this passed)."""
    need = gpus_per_node_needed if gpus_per_node_needed is not None else plan.node_gpus
    if plan.device == "cuda":
        found = visible_gpus(environ)
        if found < need:
            scorer = (f" (+{plan.scorer_gpus_per_node} dedicated scorer GPU(s))"
                      if plan.scorer_gpus_per_node else "")
            raise PreflightError(
                f"this node needs {need} GPUs for gpus={plan.gpus_per_node}{scorer} but {found} are visible "
                f"(CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
                f"run on a GPU node, lower gpus=, or use dry_run=true to plan only")
    if plan.trainer_python and not Path(plan.trainer_python).is_file():
        raise PreflightError(f"the training env's python is not at {plan.trainer_python} (accelerator.python): "
                             f"run `make setup` (on a CPU machine it creates .venv-loop) or set accelerator.python")
    if plan.device == "cpu":
        # Ray's CPUs are logical there: the CPU loop runs its ~20 processes on the cores there are
        # (conf/accelerator/cpu.yaml), slowly but in full
        return _check_checkpoint_dir(plan)
    cpus = cpu_count if cpu_count is not None else allocated_cpus(environ)
    # per node: a multi-node job's Ray node on each host needs its own share
    needed = plan.ray_cpus_needed if plan.nodes == 1 else ray_cpus_for(plan.gpus_per_node)
    if cpus < needed:
        # Ray accepts more logical CPUs than cores, but verl then oversubscribes the node
        raise PreflightError(f"verl needs {needed} CPUs for {plan.gpus_per_node} GPUs on this node (3 per GPU + 10) "
                             f"but this process may use {cpus}; ask the scheduler for more CPUs")
    _check_checkpoint_dir(plan)


def _check_checkpoint_dir(plan: RunPlan) -> None:
    sizes = checkpoint_world_sizes(Path(plan.checkpoint_dir))
    if sizes and sizes != {plan.world_size}:
        raise PreflightError(
            f"{plan.checkpoint_dir} holds FSDP shards for world size {sorted(sizes)} but this run has "
            f"G={plan.world_size}; FSDP cannot resume across GPU counts: run with that GPU count or "
            f"move the checkpoints away")


def splits_in(path: Path) -> dict[str, int] | None:
    """extra_info.split -> row count, reading that one nested column only (pyarrow); None when the
    file's schema has no extra_info.split at all."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    schema = pq.ParquetFile(path).schema_arrow
    info = schema.field("extra_info").type if "extra_info" in schema.names else None
    if info is None or not hasattr(info, "get_field_index") or info.get_field_index("split") < 0:
        return None
    column = pq.read_table(path, columns=["extra_info.split"]).column(0)
    return {("<missing>" if v["values"].as_py() is None else str(v["values"].as_py())): v["counts"].as_py()
            for v in pc.value_counts(column)}


def check_data_splits(plan: RunPlan, validation_splits) -> None:
    """Validation rows are recognisable: the reward function (src/rewards/compute.py) gives the
    validation reward exactly to rows whose extra_info.split is in `validation_splits`, so a val file
    without that tag would silently be scored with the training reward, and a train file with it
    would train on the validation reward. Runs in dry runs too whenever the files exist (a dry run
    is where a user checks a new data set); a missing file is the existence check's business."""
    allowed = sorted(str(s) for s in validation_splits)
    for what, path, want_val, split in (("val data", plan.val_files, True, "val"),
                                        ("train data", plan.train_files, False, "train")):
        p = Path(path)
        if not p.is_file():
            continue
        try:
            counts = splits_in(p)
        except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same one-line refusal
            raise PreflightError(f"{what} {path} is not a readable parquet file ({type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); prepare it with "
                                 f"`python -m src.data.prepare --split {split} ...`") from None
        fix = f"re-run `python -m src.data.prepare --split {split} ...` for this file (docs/data-and-report.md)"
        if counts is None:
            if want_val:
                raise PreflightError(f"{what} {path} has no extra_info.split column, so its rows would get the "
                                     f"training reward (validation rows need split in {allowed}); {fix}")
            continue
        wrong = {s: n for s, n in counts.items() if (s in allowed) != want_val}
        if not wrong:
            continue
        n_rows = sum(counts.values())
        seen = ", ".join(f"{s}: {n}" for s, n in sorted(wrong.items()))
        if want_val:
            raise PreflightError(f"{what} {path}: {sum(wrong.values())} of {n_rows} rows are not marked as validation "
                                 f"rows (extra_info.split {seen}; needs one of {allowed}) and would get the training "
                                 f"reward; {fix}")
        raise PreflightError(f"{what} {path}: {sum(wrong.values())} of {n_rows} rows are marked as validation rows "
                             f"(extra_info.split {seen}) and would be trained on the validation reward; {fix}")


# WANDB_MODE values under which wandb never logs in (wandb/sdk/wandb_settings.py `mode`)
_WANDB_LOCAL_MODES = ("offline", "dryrun", "disabled")


def wandb_mode(plan: RunPlan, environ: dict) -> str | None:
    """How wandb will log this run, as the plan table says it: None without wandb; offline where logger.offline
    or the environment's WANDB_MODE (a Slurm job's: slurm.wandb_mode) says so; else online."""
    if "wandb" not in plan.logger_backends:
        return None
    if plan.wandb_offline:
        return "offline (logger.offline=true)"
    mode = str(environ.get("WANDB_MODE") or "").strip().lower()
    return f"{mode} (WANDB_MODE={mode})" if mode in _WANDB_LOCAL_MODES else "online"


def wandb_login_refusal(plan: RunPlan, environ: dict) -> str | None:
    """Why online wandb would fail at its first call, or None: verl calls wandb.init only once Ray, the
    workers and vLLM are up (minutes), and it raises `UsageError: No API key configured` without a login.
    A login is what wandb itself reads (wandb/sdk/lib/wbauth/authenticate.py `_use_system_auth`):
    WANDB_API_KEY or WANDB_IDENTITY_TOKEN_FILE, else a netrc entry for the wandb host (WANDB_BASE_URL,
    default api.wandb.ai) in $NETRC, ~/.netrc or ~/_netrc (wbnetrc.py `_get_netrc_file_path`)."""
    import netrc
    from urllib.parse import urlsplit

    if "wandb" not in plan.logger_backends or plan.wandb_offline:
        return None
    if str(environ.get("WANDB_MODE") or "").strip().lower() in _WANDB_LOCAL_MODES:
        return None
    if environ.get("WANDB_API_KEY") or environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return None
    host = urlsplit(environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").netloc or "api.wandb.ai"
    home = Path(environ.get("HOME") or Path.home())
    if environ.get("NETRC"):
        path = Path(environ["NETRC"]).expanduser()
    else:
        path = next((p for p in (home / ".netrc", home / "_netrc") if p.exists()), home / ".netrc")
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        entry = None
    if entry and entry[2]:
        return None
    return (f"wandb logs online (logger.offline=false), but this machine has no wandb login (no WANDB_API_KEY, "
            f"no {host} entry in {path}): verl's first wandb call would stop the run after Ray, the workers and "
            f"vLLM started; run `wandb login`, or set logger.offline=true (sync later) or logger=console")

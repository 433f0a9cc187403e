"""<run dir>/snapshot/: everything needed to reproduce a run, written before anything runs.

Files: composed.yaml (our composed config), overrides.yaml (CLI overrides), plan.json,
verl_config.yaml (the exact file verl runs), command.txt, git.txt + git.diff, env.json
(relevant environment, secrets redacted), packages-train.txt / packages-scorer.txt, system.json,
format.json (the snapshot format, FORMAT), inputs.json (the model, data and QE files as they were:
src/record/fingerprint.py). Written into a temp dir and renamed into place, so a
snapshot is whole or absent. Every file passes through the secret scrubber: a secret value never
lands on disk, even inside a URL. Snapshots of any age are read back by src/record/upgrade.py.
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from src.config import CODE_ROOT

from . import fingerprint, git_state
from .redact import REDACTED, is_secret, scrub

SNAPSHOT = "snapshot"

# The files a re-run reads (src/record/upgrade.py, src/pipeline/from_snapshot.py); the others are a record.
COMPOSED, OVERRIDES, PLAN, VERL_CONFIG, GIT, FORMAT_FILE = (
    "composed.yaml", "overrides.yaml", "plan.json", "verl_config.yaml", "git.txt", "format.json")

# The snapshot format: raised when the meaning of a recorded key changes in a way its shape does not
# show (a unit, a default that moved into code). Snapshots without format.json are format 1. Keys
# that are only added need no new format: a re-run fills them from today's defaults
# (src/record/upgrade.py, docs/snapshots.md).
FORMAT = 2


class SnapshotMismatch(RuntimeError):
    """A run dir already holds a snapshot of a different run."""


# environment that changes what a run does
_RELEVANT_PREFIXES = ("CUDA", "NCCL", "HF_", "TRANSFORMERS", "WANDB", "RAY", "VLLM", "VERL", "SLURM",
                      "HYDRA", "PYTORCH", "TORCH", "OMP_", "QE_RL", "QE_SCORER", "LD_PRELOAD", "HCCL",
                      "ASCEND", "TOKENIZERS")


def relevant_env(environ: dict) -> dict:
    return {k: (REDACTED if is_secret(k) else v) for k, v in sorted(environ.items())
            if k.startswith(_RELEVANT_PREFIXES) or is_secret(k)}


def installed_packages(python: str | None = None) -> str:
    """`name==version` lines of an environment (in-process for ours: pip freeze costs ~1 s)."""
    if python is None:
        import importlib.metadata as md
        pkgs = {(d.metadata["Name"] or "?").lower(): d.version for d in md.distributions()}
        return "".join(f"{k}=={v}\n" for k, v in sorted(pkgs.items()))
    code = ("import importlib.metadata as m;print(''.join(sorted(f\"{(d.metadata['Name'] or '?').lower()}"
            "=={d.version}\\n\" for d in m.distributions())),end='')")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60).stdout


def system_info() -> dict:
    info = {"python": sys.version.split()[0], "platform": platform.platform()}
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        info["gpus"] = out.stdout.strip().splitlines()
    return info


def write(run_dir: Path, *, composed: dict, overrides: list[str], plan: dict, verl_yaml: str,
          command: list[str], scorer_python: str | None, environ: dict, inputs: dict | None = None) -> Path:
    """Write <run_dir>/snapshot atomically; returns its path. `inputs`: fingerprint.record() of the
    files the run reads (a re-run compares them: src/pipeline/from_snapshot.py)."""
    target = run_dir / SNAPSHOT
    if target.exists():
        raise FileExistsError(f"{target} already exists; a run dir holds one snapshot")
    run_dir.mkdir(parents=True, exist_ok=True)
    # a Slurm job runs from the code copied at submission: record that code's git state
    git_text, git_diff = git_state.current()
    files = {
        COMPOSED: yaml.safe_dump(composed, sort_keys=False, allow_unicode=True),
        OVERRIDES: yaml.safe_dump(list(overrides), allow_unicode=True),
        PLAN: json.dumps(plan, indent=2, sort_keys=False) + "\n",
        VERL_CONFIG: verl_yaml,
        # a shell command that runs when pasted: each argument shell-quoted, from the code root
        # (verl's entry is `-m src.trainer`; the run itself gets the code root on PYTHONPATH)
        "command.txt": f"cd {shlex.quote(str(CODE_ROOT))} && {shlex.join(command)}\n",
        GIT: git_text,
        "git.diff": git_diff,
        "env.json": json.dumps(relevant_env(environ), indent=2) + "\n",
        # the env that trains: the launcher's own, or accelerator.python's (the CPU loop env)
        "packages-train.txt": installed_packages((composed.get("accelerator") or {}).get("python")),
        "system.json": json.dumps(system_info(), indent=2) + "\n",
        FORMAT_FILE: json.dumps({"format": FORMAT}) + "\n",
    }
    if inputs is not None:
        files[fingerprint.FILE] = fingerprint.to_text(inputs)
    if scorer_python and Path(scorer_python).exists():
        files["packages-scorer.txt"] = installed_packages(scorer_python)
    tmp = Path(tempfile.mkdtemp(prefix=".snapshot-", dir=run_dir))
    try:
        # mkdtemp makes the dir 0700: a teammate reads the snapshot as the user's umask says
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        for name, text in files.items():
            (tmp / name).write_text(scrub(text, environ), encoding="utf-8")
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def reuse(run_dir: Path, verl_yaml: str) -> Path | None:
    """The snapshot already in `run_dir` if it holds exactly this verl config: a requeued Slurm job
    (same run dir, same code snapshot and overrides) keeps its first attempt's snapshot. None when
    there is none yet."""
    target = run_dir / SNAPSHOT
    if not target.exists():
        return None
    old = target / VERL_CONFIG
    if not old.is_file() or old.read_text(encoding="utf-8") != verl_yaml:
        raise SnapshotMismatch(f"{target} holds the snapshot of another run (its verl_config.yaml differs); "
                               f"a run dir holds one run: use a new run dir")
    return target

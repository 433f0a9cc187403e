"""The launcher run as a user runs it, and what a run left on disk."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from src.config import PROJECT_ROOT
from tests import launch_server


def files_under(root: Path) -> list[Path]:
    """Every file under `root` (none when it does not exist), sorted."""
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def checkpoint_dir(run_dir: Path) -> Path:
    """The run's checkpoint dir (verl's trainer.default_local_dir), as its snapshot's plan has it."""
    return Path(json.loads((Path(run_dir) / "snapshot" / "plan.json").read_text())["checkpoint_dir"])


def metrics_files(run_dir: Path) -> list[Path]:
    """verl's metrics files in the run's checkpoint dir (its file logger writes one per launch), by name."""
    return sorted((checkpoint_dir(run_dir) / "metrics").glob("*.jsonl"))


def launch(args: list[str], env_extra: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m src.launch ARGS` as a user runs it, from the project root (forked from a process that
    has imported the launcher already: tests/launch_server.py)."""
    env = {**launch_server.launch_env(), **(env_extra or {})}
    return launch_server.launch(args, env=env, cwd=PROJECT_ROOT, timeout=timeout)

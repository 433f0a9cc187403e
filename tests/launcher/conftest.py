import subprocess
from pathlib import Path

import pytest

from tests import launch_server
from src.config import PROJECT_ROOT, compose_config


@pytest.fixture
def isolated_paths(tmp_path):
    """Overrides that keep every file a run writes inside tmp_path."""
    out = tmp_path / "out"
    return out, [f"paths.output_dir={out}/outputs", f"paths.results_root={out}/results",
                 f"paths.data_root={tmp_path}/data", f"paths.model_root={tmp_path}/models"]


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def launch(args: list[str], env_extra: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m src.launch ARGS` as a user runs it, from the project root (forked from a process that
    has imported the launcher already: tests/launch_server.py)."""
    env = {**launch_server.launch_env(), **(env_extra or {})}
    return launch_server.launch(args, env=env, cwd=PROJECT_ROOT, timeout=timeout)


@pytest.fixture
def compose():
    return compose_config

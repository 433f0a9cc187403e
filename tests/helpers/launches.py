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


def latest_run_dir(out: Path) -> Path | None:
    """The last run dir under a launch's output dir `out` whose plan is written (None before): read while the
    launch runs, its checkpoint dir is then known."""
    runs = sorted((Path(out) / "runs").glob("*")) if (Path(out) / "runs").is_dir() else []
    return runs[-1] if runs and (runs[-1] / "snapshot" / "plan.json").is_file() else None


def metrics_files(run_dir: Path) -> list[Path]:
    """verl's metrics files in the run's checkpoint dir (its file logger writes one per launch), by name."""
    return sorted((checkpoint_dir(run_dir) / "metrics").glob("*.jsonl"))


def launch(args: list[str], env_extra: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m src.launch ARGS` as a user runs it, from the project root (forked from a process that
    has imported the launcher already: tests/launch_server.py)."""
    env = {**launch_server.launch_env(), **(env_extra or {})}
    return launch_server.launch(args, env=env, cwd=PROJECT_ROOT, timeout=timeout)


def small_qwen_inputs(tmp_path: Path) -> list[str]:
    """An empty Qwen2.5-0.5B model dir and four prepared zh-en rows per split where preflight looks, outputs inside
    tmp_path: the overrides of a launch that plans Qwen2.5-0.5B at 4 prompts a step (its trainer stood in)."""
    from src.data.parquet_io import write_parquet_atomic
    from src.data.rows import Example, make_row

    (tmp_path / "models" / "Qwen2.5-0.5B-Instruct").mkdir(parents=True)
    for split in ("train", "val"):
        rows = [make_row(Example("今天天气很好。", "The weather is nice today.", "zh", "en"), dataset_name="wmt_zh_en",
                         template="base", split=split, index=i) for i in range(4)]
        write_parquet_atomic(rows, tmp_path / "data" / "wmt_zh_en" / f"{split}.parquet")
    return ["model=qwen2.5_0.5b", "reward=comet", "gpus=1", "batch.prompts_per_step=4", "batch.mini_batch_prompts=4",
            "debug.skip_scorer=true", f"paths.output_dir={tmp_path}/out", f"paths.results_root={tmp_path}/results",
            f"paths.model_root={tmp_path}/models", f"paths.data_root={tmp_path}/data"]


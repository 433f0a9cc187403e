"""Per-sample reward components as JSON lines, for src/report (src/report/run_files.py).

verl's V1 trainer logs only the total training reward, so the reward function writes each scored
sample's numeric components itself when QE_REWARD_COMPONENTS_DIR is set (the runner points it at
`<run>/reward_components`): one file per worker process (`<host>-<pid>.jsonl`, so processes never
interleave writes), lines `{"step": int|null, "split": "train"|"val", <component>: number, ...}`.
Unset: nothing is written.

The step is the policy version verl's rollout server stamps on each trajectory
(`extra_info["global_steps"]`, merged into extra_info by verl's `naive` reward manager). The `dapo`
manager does not pass it on; those lines carry `"step": null` and the report cannot place them.
"""
from __future__ import annotations

import json
import math
import os
import socket
import sys
from pathlib import Path

ENV_DIR = "QE_REWARD_COMPONENTS_DIR"

_state: dict = {"path": None, "file": None, "failed": False}


def _open(directory: str):
    path = Path(directory) / f"{socket.gethostname()}-{os.getpid()}.jsonl"
    if _state["path"] != path:
        if _state["file"] is not None:
            _state["file"].close()
        path.parent.mkdir(parents=True, exist_ok=True)
        # line-buffered append: each sample is one complete line on disk, a killed worker loses
        # at most the line it was writing (the report skips a torn last line)
        _state["file"] = open(path, "a", encoding="utf-8", buffering=1)
        _state["path"] = path
    return _state["file"]


def step_of(extra_info: dict) -> int | None:
    for key in ("global_steps", "max_global_steps"):
        value = extra_info.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return int(value)
    return None


def write(step: int | None, split: str, components: dict) -> None:
    directory = os.environ.get(ENV_DIR)
    if not directory or _state["failed"]:
        return
    record = {"step": step, "split": split}
    record.update({k: v for k, v in components.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)})
    try:
        _open(directory).write(json.dumps(record) + "\n")
    except OSError as exc:
        # a side log must not stop training: say so once, then stop trying
        _state["failed"] = True
        print(f"WARNING: reward components are not written to {directory}: {exc}", file=sys.stderr)

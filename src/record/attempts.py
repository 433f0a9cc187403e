"""`<run dir>/attempts.jsonl`: one line per start of a run, written when its job starts. A job that Slurm
requeued (its time limit, a preemption, `scontrol requeue`) shows as a second line in the same run dir; the
sweep's summary counts them (src/record/sweep_summary.py)."""
from __future__ import annotations

import json
from pathlib import Path

ATTEMPTS_FILE = "attempts.jsonl"


def record(run_dir: Path, entry: dict) -> None:
    with open(Path(run_dir) / ATTEMPTS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def count(run_dir: str | Path | None) -> int:
    """How many times the run was started (0: never, or no run dir)."""
    if not run_dir:
        return 0
    try:
        text = (Path(run_dir) / ATTEMPTS_FILE).read_text(encoding="utf-8")
    except OSError:
        return 0
    return sum(1 for line in text.splitlines() if line.strip())

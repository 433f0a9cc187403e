"""Stand-in for verl's training command in the --resume-sweep tests (`debug.train_command_override`), run as a
script: verl's resume in small. It reads the step in latest_checkpointed_iteration.txt of its checkpoint dir
($QE_RL_CHECKPOINT_DIR; 0 when there is none) and saves one more, records each start in
<run dir>/starts.jsonl, and exits 3 for job #1 of a sweep (its run dir's name starts with `1_`) while the
flag file named by its argument exists.

    python tests/helpers/resumable_train.py <flag file>
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

STARTS = "starts.jsonl"


def starts(run_dir: str | Path) -> list[dict]:
    """What each start of the stand-in in this run dir saw."""
    path = Path(run_dir) / STARTS
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []


def main(flag: str) -> int:
    run, ckpt = Path(os.environ["QE_RL_RUN_DIR"]), Path(os.environ["QE_RL_CHECKPOINT_DIR"])
    latest = ckpt / "latest_checkpointed_iteration.txt"
    start = int(latest.read_text()) if latest.exists() else 0
    ckpt.mkdir(parents=True, exist_ok=True)
    latest.write_text(str(start + 1))
    with open(run / STARTS, "a", encoding="utf-8") as f:
        f.write(json.dumps({"resumed_from": start, "checkpoint_dir": str(ckpt),
                            "slurm_job_id": os.environ.get("SLURM_JOB_ID")}) + "\n")
    if run.name.startswith("1_") and Path(flag).exists():
        print("stand-in: failing on purpose", flush=True)
        return 3
    print("stand-in: trained", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

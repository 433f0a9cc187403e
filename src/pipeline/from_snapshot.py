"""`--from-snapshot DIR`: a past run again from its snapshot, exactly (the composed config and overrides
it recorded, never re-composed from today's conf/), reproduced from step 0 in a new checkpoint dir or,
with --resume, continued in its own. Snapshots written by older code are read in today's shape
(src/record/snapshot.py `upgraded`).
"""
from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

from src.record import snapshot

from .errors import USAGE_EXIT
from .lineage import Lineage
from .run import execute


def from_snapshot(snapshot_dir: Path, extra: list[str]) -> int:
    """Reproduce a run from step 0 into a new checkpoint dir, or with `--resume` continue it in
    its own dir. Either way a new run dir (snapshot, log) records this launch."""
    resume = "--resume" in extra
    extra = [a for a in extra if a != "--resume"]
    if not (snapshot_dir / "composed.yaml").is_file():
        print(f"error: {snapshot_dir} is not a snapshot dir (no composed.yaml); pass "
              f"outputs/runs/<run>/snapshot", file=sys.stderr)
        return USAGE_EXIT
    bad = [a for a in extra if a not in ("dry_run=true", "dry_run=false")]
    if bad:
        print(f"error: --from-snapshot reproduces a run exactly and takes no overrides but dry_run=, got "
              f"{bad[0]}; compose a new run instead", file=sys.stderr)
        return USAGE_EXIT
    composed, overrides = snapshot.load(snapshot_dir)
    try:
        original = json.loads((snapshot_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        print(f"error: {snapshot_dir}/plan.json is missing or unreadable: it names the run's checkpoint dir; "
              f"pass a whole snapshot dir", file=sys.stderr)
        return USAGE_EXIT
    lineage = Lineage(original=original, resume=resume)
    if extra:
        composed["dry_run"] = extra[-1] == "dry_run=true"
    run_dir = _new_run_dir(Path(composed["paths"]["output_dir"]) / "runs", f"from_{snapshot_dir.parent.name}")
    code = execute(composed, overrides, run_dir, lineage=lineage)
    new_plan = run_dir / snapshot.SNAPSHOT / "plan.json"
    if new_plan.is_file() and original.get("run_id"):
        now = json.loads(new_plan.read_text(encoding="utf-8")).get("run_id")
        if now != original["run_id"]:
            print(f"warning: the training config's id is {now}, the snapshot's run was {original['run_id']} "
                  f"(verl or code changed); diff the two verl_config.yaml files", file=sys.stderr)
    return code


def _new_run_dir(parent: Path, name: str) -> Path:
    """`<parent>/<time>_<name>`, created here: two launches from one snapshot in the same second
    (a dry run, then --resume) get two dirs (`-2` on the second), never one holding both snapshots."""
    parent.mkdir(parents=True, exist_ok=True)
    base = f"{dt.datetime.now():%Y-%m-%d_%H-%M-%S}_{name}"
    for n in range(1, 1000):
        candidate = parent / (base if n == 1 else f"{base}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"no free run dir for {base} under {parent}")

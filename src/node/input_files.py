"""Whether the files a run reads (src/plan/inputs.py) are where its config says, each problem one line.

Three callers, one wording: the node's preflight refuses the first problem (src/node/preflight.py
check_files), a dry run notes every one (src/pipeline/run.py), and a Slurm submission refuses the first
one it can see from the submitting machine before anything is queued (src/pipeline/precheck.py), noting
the paths it cannot see from there (issue 51, finding 4: a missing model was found only on the node,
after the wait in the queue).
"""
from __future__ import annotations

import os
from pathlib import Path

from src.plan.inputs import Input

_WHERE = "fix the path in conf/local/default.yaml (paths.*) or prepare it"


def problem(inp: Input) -> str | None:
    """Why `inp` is not usable as it stands, or None. A hub id (resolved from the node's HF cache by the
    scorer, before torch is imported) and what a launch builds (model.build_dir) are never missing here."""
    if inp.hub_id or inp.built:
        return None
    p = Path(inp.path)
    if inp.role == "model" and not p.exists():
        return f"{inp.what} not found at {inp.path}; {_WHERE} (docs/data-and-report.md)"
    if inp.role == "data" and not p.exists():
        split = "val" if inp.key == "data.val_files" else "train"
        return (f"{inp.what} not found at {inp.path}; {_WHERE} (python -m src.data.prepare ... --split {split} "
                f"--out {inp.path})")
    if inp.role == "qe" and not p.exists():
        return (f"{inp.what} not found at {inp.path}; put the checkpoint there or fix {inp.key} "
                f"(paths.model_root in conf/local/default.yaml)")
    lacking = [f for f in inp.holds if p.is_dir() and not (p / f).is_file()]
    if lacking:
        return (f"{inp.what} at {inp.path} lacks {', '.join(lacking)}, which a kind {inp.kind} model dir holds; "
                f"point {inp.key} at the model's own dir")
    if inp.role == "qe_part" and not p.is_dir():
        return f"{inp.what} not found at {inp.path} ({inp.key})"
    return None


def problems(inputs: tuple[Input, ...] | list[Input]) -> list[str]:
    return [line for line in (problem(i) for i in inputs) if line]


def unseen_from_here(inp: Input, node_local_dirs) -> str | None:
    """Why the submitting machine cannot check `inp` (the compute node checks it), or None when it can:
    a hub id, or a path under one of slurm.node_local_dirs (a node's local disk, which this machine
    lacks or holds other files in)."""
    if inp.hub_id:
        return f"{inp.what} {inp.path} is a hub id, resolved from the compute node's Hugging Face cache"
    path = os.path.abspath(inp.path)
    for d in node_local_dirs or ():
        root = os.path.abspath(str(d)).rstrip(os.sep) or os.sep
        if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
            return f"{inp.what} {inp.path} is under {d} (slurm.node_local_dirs), which only the compute nodes hold"
    return None

"""What runs beside training on every node: the GPU split and the QE scorer hook.

The runner enters these around verl (src/runner.py `services`): each is a context manager that
starts something for as long as training runs and yields environment variables for the
processes started after it (the Ray node, verl and its reward workers inherit them).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from src.plan import RunPlan


def split_devices(plan: RunPlan, environ: dict) -> tuple[dict, str | None]:
    """(env for training, devices for the scorer). With scorer.placement=dedicated the node has
    node_gpus = training + scorer GPUs (Slurm sets CUDA_VISIBLE_DEVICES to all of them): training
    sees the first gpus_per_node, the scorer the rest, so Ray never schedules onto the scorer's GPU."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if plan.scorer_gpus_per_node == 0 or not visible:
        return {}, None
    devices = [d.strip() for d in visible.split(",") if d.strip()]
    training, scorer = devices[:plan.gpus_per_node], devices[plan.gpus_per_node:plan.node_gpus]
    return {"CUDA_VISIBLE_DEVICES": ",".join(training)}, ",".join(scorer) or None


@contextlib.contextmanager
def scorer(plan: RunPlan, node_rank: int, run_dir: Path, environ: dict,
           scorer_devices: str | None) -> Iterator[dict]:
    """HOOK for the QE scoring service (src/scorer, own env .venv-scorer): one per node.

    To wire it: start `<scorer.python> -m src.scorer.serve --config <run dir>/scorer-<rank>.yaml
    --ready-file <run dir>/scorer-<rank>.ready.json` with CUDA_VISIBLE_DEVICES=scorer_devices
    (dedicated) or the training GPUs (shared) and QE_SCORER_TOKEN in its environment only, wait
    for the ready file, yield {"QE_SCORER_URL": <url from the ready file>} so this node's reward
    workers reach their local scorer, and SIGTERM it on exit. Until then nothing is started and
    rewards that need a scorer cannot run (dry runs and the tests' stand-in do not need one).
    """
    del plan, node_rank, run_dir, environ, scorer_devices
    yield {}

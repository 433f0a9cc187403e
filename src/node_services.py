"""What runs beside training on every node: the GPU split and the QE scorer hook.

The runner enters these around verl (src/runner.py `services`): each is a context manager that
starts something for as long as training runs and yields environment variables for the
processes started after it (the Ray node, verl and its reward workers inherit them).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator

from src.plan import RunPlan
from src.scorer_process import ScorerProcess


def split_devices(plan: RunPlan, environ: dict) -> tuple[dict, str | None]:
    """(env for training, CUDA_VISIBLE_DEVICES for the scorer; None: no scorer runs).

    shared: the scorer sees the one training GPU the plan chose. dedicated: the node has
    node_gpus = training + scorer GPUs (Slurm sets CUDA_VISIBLE_DEVICES to all of them): training
    sees the first gpus_per_node, the scorer the rest, so Ray never schedules onto the scorer's GPU.
    cpu: the scorer sees no GPU. Without CUDA_VISIBLE_DEVICES the node's GPUs are 0..node_gpus-1."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    devices = ([d.strip() for d in visible.split(",") if d.strip()] if visible
               else [str(i) for i in range(plan.node_gpus)])
    training = devices[:plan.gpus_per_node]
    training_env = {"CUDA_VISIBLE_DEVICES": ",".join(training)} if plan.scorer_gpus_per_node else {}
    s = plan.scorer
    if s is None:
        return training_env, None
    if s.placement == "shared":
        scorer = training[s.training_gpu_index] if s.training_gpu_index < len(training) else str(s.training_gpu_index)
    elif s.placement == "dedicated":
        scorer = ",".join(devices[plan.gpus_per_node:plan.node_gpus])
    else:
        scorer = ""
    return training_env, scorer


@contextlib.contextmanager
def scorer(plan: RunPlan, node_rank: int, run_dir: Path, environ: dict, scorer_devices: str | None,
           on_fatal: Callable[[str], None], enabled: bool = True) -> Iterator[dict]:
    """This node's QE scoring service (src/scorer in .venv-scorer) for as long as the block runs.

    Yields QE_SCORER_URL / QE_SCORER_TOKEN / QE_SCORER_LOG for the processes started after it: on a
    single node verl (whose Ray workers inherit them), on a multi-node job this node's `ray start`,
    whose workers (the reward workers of this node) inherit them, so each node's reward workers use
    their own node's service on 127.0.0.1. Nothing is started when the reward needs no QE model or
    `enabled` is false (debug.skip_scorer). `on_fatal(reason)`: the service died for good during
    training (src/scorer_process.py)."""
    if plan.scorer is None or not enabled:
        yield {}
        return
    service = ScorerProcess(plan.scorer, Path(run_dir) / "scorer", f"node-{node_rank}", environ, scorer_devices,
                            on_fatal)
    try:
        env = service.start()
        print(f"QE scorer (node {node_rank}) ready at {env['QE_SCORER_URL']} "
              f"({', '.join(m.name for m in plan.scorer.models)}; {plan.scorer.placement}); log: {service.log_path}",
              flush=True)
        yield env
    finally:
        service.stop()

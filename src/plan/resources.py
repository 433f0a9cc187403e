"""What each node asks for: training GPUs + dedicated scorer GPUs, and the CPUs Ray needs there."""
from __future__ import annotations

from src.config.schema import Placement

from .values import at_least


def ray_cpus_for(gpus: int) -> int:
    """Logical CPUs Ray needs for `gpus` GPUs: each GPU bundle reserves 3, TransferQueue 9 more, +1
    (verl 0.9.1: each GPU bundle asks for `max_colocate_count` = 3 CPUs, verl/single_controller/ray/base.py
    ResourcePoolManager; with fewer, Ray waits for the placement group forever, without a message)."""
    return 3 * gpus + 10


def node_resources(cfg: dict, gpus_per_node: int) -> tuple[int, int]:
    """(dedicated scorer GPUs per node, CPUs per node). A multi-node job asks Slurm for one task of
    this size on every node; slurm.cpus_per_task can only raise the CPUs."""
    scorer = cfg["scorer"]
    scorer_gpus = 0
    if scorer["placement"] == Placement.dedicated:
        scorer_gpus = at_least(scorer["dedicated_gpus"], 1, "scorer.dedicated_gpus", "scorer.dedicated_gpus=1")
    cpus = ray_cpus_for(gpus_per_node)
    asked = (cfg.get("slurm") or {}).get("cpus_per_task")
    if asked is not None:
        cpus = max(cpus, at_least(asked, 1, "slurm.cpus_per_task", f"slurm.cpus_per_task={cpus}"))
    return scorer_gpus, cpus

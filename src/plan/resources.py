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


# Ray's resource counts a driver may give only when it starts Ray itself
RAY_INIT_RESOURCES = ("ray_kwargs.ray_init.num_cpus", "ray_kwargs.ray_init.num_gpus")


def for_joined_cluster(verl_keys: dict, nodes: int) -> dict:
    """An accelerator's verl keys for a run on `nodes` nodes. With more than one, verl's driver joins the Ray
    cluster the launcher started, whose nodes were given their CPUs and (fake) GPUs by `ray start --num-cpus
    --num-gpus` (src/node/ray_cluster.py), and ray.init refuses resource counts when it connects (ray 2.60
    ray/_private/worker.py init: "When connecting to an existing cluster, num_cpus and num_gpus must not be
    provided"): those keys go."""
    return verl_keys if nodes == 1 else {k: v for k, v in verl_keys.items() if k not in RAY_INIT_RESOURCES}

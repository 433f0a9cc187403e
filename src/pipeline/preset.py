"""A preset's batch geometry at another GPU count: `experiment=<preset>` sets its GPU count (e.g.
qwen3b_xcomet_3gpu: gpus=3), and a run of it with another `gpus=`/`nodes=` gets the batch sizes the
plan derives for that count (48 -> 50 prompts per step at 5 GPUs), hence another wandb project
(`-s<samples per step>`). The plan says so, instead of a run that silently trains on other batches
than the preset's (issue 33).
"""
from __future__ import annotations

import re

from src import config
from src.plan import RunPlan, build_plan

PRESET = re.compile(r"^\+*experiment=(.+)$")
GPU_COUNT = re.compile(r"^\+*(gpus|nodes)=")


def preset_of(overrides: list[str]) -> str | None:
    """The experiment preset a run starts from (`experiment=smoke_tiny`), or None."""
    found = [m.group(1) for m in map(PRESET.match, overrides) if m]
    return found[-1] if found else None


def _geometry(plan: RunPlan) -> str:
    b = plan.batch
    return f"{b.prompts_per_step} prompts per step, mini batch {b.mini_batch_prompts}, {b.samples_per_step} samples per step"


def moved_geometry_note(plan: RunPlan, overrides: list[str]) -> str | None:
    """The line the plan prints when a preset's batch geometry moved because this run's GPU count is
    not the preset's, or None (no preset, the preset's count, or the same geometry at this count)."""
    preset_name = preset_of(overrides)
    if not preset_name or not any(GPU_COUNT.match(o) for o in overrides):
        return None
    try:
        cfg = config.compose_config_in_app([o for o in overrides if not GPU_COUNT.match(o)])
        preset = build_plan(cfg, run_dir="preset", gpu_memory_gb=plan.memory.gpu_gb)
    except Exception:  # noqa: BLE001 - the preset at its own count does not plan here: nothing to compare
        return None
    if preset.world_size == plan.world_size or _geometry(preset) == _geometry(plan):
        return None
    return (f"experiment={preset_name} is set for G={preset.world_size} ({_geometry(preset)}); at G={plan.world_size} "
            f"the plan moved that to {_geometry(plan)} (the plan's adjustments say why): this run trains on other batches than "
            f"the preset's runs and logs to wandb project {plan.wandb_project}, not {preset.wandb_project}")

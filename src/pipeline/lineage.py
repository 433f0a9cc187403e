"""A run's names and lineage: its id computed from the verl config, and how a --from-snapshot run
relates to the run it came from (a reproduction in a new dir, or --resume in the original's dir).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import OmegaConf

from src import verl_config
from src.plan import RunPlan, with_identity
from src.record import identity


@dataclass(frozen=True)
class Lineage:
    """A --from-snapshot run: the original's plan.json (its checkpoint dir, id, reproduction) and
    whether this run continues it (--resume) or reproduces it from step 0 in a new dir."""
    original: dict
    resume: bool


def identify(plan: RunPlan, composed: dict, overrides: list[str], verl_cfg, lineage: "Lineage | None"):
    """(plan with its run's names, verl config with those names filled in, identity dict). The id
    is computed from the verl config with the name/dir keys excluded, so filling them in after
    does not change it (src/record/identity.py)."""
    models = {m.name: {"path": m.path, "kind": m.kind, "dtype": plan.scorer.dtype}
              for m in (plan.scorer.models if plan.scorer else ())}
    ident = identity.identity(OmegaConf.to_container(verl_cfg, resolve=True), models)
    rid = identity.run_id(ident)
    name = identity.readable_name(overrides, plan.seed)
    if lineage is None:
        plan = with_identity(plan, rid, name)
    elif lineage.resume:
        # continue the original in its own dir, whatever the id of today's config: the dir's
        # identity file then says whether it still is the same training config
        original = lineage.original
        plan = with_identity(plan, original.get("run_id") or rid, name)
        plan = replace(plan, checkpoint_dir=original["checkpoint_dir"], reproduces=original.get("reproduces"),
                       wandb_run_id=original.get("wandb_run_id") or plan.wandb_run_id,
                       wandb_run_name=original.get("wandb_run_name") or plan.wandb_run_name)
    else:
        source = lineage.original.get("run_id") or rid
        base = with_identity(plan, rid, name).checkpoint_dir
        # the N-th reproduction gets the first free dir: a reproduction never resumes another's checkpoints
        n = next(i for i in range(1, 10_000) if not Path(f"{base}-repro{i}").exists())
        plan = with_identity(plan, rid, name, reproduces=source, reproduction=n)
    user_set = set(plan.verl_passthrough)
    for key, source_fn in verl_config.VERL_KEYS:
        bare = key.lstrip("+")
        # a hand-set path (+verl.trainer.default_local_dir=...) stays the user's
        if identity.is_excluded(bare) and bare not in user_set:
            OmegaConf.update(verl_cfg, bare, source_fn(plan, composed), force_add=True)
    if "trainer.default_local_dir" in user_set:
        # the metrics, identity file and preflight follow the dir verl will really use
        plan = replace(plan, checkpoint_dir=str(verl_cfg.trainer.default_local_dir))
    # verl's rollout.yaml sets these to ${oc.select:trainer.project_name/experiment_name}; the config
    # was resolved before the names existed
    trace = verl_cfg.actor_rollout_ref.rollout.trace
    trace.project_name, trace.experiment_name = verl_cfg.trainer.project_name, verl_cfg.trainer.experiment_name
    return plan, verl_cfg, ident


def lineage_line(plan: RunPlan, lineage: "Lineage | None") -> str | None:
    if lineage is None:
        return None
    original = lineage.original.get("run_id") or "?"
    if lineage.resume:
        return f"resuming run {original} in its own dir {plan.checkpoint_dir} (--from-snapshot --resume)"
    return (f"reproducing run {original} from step 0 into a new dir {plan.checkpoint_dir} "
            f"(--from-snapshot; add --resume to continue the original instead)")

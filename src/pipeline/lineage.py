"""A run's names and lineage: its id computed from the verl config, and how a --from-snapshot run
relates to the run it came from (a reproduction in a new dir, or --resume in the original's dir).
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from src import config, verl_config
from src.plan import RunPlan, build_plan, earlier_names, run_names, with_identity
from src.record import identity
from src.record.reward_weights import TRAIN_WEIGHTS_KEY

from . import baseline_cache
from .errors import UsageError
from .preset import preset_of
from .replay import Replay

# an identity key of one component's training weight: this, then the component's name
TRAIN_WEIGHT_PREFIX = TRAIN_WEIGHTS_KEY + "."
# What a replayed verl config (--from-snapshot, src/pipeline/replay.py) takes from this run: its
# names and the dirs it writes to. Each is EXCLUDED from the run's identity (src/record/identity.py
# says why none changes what is trained). Every other value is the snapshot's.
RUN_NAMES_AND_PATHS = ("trainer.project_name", "trainer.experiment_name", "trainer.default_local_dir",
                       "trainer.validation_data_dir", "ray_kwargs.timeline_json_file", "global_profiler.save_path")


@dataclass(frozen=True)
class Lineage:
    """A --from-snapshot run: the original's plan.json (its checkpoint dir, id, reproduction),
    whether this run continues it (--resume) or reproduces it from step 0 in a new dir, and the
    snapshot's verl config it replays (None: built from the plan, as for a new run)."""
    original: dict
    resume: bool
    replay: Optional[Replay] = None


def verl_config_for(plan: RunPlan, composed: dict, lineage: "Lineage | None") -> DictConfig:
    """The verl config this run runs, validated by verl: the snapshot's own for --from-snapshot
    (src/pipeline/replay.py says why), else built from the plan. Raises on verl's refusal."""
    if lineage is not None and lineage.replay is not None:
        return lineage.replay.config()
    return verl_config.build(plan, composed)


def scorer_models(plan: RunPlan) -> dict:
    """The QE models the reward scores with, as the identity records them (they live outside verl's config)."""
    return {m.name: {"path": m.path, "kind": m.kind, "dtype": plan.scorer.dtype}
            for m in (plan.scorer.models if plan.scorer else ())}


def baseline_identity(plan: RunPlan, preset: str | None = None,
                      weights: tuple[tuple[str, float], ...] = ()) -> dict | None:
    """The identity of this run's experiment preset (`preset`, when it starts from one), model, reward (and its
    mode), algo, GPU count, seed and accelerator with nothing else set: what the run's name is read against
    (src/plan/run_names.py). Nothing of the command line but those, so the name is a function of the id
    (and the preset it names): a setting that changes what is
    trained (paths.model_root: other weights; memory.gpu_gb: vLLM's share) is named like any key, one
    that does not (paths.results_root, logger) names nothing. None when that config does not plan
    (e.g. its default batch does not fit): the name is then the seed alone. `weights`: (component, weight) set
    over the group's (names_read)."""
    # the accelerator too (its group is named by trainer.device, which the id holds): what a CPU run needs
    # of verl (conf/accelerator/cpu.yaml) is where it runs, not a setting to name
    # LoRA's rank as the model's part of the name has it (src/plan/run_names.py model_label): a LoRA run is read
    # against a LoRA run, so what LoRA itself changes (vLLM's share) is not named twice
    # the algo preset by its own name: a run's `grpo+rloo` is read against grpo (src/config/presets.py label)
    # the experiment preset first: the groups named after it are this run's (Hydra applies them over the preset's)
    found = _baseline(((f"experiment={preset}",) if preset else ()) + (
        f"model={plan.model}", f"model.lora.rank={plan.lora_rank}", f"reward={plan.reward}", f"reward.mode={plan.reward_mode}",
        f"algo={plan.algo_preset or plan.algo}", f"gpus={plan.gpus_per_node}", f"nodes={plan.nodes}",
        f"seed={plan.seed}", f"accelerator={plan.device}") + tuple(f"++reward.weights.{c}={w!r}" for c, w in weights),
        plan.memory.gpu_gb)
    return None if found is None else dict(found)


@functools.lru_cache(maxsize=64)
def _baseline(base: tuple[str, ...], gpu_memory_gb: float) -> tuple | None:
    # remembered per process (a sweep's jobs share a few baselines) and on disk (every launch of the same preset,
    # model, reward, algo, GPU count and seed reads the same one): each is a Hydra composition, a plan and verl's
    # config, about half a second
    return baseline_cache.remembered(base, gpu_memory_gb, lambda: _composed_baseline(base, gpu_memory_gb))


def _composed_baseline(base: tuple[str, ...], gpu_memory_gb: float) -> tuple[tuple | None, bool]:
    """(the baseline identity's items or None, whether they may be stored: not when reward plugins, files outside
    the code, made them)."""
    try:
        cfg = config.compose_config_in_app(list(base))  # a run is a Hydra app's job
        # the GPU size the launcher read (used where memory.gpu_gb is null): the baseline of this machine
        base_plan = build_plan(cfg, run_dir="baseline", gpu_memory_gb=gpu_memory_gb)
        verl_cfg = verl_config.unvalidated(base_plan, cfg)
    except Exception:  # noqa: BLE001 - any config this run's own did not need: the name falls back to the seed
        return None, False
    found = identity.identity(OmegaConf.to_container(verl_cfg, resolve=True), scorer_models(base_plan))
    return tuple(found.items()), not (cfg.get("reward") or {}).get("plugins")


def names_read(plan: RunPlan, preset: str | None, ident: dict, baseline: dict | None) -> list:
    """What the run's name reads: its differences from the baseline (run_names.differences), less what a changed
    reward weight brings with it. A component outside every run (the term reward) joins with its validation weight,
    its clip and its guard (term_stuffing) at the values the reward group gives them, and leaves with them at weight
    0: against a preset without it (or with it), each of those would be a word (`term1.0_valterm0.0_maxextra1_
    +4more`) where the one change is the weight. They are read against the baseline with the run's changed weights
    instead, so a value of theirs that the run changes itself is still named."""
    derived = verl_config.derived_keys()
    if baseline is None:
        return run_names.differences(ident, ident, derived)
    differs = run_names.differences(ident, baseline, derived)
    weights = tuple(sorted((k[len(TRAIN_WEIGHT_PREFIX):], v) for k, v in ident.items()
                           if k.startswith(TRAIN_WEIGHT_PREFIX) and baseline.get(k, run_names.ABSENT) != v))
    with_them = baseline_identity(plan, preset, weights) if weights else None
    if with_them is None:
        return differs
    kept = {d.key for d in run_names.differences(ident, with_them, derived)} | {TRAIN_WEIGHT_PREFIX + c
                                                                                for c, _ in weights}
    return [d for d in differs if d.key in kept]


def identify(plan: RunPlan, composed: dict, overrides: list[str], verl_cfg, lineage: "Lineage | None"):
    """(plan with its run's names, verl config with those names filled in, identity dict). The id
    is computed from the verl config with the name/dir keys excluded, so filling them in after
    does not change it (src/record/identity.py)."""
    ident = identity.identity(OmegaConf.to_container(verl_cfg, resolve=True), scorer_models(plan))
    rid = identity.run_id(ident)
    if lineage is None:
        preset = preset_of(overrides)
        baseline = baseline_identity(plan, preset)
        differs = names_read(plan, preset, ident, baseline)
        name = run_names.run_name(preset if baseline is not None else None, plan.seed, differs,
                                  run_names.name_budget(plan.model, plan.algo, plan.world_size, rid))
        earlier_prefix, earlier_project = earlier_names(plan)
        plan = with_identity(plan, rid, name, differs=tuple(asdict(d) for d in differs))
        if not Path(plan.checkpoint_dir).exists() and "trainer.default_local_dir" not in plan.verl_passthrough:
            # a run launched before its names changed (issues 33, 51) resumes where its checkpoints are
            found = identity.earlier_dirs([Path(plan.checkpoint_dir).parent, Path(earlier_prefix)], rid, ident)
            if len(found) > 1:
                raise UsageError(f"run {rid} has checkpoints in {len(found)} dirs ({', '.join(map(str, found))}); "
                                 f"choose the one to resume with +verl.trainer.default_local_dir=<dir>")
            if found:
                old = found[0]
                plan = replace(plan, checkpoint_dir=str(old), earlier_dir_of=plan.checkpoint_dir,
                               wandb_run_name=run_names.wandb_name(plan.model, plan.algo, plan.world_size, old.name),
                               wandb_project=(earlier_project if str(old.parent) == earlier_prefix
                                              else plan.wandb_project))
    elif lineage.resume:
        # continue the original in its own dir, whatever the id of today's config: the dir's
        # identity file then says whether it still is the same training config
        original = lineage.original
        name = run_names.name_of_dir(original["checkpoint_dir"], original.get("run_id") or "")
        plan = with_identity(plan, original.get("run_id") or rid, name)
        plan = replace(plan, checkpoint_dir=original["checkpoint_dir"], reproduces=original.get("reproduces"),
                       wandb_run_id=original.get("wandb_run_id") or plan.wandb_run_id,
                       wandb_run_name=original.get("wandb_run_name") or plan.wandb_run_name)
    else:
        original = lineage.original
        source = original.get("run_id") or rid
        # a reproduction lies beside its original, named as it and in its wandb project, so the two are
        # compared side by side (today's names may differ: issue 33 renamed `comet_off` to `comet`)
        name = run_names.name_of_dir(original["checkpoint_dir"], original.get("run_id") or "")
        plan = replace(plan, checkpoint_dir=str(Path(original["checkpoint_dir"]).parent),
                       wandb_project=original.get("wandb_project") or plan.wandb_project)
        base = with_identity(plan, rid, name).checkpoint_dir
        # the N-th reproduction gets the first free dir: a reproduction never resumes another's checkpoints
        n = next(i for i in range(1, 10_000) if not Path(f"{base}-repro{i}").exists())
        plan = with_identity(plan, rid, name, reproduces=source, reproduction=n)
    user_set = set(plan.verl_passthrough)
    replayed = lineage is not None and lineage.replay is not None
    before = {}
    for key, source_fn in verl_config.VERL_KEYS:
        bare = key.lstrip("+")
        # a hand-set path (+verl.trainer.default_local_dir=...) stays the user's
        if identity.is_excluded(bare) and bare not in user_set and (not replayed or bare in RUN_NAMES_AND_PATHS):
            before[bare] = OmegaConf.select(verl_cfg, bare)
            OmegaConf.update(verl_cfg, bare, source_fn(plan, composed), force_add=True)
    # verl's config is resolved (validated) before the names exist: values its yaml derives from them
    # (each role's profiler.save_path from global_profiler.save_path) follow, in a new run as in a replay
    _follow(verl_cfg, {old: OmegaConf.select(verl_cfg, k) for k, old in before.items()
                       if isinstance(old, str) and old and old != OmegaConf.select(verl_cfg, k)}, set(before))
    if "trainer.default_local_dir" in user_set:
        # the metrics, identity file and preflight follow the dir verl will really use
        plan = replace(plan, checkpoint_dir=str(verl_cfg.trainer.default_local_dir))
    # verl's rollout.yaml sets these to ${oc.select:trainer.project_name/experiment_name}; the config
    # was resolved before the names existed
    trace = verl_cfg.actor_rollout_ref.rollout.trace
    trace.project_name, trace.experiment_name = verl_cfg.trainer.project_name, verl_cfg.trainer.experiment_name
    return plan, verl_cfg, ident


def _follow(verl_cfg, moved: dict, already: set[str]) -> None:
    """verl's config is resolved (a stored one, or one validated before the run's names existed):
    values verl's yaml derives from a name or path above (each role's profiler.save_path from
    global_profiler.save_path, ...) hold the earlier one. Each such value, or a path under it,
    becomes this run's. `already`: the keys just set to this run's values (a new run's dir lies under the
    placeholder dir it replaces, so moving it again would nest it)."""
    def walk(node, prefix: str):
        for key in list(node.keys()):
            if OmegaConf.is_missing(node, key):  # `???` in verl's yaml stays as it is
                continue
            value = node[key]
            if f"{prefix}{key}" in already:
                continue
            if isinstance(value, DictConfig):
                walk(value, f"{prefix}{key}.")
            elif isinstance(value, str):
                for old, new in moved.items():
                    if value == old or (isinstance(new, str) and value.startswith(old.rstrip("/") + "/")):
                        node[key] = new + value[len(old):] if isinstance(new, str) else new
                        break
    walk(verl_cfg, "")


def lineage_line(plan: RunPlan, lineage: "Lineage | None") -> str | None:
    if lineage is None:
        if plan.earlier_dir_of:
            return (f"run {plan.run_id} continues in its dir {plan.checkpoint_dir}, named as runs were before "
                    f"issues 33 and 51 (a new run of this config would be named {plan.earlier_dir_of})")
        return None
    # a snapshot written before run ids existed: its id is computed now, from its own verl config
    original = lineage.original.get("run_id") or plan.reproduces or plan.run_id
    if lineage.resume:
        return f"resuming run {original} in its own dir {plan.checkpoint_dir} (--from-snapshot --resume)"
    return (f"reproducing run {original} from step 0 into a new dir {plan.checkpoint_dir} "
            f"(--from-snapshot; add --resume to continue the original instead)")

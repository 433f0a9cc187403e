"""The run plan: every derived value of a run, computed from the composed config.

Pure: no I/O, no environment, no clock. Input is the composed config as a plain dict (and the
run dir Hydra chose, the GPU size the launcher read, and whether the train env has flash-attn,
which attention.py probes when the caller does not say); output is a `RunPlan` that the launcher
prints, snapshots, and turns into a verl config. Everything derived is derived in this package and nowhere else; this module puts
the parts together (batch.py, scorer.py, resources.py, memory_inputs.py, stop_rules.py,
time_limit.py, attention.py, and the reward's kwargs and token-credit plan of src/rewards/launch.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Optional

from src.config import presets
from src.config.schema import Placement
from src.rewards import normalise
from src.rewards.credit import launch as credit_launch
from src.rewards.credit.launch import TokenCreditPlan
from src.rewards.launch import REFUSALS as REWARD_REFUSALS
from src.rewards.launch import reward_launch

from . import algorithm, run_names
from .run_names import checkpoint_prefix, reward_names, wandb_project
from .attention import AttentionPlan, installed_flash_attn, plan_attention
from .sampler import SamplerPlan, installed_flashinfer, plan_sampler
from .batch import PIN_KEYS, BatchPlan, plan_batch
from .memory import MemoryPlan, plan_memory
from .memory_inputs import gpu_size_gb, memory_inputs, refusal
from .resources import for_joined_cluster, node_resources, ray_cpus_for
from .schedule import Schedule, schedule_of
from .scorer import ScorerPlan, models_needed, scorer_plan
from .stop_rules import StopRules, stop_rules
from .stall import StallPlan, plan_stall
from .time_limit import TimeLimitPlan, plan_time_limit
from .values import Adjustment, PlanError, at_least, check_ranges, flatten


@dataclass(frozen=True)
class RunPlan:
    model: str
    model_path: str
    # model.lora.rank (0: the whole model trains): a LoRA run's dirs and wandb name say so (run_names.model_label)
    lora_rank: int
    reward: str
    reward_mode: str
    # the algorithm's name in dirs and wandb: the preset's, plus any estimator or loss the run changed
    # (src/config/presets.py label: `grpo+rloo`)
    algo: str
    seed: int
    gpus_per_node: int
    nodes: int
    world_size: int
    batch: BatchPlan
    samples_per_step: int
    adjustments: tuple[Adjustment, ...]
    checkpoint_dir: str
    run_dir: str
    wandb_project: str
    wandb_run_name: str
    ray_cpus_needed: int
    ray_num_cpus: Optional[int]
    scorer_models: tuple[str, ...]
    # GPUs of each node reserved for the QE scorer beyond the training GPUs (placement=dedicated)
    scorer_gpus_per_node: int
    # what each node (one Slurm task per node) needs: training GPUs + dedicated scorer GPUs, and
    # the CPUs Ray needs there (3 per training GPU + 10) or more if the user asks (slurm.cpus_per_task)
    node_gpus: int
    node_cpus: int
    # wandb run id, stable per run id: a requeued or resumed run continues its wandb run.
    # Passed to verl through the environment (WANDB_RUN_ID); "" until with_identity
    wandb_run_id: str
    train_files: str
    val_files: str
    max_prompt_length: int
    max_response_length: int
    logger_backends: tuple[str, ...]
    wandb_offline: bool
    device: str
    accelerator_env: dict
    # vLLM's share: model.gpu_memory_utilization lowered to what the memory plan leaves free
    gpu_memory_utilization: float
    # None when the reward needs no QE model: no service is started
    scorer: Optional[ScorerPlan]
    memory: MemoryPlan
    # reward.custom_reward_function.reward_kwargs: what verl passes to compute_score (src/rewards/launch.py)
    reward_kwargs: dict
    # verl keys the user passed through `verl.*` (batch pins removed; they live in `batch`)
    verl_passthrough: dict = field(default_factory=dict)
    # verl keys the accelerator needs (accelerator.verl, dotted), applied before verl_passthrough
    accelerator_verl: dict = field(default_factory=dict)
    # the training processes' interpreter (accelerator.python); None: the launcher's own
    trainer_python: Optional[str] = None
    # 8 hex (src/record/identity.py) once with_identity is applied; the original run's id when this
    # run reproduces it from its snapshot
    run_id: str = ""
    reproduces: Optional[str] = None
    # the dir today's names give this run when it continues in a dir named as before issue 33
    # (src/pipeline/lineage.py: an in-flight run resumes where its checkpoints are)
    earlier_dir_of: Optional[str] = None
    # what stops training instead of letting it shrink or spin (src/plan/stop_rules.py)
    stop_rules: Optional[StopRules] = None
    # Slurm's time limit and when the step in progress is saved before it (src/plan/time_limit.py)
    time_limit: Optional[TimeLimitPlan] = None
    # outside Slurm, a SIGTERM to the launcher saves the step in progress within this (src/node/training.py)
    preempt_grace_s: Optional[float] = None
    # when a run with no step ending is stopped as stalled (src/plan/stall.py)
    stall: Optional[StallPlan] = None
    # reward.credit=token: estimator, agent loop and token weights (src/rewards/credit/launch.py); None: sequence
    token_credit: Optional[TokenCreditPlan] = None
    # attention implementation of the actor/ref model and verl's remove-padding switch (src/plan/attention.py)
    attention: Optional[AttentionPlan] = None
    # vLLM's top-k/top-p sampler and the env var it takes without flashinfer (src/plan/sampler.py)
    sampler: Optional[SamplerPlan] = None
    # the conf/algo preset the run starts from (what its name is read against, src/pipeline/lineage.py)
    algo_preset: str = ""
    # verl's algorithm.adv_estimator: the algo's, or the one reward.credit / reward.normalise put in place
    estimator: str = ""
    # what verl trains, read from the validated verl config, with sources (src/plan/algorithm.py trains;
    # filled in by with_trains once the verl config exists)
    trains: tuple = ()
    # steps, checkpoint saves and validation, read from the verl config (src/plan/schedule.py; with_trains),
    # the steps from the train file's rows once they are counted (with_train_rows)
    schedule: Optional[Schedule] = None
    # what this run trains differently from its preset, one word each ({word, key, preset, run}): what its
    # name reads, also the words the name had no room for (src/plan/run_names.py; filled in by with_identity).
    # None: named as the run it comes from (--from-snapshot), whose plan.json lists them
    differs_from_preset: Optional[tuple] = None

    @property
    def wandb_dir(self) -> Optional[str]:
        """Where wandb writes this run (WANDB_DIR is the checkpoint dir, so wandb's own `wandb/` is in it):
        every attempt of the run shares that dir, as it shares WANDB_RUN_ID. None without wandb."""
        return f"{self.checkpoint_dir}/wandb" if "wandb" in self.logger_backends else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["wandb_dir"] = self.wandb_dir
        d["batch"]["samples_per_step"] = self.batch.samples_per_step
        d["memory"]["fits"] = self.memory.fits
        if self.schedule is not None:
            d["schedule"]["steps"] = self.schedule.steps
        return d


def with_trains(plan: "RunPlan", cfg: dict, verl: dict) -> "RunPlan":
    """The plan with the rows of what verl trains, read from its resolved verl config (a plain dict)."""
    rows = algorithm.trains(cfg, verl, plan.verl_passthrough, token_credit=plan.token_credit is not None,
                            per_component=normalise.enabled(plan.reward_kwargs))
    return replace(plan, trains=tuple(asdict(r) for r in rows), schedule=schedule_of(verl))


def with_train_rows(plan: "RunPlan", train_rows: Optional[int]) -> "RunPlan":
    """The plan with the train file's row count (None: no file yet), from which its schedule counts the steps."""
    if plan.schedule is None:
        return plan
    return replace(plan, schedule=replace(plan.schedule, train_rows=train_rows))


def with_identity(plan: "RunPlan", run_id: str, name: str, reproduces: Optional[str] = None,
                  reproduction: int = 0, differs: Optional[tuple] = None) -> "RunPlan":
    """The plan with its run's names (src/plan/run_names.py makes them): checkpoint dir `<prefix>/<name>-<id>`
    (plus `-repro<N>` for the N-th reproduction of a run from its snapshot), wandb id and experiment name
    carrying the id. `plan.checkpoint_dir` is the prefix until this is applied (src/record/identity.py: the
    id is computed without the names, so they can be derived from it). `differs`: what the name reads
    (run_names.differences), every word of it, also those the name had no room for."""
    named = run_names.names(run_names.model_label(plan.model, plan.lora_rank), plan.algo, plan.world_size, name, run_id,
                            reproduction if reproduces else 0)
    return replace(plan, checkpoint_dir=f"{plan.checkpoint_dir}/{named.leaf}", run_id=run_id, reproduces=reproduces,
                   wandb_run_id=named.wandb_id, wandb_run_name=named.wandb_name,
                   differs_from_preset=plan.differs_from_preset if differs is None else differs)


_PROBE = object()


def build_plan(cfg: dict, run_dir: str, gpu_memory_gb: Optional[float] = None, flash_attn=_PROBE,
               flashinfer=_PROBE) -> RunPlan:
    """The whole run plan from the composed, resolved config (a plain dict). `gpu_memory_gb`: what
    the launcher read from the visible GPUs, used when memory.gpu_gb is null. `flash_attn`: the
    flash-attn version the train env has, or None; not given: probed (attention.installed_flash_attn).
    `flashinfer`: whether the train env has flashinfer; not given: probed (sampler.installed_flashinfer)."""
    check_ranges(cfg)
    gpus_per_node = at_least(cfg["gpus"], 1, "gpus (GPUs per node)", "gpus=4")
    nodes = at_least(cfg["nodes"], 1, "nodes", "nodes=2")
    world_size = gpus_per_node * nodes
    reward, algo, model, data = cfg["reward"], cfg["algo"], cfg["model"], cfg["data"]
    mode = reward["mode"]
    if mode not in ("off", "train", "eval"):
        raise PlanError(f"reward.mode must be off, train or eval, got {mode!r} (e.g. reward.mode=eval)")
    for key in ("max_prompt_length", "max_response_length"):
        at_least(data[key], 1, f"data.{key}", f"data.{key}=512")

    adjustments: list[Adjustment] = []
    batch = plan_batch(cfg, gpus_per_node, world_size, adjustments)

    # the reward kwargs, built once per launch; the first place a launch derives anything from the
    # reward, so its refusals come in the precheck, before anything is written
    try:
        reward_side = reward_launch(cfg)
    except REWARD_REFUSALS as exc:
        raise PlanError(str(exc)) from None
    scorer_models = models_needed(cfg)

    ray_needed = ray_cpus_for(world_size)
    ray_num_cpus = cfg.get("ray_num_cpus")
    if ray_num_cpus is not None and ray_num_cpus < ray_needed:
        raise PlanError(f"ray_num_cpus={ray_num_cpus} is below the {ray_needed} logical CPUs verl needs for "
                        f"G={world_size} (3 per GPU + 10); set ray_num_cpus>={ray_needed} or null")
    if nodes == 1 and ray_num_cpus is None:
        ray_num_cpus = ray_needed
    # multi-node: Ray is started by the node bootstrap with each node's CPUs; the driver joins it

    passthrough = {k: v for k, v in flatten(cfg.get("verl") or {}).items()
                   if k not in PIN_KEYS.values()}
    placement = Placement(cfg["scorer"]["placement"])
    if cfg["accelerator"]["device"] == "cpu" and placement not in (Placement.cpu, Placement.external):
        # experiment=smoke_tiny shares its GPU with the scorer; on the CPU loop there is none to share
        adjustments.append(Adjustment("scorer.placement", placement.value, Placement.cpu.value,
                                      "accelerator=cpu: there is no GPU for the QE scorer"))
        placement = Placement.cpu
        cfg = {**cfg, "scorer": {**cfg["scorer"], "placement": placement.value}}
    scorer_gpus, node_cpus = node_resources(cfg, gpus_per_node)
    scorer = scorer_plan(cfg["scorer"], scorer_models, placement, gpus_per_node)
    inputs = memory_inputs(cfg, batch, world_size, gpu_size_gb(cfg, gpu_memory_gb), scorer_models, placement,
                           passthrough)
    memory = plan_memory(inputs)
    if not memory.fits:
        raise refusal(cfg, inputs, memory, scorer_models, placement)
    if memory.vllm_share != memory.vllm_share_ceiling:
        why = (f"the shared scorer needs {memory.scorer_gb:.1f} GiB on training GPU {scorer.training_gpu_index}"
               if memory.scorer_on_training_gpu else "")
        resident = memory.rollout_gb - memory.vllm_gb - memory.reserve_gb - (
            memory.scorer_gb if memory.scorer_on_training_gpu else 0.0)
        why = ("; ".join(w for w in (why, f"actor/ref stay resident during rollout ({resident:.1f} GiB)") if w)
               + f" on a {memory.gpu_gb:g} GiB GPU with {memory.reserve_gb:g} GiB reserve")
        adjustments.append(Adjustment("gpu_memory_utilization", memory.vllm_share_ceiling, memory.vllm_share, why))
    rules = stop_rules(cfg)
    attention = plan_attention(model, passthrough, installed_flash_attn() if flash_attn is _PROBE else flash_attn,
                               bool(cfg.get("dry_run")))
    accelerator_env = dict(cfg["accelerator"].get("env") or {})
    sampler = plan_sampler(cfg["accelerator"]["device"], accelerator_env,
                           installed_flashinfer() if flashinfer is _PROBE else flashinfer, bool(cfg.get("dry_run")))
    limit = plan_time_limit(cfg.get("slurm") or {})
    named = reward_names(reward["name"], mode, reward_side.kwargs["models"]["span"])
    algo_label = presets.label(algo["name"], algo)
    lora_rank = (model.get("lora") or {}).get("rank", 0)  # an older snapshot has no model.lora
    model_label = run_names.model_label(model["name"], lora_rank)
    ckpt_dir = checkpoint_prefix(cfg["paths"]["results_root"], model_label, named, algo_label, world_size)
    backends = tuple(cfg["logger"]["backends"])
    return RunPlan(
        model=model["name"], model_path=model["path"], lora_rank=lora_rank, reward=reward["name"], reward_mode=mode,
        algo=algo_label, algo_preset=algo["name"], seed=cfg["seed"], gpus_per_node=gpus_per_node, nodes=nodes,
        world_size=world_size, batch=batch, samples_per_step=batch.samples_per_step,
        adjustments=tuple(adjustments),
        checkpoint_dir=ckpt_dir,
        run_dir=run_dir,
        wandb_project=wandb_project(named, batch.samples_per_step),
        # a placeholder until with_identity (the id is computed without it: src/record/identity.py)
        wandb_run_name=run_names.wandb_name(model_label, algo_label, world_size, "<run name>"),
        ray_cpus_needed=ray_needed, ray_num_cpus=ray_num_cpus,
        scorer_models=tuple(scorer_models),
        scorer_gpus_per_node=scorer_gpus, node_gpus=gpus_per_node + scorer_gpus, node_cpus=node_cpus,
        wandb_run_id="",
        train_files=data["train_files"], val_files=data["val_files"],
        max_prompt_length=data["max_prompt_length"], max_response_length=data["max_response_length"],
        logger_backends=backends, wandb_offline=bool(cfg["logger"].get("offline", False)),
        device=cfg["accelerator"]["device"], accelerator_env={**accelerator_env, **sampler.env}, sampler=sampler,
        gpu_memory_utilization=memory.vllm_share, scorer=scorer, memory=memory,
        verl_passthrough=passthrough, accelerator_verl=for_joined_cluster(flatten(cfg["accelerator"].get("verl") or {}), nodes),
        trainer_python=cfg["accelerator"].get("python"), stop_rules=rules, time_limit=limit,
        preempt_grace_s=float(cfg["trainer"]["preempt_grace_s"]),
        stall=plan_stall(cfg["trainer"]),
        reward_kwargs=reward_side.kwargs, token_credit=reward_side.token_credit, attention=attention,
        # grpo_token with reward.credit=token (src/rewards/credit/estimator.py), grpo_per_component with
        # reward.normalise=per_component (src/rewards/normalise.py; the two exclude each other), else the algo's
        estimator=normalise.adv_estimator(cfg, credit_launch.adv_estimator(reward_side.token_credit,
                                                                           algo["adv_estimator"])),
    )

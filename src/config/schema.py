"""The types of every config value the launcher reads: Hydra structured configs in the ConfigStore.

conf/config.yaml names `qe_rl_schema` first in its defaults list, so every group file, preset,
sweep, conf/local/default.yaml and command-line override is merged onto these dataclasses: a value
of the wrong type (`gpus=four`, `scorer.batch_tokens=1.5`), an unknown key in a file
(`scorer.batch_token: 1`), or a value outside an enum (`scorer.placement=gpu`) is refused by
Hydra at composition, with the key, before anything is planned. What a type cannot say (a count
must be >= 1, a delay shorter than the time limit) is checked by the plan (src/plan/), which
names the key too: every number a user sets has its interval there (src/plan/values.py RANGES,
and VERL_RANGES for the common verl numbers set through `+verl.`).

Values live in conf/ (`MISSING` here means "the yaml sets it"); the few defaults below are for
keys a file may leave out. The `reward` group is typed by src/rewards/settings.py instead, which
the reward function also runs inside verl's reward workers, and `verl` is verl's own config
(validated by verl, src/verl_config/).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

SCHEMA_NAME = "qe_rl_schema"


class Placement(StrEnum):
    """Where the QE scorer runs (scorer.placement). A StrEnum: the composed config (plain strings,
    src/config/compose.py to_plain) and the plan compare against its members, and plan.json holds the
    member's value."""
    shared = "shared"        # on one training GPU (the plan lowers vLLM's share to make room)
    dedicated = "dedicated"  # own GPU(s) beyond the training GPUs
    cpu = "cpu"              # debugging


class ScorerDtype(Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


@dataclass
class PathsSchema:
    root_dir: str = MISSING
    results_root: str = MISSING
    data_root: str = MISSING
    model_root: str = MISSING
    hf_home: str = MISSING
    hf_hub_cache: str = MISSING
    output_dir: str = MISSING


class AttnImplementation(Enum):
    auto = "auto"                            # flash_attention_2 if the train env has flash-attn, else sdpa
    flash_attention_2 = "flash_attention_2"  # needs flash-attn (make setup PLATFORM=gpu FLASH_ATTN=1)
    sdpa = "sdpa"                            # PyTorch's scaled_dot_product_attention
    eager = "eager"                          # transformers' plain attention (debugging)


@dataclass
class ModelSchema:
    name: str = MISSING
    path: str = MISSING
    use_chat_template: bool = MISSING
    params_b: float = MISSING
    num_layers: int = MISSING
    hidden_size: int = MISSING
    intermediate_size: int = MISSING
    num_attention_heads: int = MISSING
    num_kv_heads: int = MISSING
    vocab_size: int = MISSING
    rollout_tp: int = MISSING
    gpu_memory_utilization: float = MISSING
    # actor/ref attention (src/plan/attention.py chooses for auto and says why in the plan table)
    attn_implementation: AttnImplementation = AttnImplementation.auto
    # a directory: the model is built there at launch from the shape above, with the tiny QE
    # checkpoints and prompts of experiment=smoke_tiny / learn_tiny (src/pipeline/tiny_build.py); null: a real model
    build_dir: Optional[str] = None


@dataclass
class DataSchema:
    name: str = MISSING
    train_files: str = MISSING
    val_files: str = MISSING
    template: str = MISSING
    max_prompt_length: int = MISSING
    max_response_length: int = MISSING
    train_batch_size: Optional[int] = MISSING


@dataclass
class FilterGroupsSchema:
    enable: bool = MISSING
    metric: str = MISSING
    max_num_gen_batches: int = MISSING
    # verl 0.9.1's own default (algorithm.filter_groups.max_inflight_gen_batches)
    max_inflight_gen_batches: int = 1


@dataclass
class OverlongBufferSchema:
    enable: bool = MISSING
    len: int = MISSING
    penalty_factor: float = MISSING


@dataclass
class AlgoSchema:
    name: str = MISSING
    adv_estimator: str = MISSING
    norm_adv_by_std_in_grpo: bool = MISSING
    use_kl_loss: bool = MISSING
    kl_loss_coef: float = MISSING
    kl_loss_type: str = MISSING
    entropy_coeff: float = MISSING
    clip_ratio_low: float = MISSING
    clip_ratio_high: float = MISSING
    loss_agg_mode: str = MISSING
    # verl's policy loss (actor_rollout_ref.actor.policy_loss.loss_mode: a name registered with
    # core_algos.register_policy_loss); verl's own default, so a preset (or a snapshot) older than the key
    # composes to the config it had
    loss_mode: str = "vanilla"
    reward_manager: str = MISSING
    filter_groups: FilterGroupsSchema = field(default_factory=FilterGroupsSchema)
    overlong_buffer: OverlongBufferSchema = field(default_factory=OverlongBufferSchema)
    # verl keys the preset's loss or estimator reads and no field above names (dotted, from verl's root:
    # `actor_rollout_ref.actor.policy_loss.clip_cov_ratio: 0.0002`), applied after the plan's keys and
    # before the user's verl.* keys; docs/algorithms.md
    verl: Dict[str, Any] = field(default_factory=dict)


@dataclass
class EncoderShapeSchema:
    layers: int = MISSING
    hidden: int = MISSING
    ffn: int = MISSING
    heads: int = MISSING


@dataclass
class ScorerModelSchema:
    path: str = MISSING
    kind: str = MISSING
    # local dir of the encoder's config + tokenizer; None: the HF cache holds the hub name
    encoder: Optional[str] = None
    # kind metricx: local dir of the mT5 tokenizer (google/mt5-xl); None: the model dir holds one
    tokenizer: Optional[str] = None
    # size and shape for the memory plan; a model without them is refused there by name
    params_b: Optional[float] = None
    encoder_shape: Optional[EncoderShapeSchema] = None
    needs_ref: bool = False


@dataclass
class ScorerSchema:
    placement: Placement = MISSING
    dedicated_gpus: int = MISSING
    dtype: ScorerDtype = MISSING
    python: str = MISSING
    batch_tokens: int = MISSING
    ready_timeout_s: float = MISSING
    restarts: int = MISSING
    models: Dict[str, ScorerModelSchema] = field(default_factory=dict)
    lost_groups_allowed: int = MISSING


@dataclass
class LoggerSchema:
    backends: List[str] = MISSING
    offline: bool = MISSING


@dataclass
class AcceleratorSchema:
    name: str = MISSING
    # verl's trainer.device: cuda, npu or cpu
    device: str = MISSING
    # variables of every training process (verl, its Ray workers, vLLM)
    env: Dict[str, str] = field(default_factory=dict)
    # the training processes' interpreter; null: the launcher's own (cpu: the loop env, conf/accelerator/cpu.yaml)
    python: Optional[str] = None
    # verl keys this accelerator needs (dotted), applied after the plan's and before the user's verl.* keys
    verl: Dict[str, Any] = field(default_factory=dict)


@dataclass
class BatchSchema:
    prompts_per_step: int = MISSING
    samples_per_prompt: int = MISSING
    mini_batch_prompts: int = MISSING
    micro_batch_per_gpu: int = MISSING
    log_prob_micro_batch_per_gpu: int = MISSING
    dynamic_bsz: bool = MISSING
    max_token_len_per_gpu: Optional[int] = MISSING


@dataclass
class TrainerSchema:
    total_epochs: int = MISSING
    total_training_steps: Optional[int] = MISSING
    save_freq: int = MISSING
    test_freq: int = MISSING
    val_before_train: bool = MISSING
    resume_mode: str = MISSING
    lr: float = MISSING


@dataclass
class MemorySchema:
    gpu_gb: Optional[float] = MISSING
    reserve_gb: float = MISSING


@dataclass
class ProfileSchema:
    enable: bool = MISSING
    steps: List[int] = MISSING


@dataclass
class SlurmSchema:
    partition: Optional[str] = MISSING
    account: Optional[str] = MISSING
    qos: Optional[str] = MISSING
    constraint: Optional[str] = MISSING
    cpus_per_task: Optional[int] = MISSING
    mem_gb: Optional[int] = MISSING
    timeout_min: int = MISSING
    signal_delay_s: int = MISSING
    max_num_timeout: int = MISSING
    wandb_mode: str = MISSING
    setup: List[str] = MISSING


@dataclass
class DebugSchema:
    train_command_override: Optional[str] = MISSING
    nodes_as_tasks: bool = MISSING
    skip_scorer: bool = MISSING


@dataclass
class LearnSchema:
    """The verdict on whether the policy learnt (src/pipeline/learning.py): experiment=learn_tiny enables it."""
    # after training, the launcher checks the rises below and fails the run (exit 1) when either is short
    enable: bool = False
    # the trained reward (critic/score/mean) averaged over the last `window` steps minus over the first `window`
    window: int = 5
    # ... must be at least this. The margins sit at or above the spread of each rise across seeds 1-3 and
    # below the smallest rise (benches/learn.py, benches/RESULTS.md "The loop learns": trained +0.54..+0.79,
    # spread 0.24; held out +0.86..+1.45, spread 0.59)
    min_rise: float = 0.3
    # the held-out metric: val-aux/<data source>/<val_metric>/mean@N at the last validation minus before
    # training; score: the reward function's own score on the validation prompts
    val_metric: str = "score"
    # ... must be at least this, in the metric's own units
    min_val_rise: float = 0.6


@dataclass
class Config:
    paths: PathsSchema = field(default_factory=PathsSchema)
    model: ModelSchema = field(default_factory=ModelSchema)
    data: DataSchema = field(default_factory=DataSchema)
    # typed by src/rewards/settings.py (see the module docstring)
    reward: Any = MISSING
    algo: AlgoSchema = field(default_factory=AlgoSchema)
    logger: LoggerSchema = field(default_factory=LoggerSchema)
    accelerator: AcceleratorSchema = field(default_factory=AcceleratorSchema)
    scorer: ScorerSchema = field(default_factory=ScorerSchema)
    # GPUs per node; any count is accepted here, the plan refuses < 1 and counts verl cannot split
    gpus: int = MISSING
    nodes: int = MISSING
    seed: int = MISSING
    dry_run: bool = MISSING
    batch: BatchSchema = field(default_factory=BatchSchema)
    trainer: TrainerSchema = field(default_factory=TrainerSchema)
    memory: MemorySchema = field(default_factory=MemorySchema)
    ray_num_cpus: Optional[int] = MISSING
    profile: ProfileSchema = field(default_factory=ProfileSchema)
    verl: Dict[str, Any] = field(default_factory=dict)
    slurm: SlurmSchema = field(default_factory=SlurmSchema)
    debug: DebugSchema = field(default_factory=DebugSchema)
    # experiment=smoke sets it: the launcher then checks the run stage by stage (src/pipeline/smoke.py)
    smoke: bool = False
    # experiment=learn_tiny enables it: after training, the launcher checks that the policy learnt
    learn: LearnSchema = field(default_factory=LearnSchema)


def register() -> None:
    """Store the schema in Hydra's ConfigStore (idempotent: storing again replaces the same node)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA_NAME, node=Config)

"""The types of every config value the launcher reads: Hydra structured configs in the ConfigStore.

conf/config.yaml names `qe_rl_schema` first in its defaults list, so every group file, preset,
sweep, conf/local/default.yaml and command-line override is merged onto these dataclasses: a value
of the wrong type (`gpus=four`, `scorer.batch_tokens=1.5`), an unknown key in a file
(`scorer.batch_token: 1`), or a value outside an enum (`scorer.placement=gpu`) is refused by
Hydra at composition, with the key, before anything is planned. What a type cannot say (a count
must be >= 1, a delay shorter than the time limit) is checked by the plan (src/plan/), which
names the key too.

A field declared with `setting(...)` (src/config/settings_field.py) carries its facts in one place: its doc line, the interval a
number must lie in (with an example), and the verl key the launcher copies it to. The plan's range
table (src/plan/values.py RANGES, and the same interval for that verl key reached through `+verl.`:
VERL_RANGES) and the plan -> verl table (src/verl_config/ppo_trainer.py VERL_KEYS) are derived from
these (`settings()`), not restated.

Values live in conf/ (`MISSING` here means "the yaml sets it"); the few defaults below are for
keys a file may leave out. The `reward` group's types are src/config/reward_schema.py's (its values
are checked again by src/rewards/settings.py, which the reward workers run on verl's reward kwargs),
and `verl` is verl's own config (validated by verl, src/verl_config/).
"""
from __future__ import annotations

import functools
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum, StrEnum
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from .reward_schema import RewardSchema
from .settings_field import setting

SCHEMA_NAME = "qe_rl_schema"


class Placement(StrEnum):
    """Where the QE scorer runs (scorer.placement). A StrEnum: the composed config (plain strings,
    src/config/compose.py to_plain) and the plan compare against its members, and plan.json holds the
    member's value."""
    shared = "shared"        # on one training GPU (the plan lowers vLLM's share to make room)
    dedicated = "dedicated"  # own GPU(s) beyond the training GPUs
    cpu = "cpu"              # debugging
    external = "external"    # a running service on another machine: scorer.url, its token in QE_SCORER_TOKEN


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
class LoraSchema:
    """LoRA adapters trained instead of the whole model: verl 0.9.1 wraps the actor with peft (verl/workers/engine/
    fsdp/transformer_impl.py, `_is_lora`), computes the reference log-probs with the adapter off instead of a
    second model (verl/trainer/ppo/v1/trainer_base.py `ref_in_actor`) and serves the adapter to vLLM beside the
    base weights (verl/workers/rollout/vllm_rollout/vllm_async_server.py: enable_lora, max_loras 1)."""
    rank: int = setting(0, doc="LoRA rank: 0 trains the whole model (verl rounds it up to a rank vLLM serves, at "
                        "most 512)", interval="[0, 512]", example="64", verl="actor_rollout_ref.model.lora_rank")
    alpha: int = setting(16, doc="LoRA scaling: the adapter's output is multiplied by alpha / rank (an integer, "
                         "verl's default: verl/workers/config/model.py HFModelConfig.lora_alpha)", interval="[1, inf)",
                         example="32", verl="actor_rollout_ref.model.lora_alpha")
    target_modules: str = setting("all-linear", doc="the layers that get an adapter: all-linear (q, k, v, o, gate, "
                                  "up, down) or a peft module-name pattern",
                                  verl="actor_rollout_ref.model.target_modules")


@dataclass
class ModelSchema:
    name: str = MISSING
    path: str = MISSING
    use_chat_template: bool = MISSING
    params_b: float = setting(doc="parameters in billions (the memory plan)", interval="(0, inf)", example="3.09")
    num_layers: int = setting(doc="decoder layers (the memory plan)", interval="[1, inf)", example="36")
    hidden_size: int = setting(doc="hidden size (the memory plan)", interval="[1, inf)", example="2048")
    intermediate_size: int = setting(doc="MLP size (the memory plan)", interval="[1, inf)", example="11008")
    num_attention_heads: int = setting(doc="attention heads (the memory plan)", interval="[1, inf)", example="16")
    num_kv_heads: int = setting(doc="KV heads: rollout TP must divide them", interval="[1, inf)", example="2")
    vocab_size: int = setting(doc="vocabulary size (the memory plan)", interval="[1, inf)", example="151936")
    rollout_tp: int = setting(doc="preferred vLLM tensor parallel size (the plan lowers it to what divides)",
                              interval="[1, inf)", example="2")
    gpu_memory_utilization: float = setting(
        doc="vLLM's share of a GPU, a ceiling (the plan lowers it for a shared scorer)", interval="(0, 1]",
        example="0.6", verl="actor_rollout_ref.rollout.gpu_memory_utilization")
    # actor/ref attention (src/plan/attention.py chooses for auto and says why in the plan table)
    attn_implementation: AttnImplementation = AttnImplementation.auto
    lora: LoraSchema = field(default_factory=LoraSchema)
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
    enable: bool = setting(doc="DAPO's dynamic sampling: drop groups whose metric is all equal",
                           verl="algorithm.filter_groups.enable")
    metric: str = setting(doc="the reward field a group is filtered on", verl="algorithm.filter_groups.metric")
    max_num_gen_batches: int = setting(doc="generation batches per step before the step fails",
                                       verl="algorithm.filter_groups.max_num_gen_batches")
    # verl 0.9.1's own default (algorithm.filter_groups.max_inflight_gen_batches)
    max_inflight_gen_batches: int = setting(1, doc="generation batches in flight at once", interval="[1, inf)",
                                            example="1")


@dataclass
class OverlongBufferSchema:
    enable: bool = MISSING
    # >= 1 when enabled (src/plan/values.py check_ranges): verl's DAPO manager asserts len > 0
    # (verl/experimental/reward_loop/reward_manager/dapo.py DAPORewardManager.__init__)
    len: int = setting(doc="tokens before max_response_length where the overlong penalty starts",
                       interval="[0, inf)", example="512")
    penalty_factor: float = setting(doc="the overlong penalty at max_response_length", interval="[0, inf)",
                                    example="1.0")


@dataclass
class AlgoSchema:
    name: str = MISSING
    adv_estimator: str = MISSING
    norm_adv_by_std_in_grpo: bool = setting(doc="GRPO divides the advantage by the group's std",
                                            verl="algorithm.norm_adv_by_std_in_grpo")
    use_kl_loss: bool = setting(doc="a KL loss to the reference policy", verl="actor_rollout_ref.actor.use_kl_loss")
    kl_loss_coef: float = setting(doc="the KL loss's weight", interval="[0, inf)", example="0.001",
                                  verl="actor_rollout_ref.actor.kl_loss_coef")
    kl_loss_type: str = setting(doc="the KL estimator (low_var_kl, k1, ...)", verl="actor_rollout_ref.actor.kl_loss_type")
    entropy_coeff: float = setting(doc="the entropy bonus's weight", verl="actor_rollout_ref.actor.entropy_coeff")
    # the policy ratio is clipped to [1 - low, 1 + high] (verl/trainer/ppo/core_algos.py compute_policy_loss_*);
    # 1: no lower bound but 0 (CISPO, conf/algo/cispo.yaml)
    clip_ratio_low: float = setting(doc="the ratio's lower clip, 1 - low", interval="[0, 1]", example="0.2",
                                    verl="actor_rollout_ref.actor.clip_ratio_low")
    clip_ratio_high: float = setting(doc="the ratio's upper clip, 1 + high", interval="[0, inf)", example="0.28",
                                     verl="actor_rollout_ref.actor.clip_ratio_high")
    loss_agg_mode: str = setting(doc="how token losses are aggregated (token-mean, seq-mean-token-sum, ...)",
                                 verl="actor_rollout_ref.actor.loss_agg_mode")
    # verl's own default, so a preset (or a snapshot) older than the key composes to the config it had
    loss_mode: str = setting("vanilla", doc="verl's policy loss: a name registered with "
                             "core_algos.register_policy_loss", verl="actor_rollout_ref.actor.policy_loss.loss_mode")
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
    # local dir of the tokenizer, for a backend that reads one (src/scorer/backends); None: the model dir holds one
    tokenizer: Optional[str] = None
    # size and shape for the memory plan; a model without them is refused there by name
    params_b: Optional[float] = None
    encoder_shape: Optional[EncoderShapeSchema] = None
    needs_ref: bool = False


@dataclass
class ScorerSchema:
    placement: Placement = MISSING
    dedicated_gpus: int = setting(doc="GPUs per node of a dedicated scorer", interval="[0, inf)", example="1")
    # scorer.placement=external: the running QE service's URL (http://host:port), whose bearer token comes from the
    # environment variable QE_SCORER_TOKEN of the launch and of every job of a sweep (never from a file)
    url: Optional[str] = None
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
    # no verl key here: verl's trainer.total_epochs, whichever key sets it, is a count verl's workers need
    # >= 1, refused by src/verl_config/checks.py POSITIVE_COUNTS (src/verl_config/ppo_trainer.py copies it)
    total_epochs: int = setting(doc="passes over the training data", interval="[1, inf)", example="1")
    total_training_steps: Optional[int] = setting(
        doc="steps to train; null: from the epochs and data size", interval="[1, inf)", example="200",
        note=" (or null: from the epochs and data size)", verl="trainer.total_training_steps")
    # verl saves/validates when freq > 0 (verl/trainer/ppo/v1/trainer_base.py PPOTrainer.fit): -1 = never
    save_freq: int = setting(doc="steps between checkpoints", interval="[-1, inf)", example="50",
                             note=" (-1: never)", verl="trainer.save_freq")
    test_freq: int = setting(doc="steps between validations", interval="[-1, inf)", example="25",
                             note=" (-1: never)", verl="trainer.test_freq")
    val_before_train: bool = setting(doc="validate before the first step", verl="trainer.val_before_train")
    resume_mode: str = setting(doc="auto: resume from the newest checkpoint in the checkpoint dir",
                               verl="trainer.resume_mode")
    lr: float = setting(doc="the actor's learning rate", interval="(0, inf)", example="1e-6",
                        verl="actor_rollout_ref.actor.optim.lr")
    # the launcher's, not verl's: src/node/training.py PreemptionWatch
    preempt_grace_s: float = setting(
        doc="after a SIGTERM to the launcher (a preemption, outside Slurm), seconds for the step in progress to "
            "end and be saved before training is stopped; keep it below the scheduler's own grace",
        interval="(0, inf)", example="25")
    # the launcher's stall guard (src/plan/stall.py, src/node/stall.py)
    stall_timeout_s: Optional[float] = setting(
        doc="a run with no step ending within this many seconds is stopped as stalled, its stacks dumped; null: "
            "derived from stall_first_step_s, stall_multiple and stall_min_s", interval="(0, inf)", example="3600",
        note=" (or null: derived)")
    stall_first_step_s: float = setting(doc="the stall bound until the first step ends (start-up included)",
                                        interval="(0, inf)", example="3600")
    stall_multiple: float = setting(doc="after the first step, the stall bound is this times the longest step so far",
                                    interval="(0, inf)", example="5")
    stall_min_s: float = setting(doc="the derived stall bound is never below this", interval="(0, inf)",
                                 example="600")


@dataclass
class MemorySchema:
    gpu_gb: Optional[float] = MISSING
    reserve_gb: float = setting(doc="GiB per GPU beside what the plan counts", interval="[0, inf)", example="4")


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
    mem_gb: Optional[int] = setting(doc="memory per node in GB; null: the partition's default", interval="[1, inf)",
                                    example="256", note=" (or null: the partition's default)")
    timeout_min: int = MISSING
    signal_delay_s: int = MISSING
    max_num_timeout: int = MISSING
    max_stall_requeues: int = setting(
        doc="a job whose run stalled (src/node/stall.py) or lost a training process (src/node/deaths.py) is "
            "requeued and resumes from its last checkpoint, at most this many times in all; 0: never",
        interval="[0, inf)", example="1")
    array_parallelism: int = setting(
        doc="how many jobs of one job array (a sweep's jobs that ask for the same resources) run at once, "
            "sbatch --array=...%N", interval="[1, inf)", example="2")
    wandb_mode: str = MISSING
    setup: List[str] = MISSING
    node_local_dirs: List[str] = MISSING


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
    # the reward group's types: src/config/reward_schema.py
    reward: RewardSchema = field(default_factory=RewardSchema)
    algo: AlgoSchema = field(default_factory=AlgoSchema)
    logger: LoggerSchema = field(default_factory=LoggerSchema)
    accelerator: AcceleratorSchema = field(default_factory=AcceleratorSchema)
    scorer: ScorerSchema = field(default_factory=ScorerSchema)
    # GPUs per node; any count is accepted here, the plan refuses < 1 and counts verl cannot split
    gpus: int = MISSING
    nodes: int = MISSING
    # numpy/torch seeds are uint32
    seed: int = setting(doc="the run's seed (data order, sampling, init)", interval="[0, 4294967295]", example="1")
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
    # the terminal during training (src/node/console.py): false shows start-up phases, one progress line per
    # step, each warning once and errors in full; true echoes every line of verl's, its Ray workers' and
    # vLLM's output. train.log in the run dir has every line either way
    verbose: bool = False


def register() -> None:
    """Store the schema in Hydra's ConfigStore, once per process: every composition calls this, and storing
    builds the structured config from the dataclasses again (about 30 ms, paid hundreds of times by a test run
    or a sweep's pre-launch check). Looked up in the store itself, not a flag, so a cleared store gets it back."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    if f"{SCHEMA_NAME}.yaml" not in store.repo:
        store.store(name=SCHEMA_NAME, node=Config)


@dataclass(frozen=True)
class Setting:
    """One config value's facts, read from its schema field (`setting(...)`)."""
    key: str                   # dotted, from the config's root
    integer: bool              # its type is int
    null_ok: bool              # its type is Optional: null means "unset"
    doc: str
    interval: Optional[str]
    example: Optional[str]
    note: str
    verl: Optional[str]


@functools.lru_cache(maxsize=1)
def settings() -> dict[str, Setting]:
    """Every field declared with `setting(...)`, by dotted key, in the schema's order."""
    out: dict[str, Setting] = {}

    def walk(cls, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            kind = hints[f.name]
            if is_dataclass(kind):
                walk(kind, f"{prefix}{f.name}.")
            elif "doc" in f.metadata:
                args = typing.get_args(kind)
                null_ok = type(None) in args
                base = next((a for a in args if a is not type(None)), kind) if null_ok else kind
                out[prefix + f.name] = Setting(key=prefix + f.name, integer=base is int, null_ok=null_ok,
                                               **f.metadata)

    walk(Config, "")
    return out


def verl_key(key: str) -> str:
    """The verl key the schema maps config key `key` to (a KeyError names a key with none: a bug)."""
    found = settings()[key].verl
    if found is None:
        raise KeyError(f"{key} has no verl key in src/config/schema.py")
    return found

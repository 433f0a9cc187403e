"""RunPlan -> verl 0.9.1's own `ppo_trainer` config, validated by verl itself.

verl's config is composed by Hydra from the installed package's config dir (the same files
`python -m verl.trainer.main_ppo` composes), with the plan's values applied as overrides. The
result is checked with `verl.utils.config.validate_config` and written fully resolved, so the
file in the snapshot is exactly what verl runs.
"""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

from omegaconf import DictConfig, OmegaConf

from src.config import hydra_internal, schema
from src.config.dotted import flatten
from src.plan import RunPlan, algorithm
from src.rewards import normalise
from src.rewards.credit import launch as credit_launch

from . import cache, checks

# conf/algo reward_manager -> a class in src/rewards/managers.py that verl loads by module path
# (verl/trainer/ppo/reward.py, resolve_reward_manager_cls, source=importlib): verl's dapo manager
# adds the overlong penalty to validation rows too; ours keeps validation scores pure. Names not
# listed are verl's registered managers as they are.
REWARD_MANAGERS = {"dapo": "PureValidationDAPORewardManager"}


class RewardManager(NamedTuple):
    """verl's reward.reward_manager for the algo's manager (verl/trainer/ppo/reward.py
    resolve_reward_manager_cls reads these three keys)."""
    source: str                 # "register": one of verl's registered managers; "importlib": a class by module path
    name: str                   # the registered name, or the class name in `module_path`
    module_path: Optional[str]  # the module holding the class (source=importlib only)


def _manager(cfg: dict) -> RewardManager:
    name = cfg["algo"]["reward_manager"]
    if name in REWARD_MANAGERS:
        return RewardManager("importlib", REWARD_MANAGERS[name], "pkg://src.rewards.managers")
    return RewardManager("register", name, None)


def _copied(key: str) -> tuple[str, Callable[[RunPlan, dict], Any]]:
    """The row of a config value verl gets as it is: the verl key its schema field names
    (src/config/schema.py `setting(verl=...)`), the value read from the composed config."""
    def value(p: RunPlan, c: dict) -> Any:
        node: Any = c
        for part in key.split("."):
            node = node[part]
        return node

    return schema.verl_key(key), value


# verl key -> value taken from the plan. One row per key; this table is the only place plan
# fields meet verl names, with the config values copied as they are (`_copied`), whose verl keys
# their schema fields declare. Keys verl's schema lacks start with '+'.
VERL_KEYS: list[tuple[str, Callable[[RunPlan, dict], Any]]] = [
    # data
    ("data.train_files", lambda p, c: p.train_files),
    ("data.val_files", lambda p, c: p.val_files),
    ("data.max_prompt_length", lambda p, c: p.max_prompt_length),
    ("data.max_response_length", lambda p, c: p.max_response_length),
    ("data.train_batch_size", lambda p, c: p.batch.prompts_per_step),
    ("data.seed", lambda p, c: p.seed),
    ("data.filter_overlong_prompts", lambda p, c: True),
    ("data.truncation", lambda p, c: "error"),
    ("++data.apply_chat_template_kwargs", lambda p, c: {} if c["model"]["use_chat_template"]
        else {"chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}),
    # model
    ("actor_rollout_ref.model.path", lambda p, c: p.model_path),
    # the plan's attention choice (src/plan/attention.py): verl reads the implementation from the model's
    # override_config (verl/workers/config/model.py HFModelConfig; the ref model shares it) and would
    # otherwise ask for flash_attention_2; remove padding stays on with sdpa too (attention.py says why)
    ("actor_rollout_ref.model.use_remove_padding", lambda p, c: p.attention.remove_padding),
    ("+actor_rollout_ref.model.override_config.attn_implementation", lambda p, c: p.attention.implementation),
    ("actor_rollout_ref.model.enable_gradient_checkpointing", lambda p, c: True),
    # LoRA (rank 0: none); verl reads lora_rank/lora_alpha/target_modules into HFModelConfig
    # (verl/workers/config/model.py) for the actor's peft wrap and vLLM's enable_lora
    _copied("model.lora.rank"),
    _copied("model.lora.alpha"),
    _copied("model.lora.target_modules"),
    # verl's own FSDP (fsdp: FSDP1, its dp_actor.yaml default), except for LoRA on the CPU loop: there verl's
    # collect_lora_params (verl/utils/fsdp_utils.py) under FSDP1 hands vLLM an adapter without a layer and vLLM's
    # add_lora fails (StopIteration in vllm/lora/model_manager.py _create_merged_loras_inplace); under FSDP2 it
    # trains, vLLM's log-probs matching the actor's (tests/loop/test_lora_on_cpu.py). A GPU run keeps verl's
    # default, the strategy of verl's LoRA example (examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh)
    ("actor_rollout_ref.actor.strategy", lambda p, c: "fsdp2" if p.lora_rank > 0 and p.device == "cpu" else "fsdp"),
    # actor
    _copied("trainer.lr"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size", lambda p, c: p.batch.mini_batch_prompts),
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", lambda p, c: p.batch.micro_batch_per_gpu),
    ("actor_rollout_ref.actor.use_dynamic_bsz", lambda p, c: p.batch.dynamic_bsz),
    ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
        lambda p, c: p.batch.max_token_len_per_gpu or 2 * (p.max_prompt_length + p.max_response_length)),
    _copied("algo.use_kl_loss"),
    _copied("algo.kl_loss_coef"),
    _copied("algo.kl_loss_type"),
    _copied("algo.entropy_coeff"),
    _copied("algo.clip_ratio_low"),
    _copied("algo.clip_ratio_high"),
    _copied("algo.loss_agg_mode"),
    # Dr. GRPO's constant divisor for seq-mean-token-sum-norm, else null (verl's default; src/plan/algorithm.py)
    ("actor_rollout_ref.actor.loss_scale_factor", lambda p, c: algorithm.loss_scale_factor(c)),
    # a name registered with verl's core_algos.register_policy_loss (read by verl/workers/utils/losses.py ppo_loss)
    _copied("algo.loss_mode"),
    # rollout
    ("actor_rollout_ref.rollout.name", lambda p, c: "vllm"),
    ("actor_rollout_ref.rollout.n", lambda p, c: p.batch.samples_per_prompt),
    ("actor_rollout_ref.rollout.tensor_model_parallel_size", lambda p, c: p.batch.rollout_tp),
    # the plan's share (model.gpu_memory_utilization, lowered for a shared scorer)
    (schema.verl_key("model.gpu_memory_utilization"), lambda p, c: p.gpu_memory_utilization),
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", lambda p, c: p.batch.log_prob_micro_batch_per_gpu),
    ("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", lambda p, c: p.batch.dynamic_bsz),
    ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
        lambda p, c: p.batch.max_token_len_per_gpu or 2 * (p.max_prompt_length + p.max_response_length)),
    # reference policy (used when use_kl_loss)
    ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", lambda p, c: p.batch.log_prob_micro_batch_per_gpu),
    ("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", lambda p, c: p.batch.dynamic_bsz),
    ("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
        lambda p, c: p.batch.max_token_len_per_gpu or 2 * (p.max_prompt_length + p.max_response_length)),
    # algorithm: the plan's estimator (the algo's, or reward.credit's / reward.normalise's)
    ("algorithm.adv_estimator", lambda p, c: p.estimator),
    _copied("algo.norm_adv_by_std_in_grpo"),
    ("algorithm.use_kl_in_reward", lambda p, c: False),
    _copied("algo.filter_groups.enable"),
    _copied("algo.filter_groups.metric"),
    _copied("algo.filter_groups.max_num_gen_batches"),
    # verl's sync replay buffer with the project's stop rules (src/trainer/guard.py says why): it
    # takes the arguments verl gives its built-in buffer from sampler_kwargs
    # (verl/trainer/ppo/v1/trainer_base.py _build_replay_buffer passes custom samplers only those)
    ("trainer.v1.sampler.custom_sampler.path", lambda p, c: "pkg://src.trainer.guard"),
    ("trainer.v1.sampler.custom_sampler.name", lambda p, c: "GuardedReplayBuffer"),
    # verl's schema has sampler_kwargs as an empty dict: `++` fills it
    ("++trainer.v1.sampler.sampler_kwargs", lambda p, c: {
        "lost_groups_allowed": p.stop_rules.lost_groups_allowed,
        "max_gen_batches": p.stop_rules.max_gen_batches,
        "filter_metric": p.stop_rules.filter_metric,
        "train_batch_size": p.batch.prompts_per_step,
        "max_inflight_gen_batches": c["algo"]["filter_groups"].get("max_inflight_gen_batches", 1)}),
    # reward: our compute_score (src/rewards) with the reward group's settings. Imported by
    # module name, not file path, so the config is the same for a checkout and a Slurm code copy;
    # verl must start with the code root as its working directory (or on PYTHONPATH). The scorer
    # URL and token reach the reward workers through the environment (QE_SCORER_URL/_TOKEN).
    ("reward.custom_reward_function.path", lambda p, c: "pkg://src.rewards.compute"),
    ("reward.custom_reward_function.name", lambda p, c: "compute_score"),
    # built once, in the plan (src/rewards/launch.py): the group's settings, reward.credit's, reward.normalise's
    ("+reward.custom_reward_function.reward_kwargs", lambda p, c: p.reward_kwargs),
    ("reward.reward_manager.source", lambda p, c: _manager(c).source),
    ("reward.reward_manager.name", lambda p, c: _manager(c).name),
    ("reward.reward_manager.module.path", lambda p, c: _manager(c).module_path),
    ("+reward.reward_kwargs.overlong_buffer_cfg.enable", lambda p, c: c["algo"]["overlong_buffer"]["enable"]),
    ("+reward.reward_kwargs.overlong_buffer_cfg.len", lambda p, c: c["algo"]["overlong_buffer"]["len"]),
    ("+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor",
        lambda p, c: c["algo"]["overlong_buffer"]["penalty_factor"]),
    ("+reward.reward_kwargs.overlong_buffer_cfg.log", lambda p, c: c["algo"]["overlong_buffer"]["enable"]),
    ("+reward.reward_kwargs.max_resp_len", lambda p, c: p.max_response_length),
    # trainer
    ("trainer.n_gpus_per_node", lambda p, c: p.gpus_per_node),
    ("trainer.nnodes", lambda p, c: p.nodes),
    ("trainer.device", lambda p, c: p.device),
    ("trainer.project_name", lambda p, c: p.wandb_project),
    ("trainer.experiment_name", lambda p, c: p.wandb_run_name),
    ("trainer.logger", lambda p, c: list(p.logger_backends) + ["file"]),
    ("trainer.default_local_dir", lambda p, c: p.checkpoint_dir),
    _copied("trainer.resume_mode"),
    # not _copied: its schema field names no verl key (src/config/schema.py TrainerSchema says why)
    ("trainer.total_epochs", lambda p, c: c["trainer"]["total_epochs"]),
    _copied("trainer.total_training_steps"),
    _copied("trainer.save_freq"),
    _copied("trainer.test_freq"),
    _copied("trainer.val_before_train"),
    # Nothing here may name the run dir: a re-run from a snapshot must give a byte-identical
    # file. Validation dumps and profiles sit beside the checkpoints, which are stable too.
    ("trainer.validation_data_dir", lambda p, c: f"{p.checkpoint_dir}/val_generations"),
    ("trainer.log_val_generations", lambda p, c: 10),
    # ray
    ("ray_kwargs.ray_init.num_cpus", lambda p, c: p.ray_num_cpus),
    ("ray_kwargs.timeline_json_file",
        lambda p, c: f"{p.checkpoint_dir}/profile/ray_timeline.json" if c["profile"]["enable"] else None),
    ("global_profiler.tool", lambda p, c: "torch" if c["profile"]["enable"] else None),
    ("global_profiler.steps", lambda p, c: list(c["profile"]["steps"]) if c["profile"]["enable"] else None),
    ("global_profiler.save_path", lambda p, c: f"{p.checkpoint_dir}/profile"),
]


def verl_config_dir() -> Path:
    """verl's config dir, found without importing verl (an import costs seconds: torch)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("verl is not installed in this environment; run `make setup`")
    return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"


def _format(value: Any) -> str:
    # Hydra override grammar: JSON-like literals, quoted strings
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, dict)):
        return _format_container(value)
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def _format_container(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(_format(v) for v in value) + "]"
    return "{" + ",".join(f"{k}:{_format(v)}" for k, v in value.items()) + "}"


def overrides(plan: RunPlan, cfg: dict) -> list[str]:
    """Hydra override strings for verl's ppo_trainer, plan table first, then passthrough keys."""
    out = []
    for key, source in VERL_KEYS:
        value = source(plan, cfg)
        if value is None and key.endswith("_per_gpu") and plan.batch.dynamic_bsz:
            continue  # dynamic bsz: verl wants the micro keys unset
        out.append(f"{key}={_format(value)}")
    # reward.credit=token only: agent loop manager, agent loop, estimator weights (none for sequence)
    out += [f"{key}={_format(value)}" for key, value in credit_launch.verl_overrides(plan.token_credit)]
    # the preset's own verl keys (algo.verl: its loss's parameters), then the accelerator's, then the user's
    out += [f"++{key}={_format(value)}" for key, value in sorted(flatten(cfg["algo"].get("verl") or {}).items())]
    # `++` adds or overrides: what the accelerator needs (accelerator.verl: Ray's fake GPUs on CPU), then the
    # user's explicit verl keys, which win over both
    out += [f"++{key}={_format(value)}" for key, value in sorted(plan.accelerator_verl.items())]
    out += [f"++{key}={_format(value)}" for key, value in sorted(plan.verl_passthrough.items())]
    return out


def compose(override_list: list[str]) -> DictConfig:
    """verl's ppo_trainer with overrides, composed by Hydra from the installed verl's files (or the
    same composition remembered by src/verl_config/cache.py)."""
    return cache.composed(override_list, _compose_verl)


def _compose_verl(override_list: list[str]) -> DictConfig:
    config_dir = str(verl_config_dir())
    cfg = hydra_internal.compose_on_choices(config_dir, override_list, _composed_choices)
    return cfg if cfg is not None else _compose_verl_dir(override_list)


@functools.lru_cache(maxsize=8)
def _composed_choices(choices: tuple[str, ...]) -> DictConfig:
    """verl's ppo_trainer with only config group choices (none in what a launch passes), composed once per
    process (hydra_internal.compose_on_choices applies the rest as Hydra would). It is the same composition
    for every launch, where the whole override list differs (run dirs, times): remembered on disk too, under
    the key of a composition of just these lines, which it is."""
    return cache.composed(list(choices), _compose_verl_dir)


def _compose_verl_dir(override_list: list[str]) -> DictConfig:
    return hydra_internal.compose_dir(str(verl_config_dir()), "ppo_trainer", override_list)


def validate(cfg: DictConfig) -> None:
    """verl's own start-up validation (the same call main_ppo makes), then src/verl_config/checks.py: what
    validate_config lets through and verl's workers refuse only on the GPU node. A pass is remembered
    for the same config, verl and check code (src/verl_config/cache.py: importing verl is most of a
    dry run's time)."""
    cache.validated(cfg, _run_verl_validation)


def _run_verl_validation(cfg: DictConfig) -> None:
    """Raises on a refusal. verl's own output here is silenced: its platform probe ("No supported
    accelerator detected", "Platform 'nvidia' ... not available": the launcher's node is not the
    workers'), need_critic's "Disabled critic" and validate_config's pass line would precede the
    one-line refusal of a later check (issue 33). The trainer process runs the same validation, so on a
    real run they are in train.log."""
    import contextlib
    import io
    import logging
    import warnings

    logging.disable(logging.WARNING)  # verl logs its probe at WARNING, on its own loggers
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            from verl.trainer.ppo.utils import need_critic, need_reference_policy
            from verl.utils.config import validate_config

            validate_config(config=checks.without_vllm_lora_check(cfg), use_reference_policy=need_reference_policy(cfg),
                            use_critic=need_critic(cfg))
            # registers grpo_token here as the trainer process will, so verl_checks finds it in verl's registry
            credit_launch.check(cfg)
            normalise.check_verl(cfg)  # registers grpo_per_component here too, for the same reason
            checks.run(cfg)
    finally:
        logging.disable(logging.NOTSET)


def unvalidated(plan: RunPlan, cfg: dict) -> DictConfig:
    """The verl config `build` gives, resolved, without verl's validation: for comparing values (the
    baseline a run's name is read against, src/pipeline/lineage.py), never for running."""
    verl_cfg = compose(overrides(plan, cfg))
    OmegaConf.resolve(verl_cfg)
    return verl_cfg


@functools.lru_cache(maxsize=1)
def derived_keys() -> frozenset:
    """verl's keys whose yaml value is an interpolation of another key (the actor's `rollout_n` copies
    `rollout.n`): a change of the other key shows in these too, so a name lists it once."""
    raw = flatten(OmegaConf.to_container(compose([]), resolve=False))
    return frozenset(k for k, v in raw.items() if isinstance(v, str) and "${" in v)


def build(plan: RunPlan, cfg: dict) -> DictConfig:
    verl_cfg = compose(overrides(plan, cfg))
    validate(verl_cfg)
    OmegaConf.resolve(verl_cfg)
    return verl_cfg


def to_yaml(verl_cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(verl_cfg, resolve=True)

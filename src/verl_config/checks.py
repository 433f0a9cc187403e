"""Checks of verl values that verl 0.9.1's validate_config lets through and that fail (or silently do
nothing) only when its workers start on the GPU node. Each allowed set is read from verl's own
registry at check time, so a verl upgrade that adds an engine or estimator needs no change here.

Called from src/verl_config.validate after verl's validate_config; each failure raises
VerlValueError with one line naming the key, the value, the allowed values and the verl function
that would refuse it later.
"""
from __future__ import annotations

from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from src.plan.memory import VLLM_LORA_RANKS


class VerlValueError(ValueError):
    pass


def _get(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, default=None)


def _refuse(key: str, value: Any, allowed, where: str) -> VerlValueError:
    return VerlValueError(f"{key}={value!r} is not one of verl's {', '.join(sorted(map(str, allowed)))} "
                          f"(refused only when workers start, by {where})")


def check_rollout(cfg: DictConfig) -> None:
    # verl/workers/rollout/base.py, get_rollout_class: asserts (name, mode) in _ROLLOUT_REGISTRY
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY

    name, mode = _get(cfg, "actor_rollout_ref.rollout.name"), _get(cfg, "actor_rollout_ref.rollout.mode")
    if (name, mode) not in _ROLLOUT_REGISTRY:
        allowed = [n for n, m in _ROLLOUT_REGISTRY if m == mode] or [f"{n} (mode {m})" for n, m in _ROLLOUT_REGISTRY]
        raise _refuse("actor_rollout_ref.rollout.name", name, allowed,
                      "verl/workers/rollout/base.py get_rollout_class")


def check_strategies(cfg: DictConfig) -> None:
    # verl/workers/engine_workers.py, TrainingWorker.__init__: EngineRegistry.new(model_type, backend=strategy);
    # verl/workers/engine/base.py, EngineRegistry.get_engine_cls asserts the backend is registered
    import warnings

    with warnings.catch_warnings():
        # "<x> engine is not available": optional engines not installed here; the allowed list
        # below says which are
        warnings.simplefilter("ignore")
        from verl.workers.engine import EngineRegistry

    roles = [("actor_rollout_ref.actor.strategy", "language_model")]
    if _get(cfg, "critic.enable"):
        roles.append(("critic.strategy", "value_model"))
    for key, model_type in roles:
        allowed = EngineRegistry._engines.get(model_type, {})
        if _get(cfg, key) not in allowed:
            raise _refuse(key, _get(cfg, key), allowed, "verl/workers/engine/base.py EngineRegistry.get_engine_cls")


def check_estimator(cfg: DictConfig) -> None:
    # verl/trainer/ppo/core_algos.py, get_adv_estimator_fn: raises for names not registered with
    # register_adv_est (the V1 trainer calls it in compute_advantage for every estimator but grpo)
    from verl.trainer.ppo import core_algos

    value = _get(cfg, "algorithm.adv_estimator")
    if str(value) not in core_algos.ADV_ESTIMATOR_REGISTRY:
        raise _refuse("algorithm.adv_estimator", value, core_algos.ADV_ESTIMATOR_REGISTRY,
                      "verl/trainer/ppo/core_algos.py get_adv_estimator_fn")
    if _get(cfg, "trainer.use_v1") is not False and str(value) in NOT_IN_V1:
        raise VerlValueError(f"algorithm.adv_estimator={value} does not run under verl 0.9.1's V1 trainer: "
                             f"{NOT_IN_V1[str(value)]}; choose another algo= preset (docs/algorithms.md)")


# registered estimators the V1 trainer cannot feed: its _compute_advantage (verl/trainer/ppo/v1/trainer_base.py)
# fetches only uid, response_mask, rm_scores, log-probs and values from TransferQueue
NOT_IN_V1 = {
    "remax": "it needs reward_baselines from a greedy rollout per prompt, which only the legacy trainer runs "
             "(verl/trainer/ppo/ray_trainer.py)",
    "optimal_token_baseline": "it needs the actor's sum_pi_squared (verl/trainer/ppo/ray_trainer.py compute_advantage "
                              "asserts it), which V1's _compute_advantage does not fetch",
    "tir_optimal_token_baseline": "it needs the actor's sum_pi_squared, which V1's _compute_advantage does not fetch",
    "gdpo": "it reads the reward's parts from the batch, which V1's _compute_advantage does not fetch "
            "(reward.normalise=per_component is the project's per-part GRPO)",
}


def check_policy_loss(cfg: DictConfig) -> None:
    # verl/trainer/ppo/core_algos.py, get_policy_loss_fn: raises for modes not registered with
    # register_policy_loss (called by the actor's loss on the GPU workers)
    from verl.trainer.ppo import core_algos

    value = _get(cfg, "actor_rollout_ref.actor.policy_loss.loss_mode")
    if value not in core_algos.POLICY_LOSS_REGISTRY:
        raise _refuse("actor_rollout_ref.actor.policy_loss.loss_mode", value, core_algos.POLICY_LOSS_REGISTRY,
                      "verl/trainer/ppo/core_algos.py get_policy_loss_fn")
    # what the loss functions assert on the GPU workers (core_algos.compute_policy_loss_<mode>)
    for mode, key, example in (("dro", "dro_beta", "0.1"), ("clip_cov", "clip_cov_ratio", "0.0002"),
                               ("kl_cov", "kl_cov_ratio", "0.0002")):
        number = _get(cfg, f"actor_rollout_ref.actor.policy_loss.{key}")
        if value == mode and not (isinstance(number, (int, float)) and number > 0):
            raise VerlValueError(f"policy loss {mode} needs actor_rollout_ref.actor.policy_loss.{key} > 0, got "
                                 f"{number!r} (verl/trainer/ppo/core_algos.py compute_policy_loss_{mode}); set "
                                 f"+verl.actor_rollout_ref.actor.policy_loss.{key}={example}")


def check_reward_manager(cfg: DictConfig) -> None:
    # verl/trainer/ppo/reward.py, resolve_reward_manager_cls: called by the reward loop manager
    # (verl/experimental/reward_loop/reward_loop.py) when the trainer starts
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
    from verl.trainer.ppo.reward import resolve_reward_manager_cls

    source, name = _get(cfg, "reward.reward_manager.source"), _get(cfg, "reward.reward_manager.name")
    if source == "register" and name not in REWARD_MANAGER:
        raise _refuse("reward.reward_manager.name", name, REWARD_MANAGER,
                      "verl/experimental/reward_loop/reward_manager/registry.py get_reward_manager_cls")
    if source not in ("register", "importlib"):
        raise _refuse("reward.reward_manager.source", source, ("register", "importlib"),
                      "verl/trainer/ppo/reward.py resolve_reward_manager_cls")
    cls = resolve_reward_manager_cls(cfg)
    if not (isinstance(cls, type) and issubclass(cls, RewardManagerBase)):
        module = _get(cfg, "reward.reward_manager.module.path")
        raise VerlValueError(f"reward.reward_manager {name!r} from {module} is not a verl RewardManagerBase "
                             f"subclass (verl/trainer/ppo/reward.py load_reward_manager)")


# key -> where verl uses it; each must be >= 1 or verl fails or silently does nothing on the GPU node
POSITIVE_COUNTS = {
    # 0 epochs: iterations = batch / mini batch * epochs = 0, every step trains nothing, silently
    "actor_rollout_ref.actor.ppo_epochs": "verl/workers/engine_workers.py TrainingWorker.train_mini_batch",
    # 0 workers: no reward loop worker, the batch is split into 0 chunks
    "reward.num_workers": "verl/experimental/reward_loop/reward_loop.py RewardLoopManager._init_reward_loop_workers",
    "actor_rollout_ref.rollout.agent.num_workers":
        "verl/experimental/agent_loop/agent_loop.py AgentLoopManager._init_agent_loop_workers",
    # 0 epochs: the fit loop `while current_epoch < total_epochs` never runs
    "trainer.total_epochs": "verl/trainer/ppo/v1/trainer_base.py PPOTrainer.fit",
}


def check_positive_counts(cfg: DictConfig) -> None:
    for key, where in POSITIVE_COUNTS.items():
        value = _get(cfg, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise VerlValueError(f"{key}={value!r} must be a positive integer (used by {where}); e.g. {key}=1")
    critic_epochs = _get(cfg, "critic.ppo_epochs")
    if _get(cfg, "critic.enable") and (not isinstance(critic_epochs, int) or critic_epochs < 1):
        raise VerlValueError(f"critic.ppo_epochs={critic_epochs!r} must be a positive integer "
                             f"(verl/workers/engine_workers.py TrainingWorker.train_mini_batch)")


def check_worker_dataclasses(cfg: DictConfig) -> None:
    """verl's worker-side config dataclasses, built as the workers build them (their __post_init__
    holds checks validate_config never runs): verl/workers/engine_workers.py ActorRolloutRefWorker
    turns actor_rollout_ref.rollout into RolloutConfig with verl.utils.config.omega_conf_to_dataclass.
    (The model's HFModelConfig needs the weights, and RewardManagerConfig cannot be built in 0.9.1:
    its __post_init__ calls a missing super().__post_init__; neither is built here.)"""
    from verl.utils.config import omega_conf_to_dataclass

    for key in ("actor_rollout_ref.rollout", "algorithm", "actor_rollout_ref.actor.policy_loss",
                "actor_rollout_ref.actor.optim", "actor_rollout_ref.actor.checkpoint"):
        node = _get(cfg, key)
        if node is not None and node.get("_target_"):
            omega_conf_to_dataclass(node)


def _lora_rank(cfg: DictConfig) -> int:
    """The rank verl serves to vLLM, read as verl reads it (verl/utils/config.py validate_config: model.lora.rank,
    else model.lora_rank; 0 when the adapter is merged into the weights)."""
    model = _get(cfg, "actor_rollout_ref.model") or {}
    lora = model.get("lora") or {}
    rank = lora.get("rank", 0) or 0
    if rank <= 0:
        rank = model.get("lora_rank", 0) or 0
    return 0 if lora.get("merge", False) else rank


def without_vllm_lora_check(cfg: DictConfig) -> DictConfig:
    """`cfg` for verl's validate_config where vLLM is not installed (the launcher's env on a CPU machine plans
    for the GPU node's): verl's LoRA rank check imports vLLM (verl/utils/config.py validate_config ->
    get_vllm_max_lora_rank, whose module imports vllm) and fails with "vllm version None not supported". Then a
    copy without LoRA goes to verl, and check_lora makes the same check on verl's own list of ranks. With vLLM
    installed, or without LoRA, `cfg` itself."""
    import importlib.util

    if _lora_rank(cfg) <= 0 or _get(cfg, "actor_rollout_ref.rollout.name") != "vllm" \
            or importlib.util.find_spec("vllm") is not None:
        return cfg
    copy = cfg.copy()
    copy.actor_rollout_ref.model.lora_rank = 0
    if copy.actor_rollout_ref.model.get("lora") is not None:
        copy.actor_rollout_ref.model.lora.rank = 0
    return copy


def check_lora(cfg: DictConfig) -> None:
    rank = _lora_rank(cfg)
    if rank > VLLM_LORA_RANKS[-1]:
        raise VerlValueError(f"actor_rollout_ref.model.lora_rank={rank} is above the largest rank vLLM serves, "
                             f"{VLLM_LORA_RANKS[-1]} (verl/workers/rollout/vllm_rollout/utils.py "
                             f"get_vllm_max_lora_rank); e.g. model.lora.rank=64")


# the dataclasses first: where they refuse, verl's own message is the better one
CHECKS: list[Callable[[DictConfig], None]] = [check_worker_dataclasses, check_positive_counts, check_rollout,
                                              check_strategies, check_estimator, check_policy_loss,
                                              check_reward_manager, check_lora]


def run(cfg: DictConfig) -> None:
    for check in CHECKS:
        check(cfg)

"""The memory plan's inputs read from the composed config, and the refusal that names what would fit.

The arithmetic is src/plan/memory.py (pure, on MemoryInputs); this module is where config keys,
including verl keys passed through `verl.*` (offload, dtypes), meet it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from src.config.schema import Placement
from src.scorer.backends import KINDS

from .batch import BatchPlan
from .memory import ActorShape, MemoryInputs, MemoryPlan, ScorerModel, lora_targets, plan_memory
from .values import PlanError, positive

# verl keys (under the `verl` passthrough) the memory plan reads, with verl 0.9.1's defaults
OFFLOAD_KEYS = {
    "actor_param_offload": ("actor_rollout_ref.actor.fsdp_config.param_offload", False),
    "actor_optimizer_offload": ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", False),
    "ref_param_offload": ("actor_rollout_ref.ref.fsdp_config.param_offload", False),
}

DTYPE_KEYS = {"actor_dtype": ("actor_rollout_ref.actor.fsdp_config.model_dtype", "fp32"),
              "ref_dtype": ("actor_rollout_ref.ref.fsdp_config.model_dtype", "fp32")}

MAX_NUM_SEQS = ("actor_rollout_ref.rollout.max_num_seqs", 256)

# src/verl_config/ppo_trainer.py turns gradient checkpointing on; a passthrough override comes after it and wins
GRADIENT_CHECKPOINTING = ("actor_rollout_ref.model.enable_gradient_checkpointing", True)


def _scorer_shapes(cfg: dict, names: list[str]) -> tuple[ScorerModel, ...]:
    shapes = []
    for name in names:
        m = cfg["scorer"]["models"][name]
        shape = m.get("encoder_shape") or {}
        if not m.get("params_b") or not all(shape.get(k) for k in ("layers", "hidden", "ffn", "heads")):
            raise PlanError(f"scorer.models.{name} needs params_b and encoder_shape {{layers, hidden, ffn, heads}} "
                            f"for the memory plan (see conf/scorer/default.yaml)")
        kind = KINDS.get(m.get("kind"))
        if kind is None:
            raise PlanError(f"scorer.models.{name}.kind must be one of {', '.join(KINDS)}, got {m.get('kind')!r}")
        shapes.append(ScorerModel(name=name, params_b=float(m["params_b"]), layers=shape["layers"],
                                  hidden=shape["hidden"], ffn=shape["ffn"], heads=shape["heads"],
                                  backend=kind.backend))
    return tuple(shapes)


def memory_inputs(cfg: dict, batch: BatchPlan, world_size: int, gpu_gb: float, scorer_models: list[str],
                  placement: Placement, passthrough: dict) -> MemoryInputs:
    model, data, memory, scorer = cfg["model"], cfg["data"], cfg["memory"], cfg["scorer"]
    lora = model.get("lora") or {"rank": 0, "target_modules": "all-linear"}  # an older snapshot has none
    max_seq = data["max_prompt_length"] + data["max_response_length"]
    reserve = memory["reserve_gb"]
    if reserve < 0:
        raise PlanError(f"memory.reserve_gb must be a number >= 0, got {reserve!r} (e.g. memory.reserve_gb=4)")
    flags = {attr: bool(passthrough.get(key, default)) for attr, (key, default) in OFFLOAD_KEYS.items()}
    dtypes = {attr: str(passthrough.get(key, default)) for attr, (key, default) in DTYPE_KEYS.items()}
    micro = batch.max_token_len_per_gpu if batch.dynamic_bsz else batch.micro_batch_per_gpu * max_seq
    return MemoryInputs(
        gpu_gb=float(gpu_gb), reserve_gb=float(reserve),
        actor=ActorShape(params_b=float(model["params_b"]), layers=model["num_layers"], hidden=model["hidden_size"],
                         heads=model["num_attention_heads"], kv_heads=model["num_kv_heads"], vocab=model["vocab_size"],
                         intermediate=model["intermediate_size"]),
        lora_rank=lora["rank"], lora_targets=lora_targets(lora["target_modules"]),
        world_size=world_size, tp=batch.rollout_tp, samples_per_step=batch.samples_per_step, max_seq_len=max_seq,
        micro_tokens=micro, max_num_seqs=int(passthrough.get(MAX_NUM_SEQS[0], MAX_NUM_SEQS[1])),
        gradient_checkpointing=bool(passthrough.get(*GRADIENT_CHECKPOINTING)),
        # verl builds the reference model for a KL loss or a KL in the reward (verl/trainer/ppo/utils.py
        # need_reference_policy)
        use_ref=bool(cfg["algo"]["use_kl_loss"]) or bool(passthrough.get("algorithm.use_kl_in_reward", False)),
        vllm_share_ceiling=float(model["gpu_memory_utilization"]),
        scorer_placement=placement if scorer_models else None, scorer_dtype=scorer["dtype"],
        scorer_batch_tokens=scorer["batch_tokens"], scorer_models=_scorer_shapes(cfg, scorer_models),
        **flags, **dtypes)


def gpu_size_gb(cfg: dict, detected: Optional[float]) -> float:
    configured = cfg["memory"].get("gpu_gb")
    if configured is None:
        if detected is None:
            raise PlanError("memory.gpu_gb is null (read it from the GPUs) but no GPU is visible here to read it "
                            "from; set memory.gpu_gb=79.6 (GiB per card: what an 80 GB H100 reports)")
        return float(detected)
    return float(positive(configured, "memory.gpu_gb", "memory.gpu_gb=79.6 (GiB, or null to read the GPUs)"))


def refusal(cfg: dict, inputs: MemoryInputs, mem: MemoryPlan, scorer_models: list[str],
            placement: Placement) -> PlanError:
    """One line: what does not fit, with the numbers, and which alternatives would fit."""
    alternatives = []
    if "xcomet_xxl" in scorer_models and "xcomet_xl" in cfg["scorer"]["models"]:
        swapped = list(dict.fromkeys("xcomet_xl" if m == "xcomet_xxl" else m for m in scorer_models))
        alternatives.append(("XCOMET-XL instead of XXL (reward.span_model=xcomet_xl)",
                             replace(inputs, scorer_models=_scorer_shapes(cfg, swapped))))
    if placement == Placement.shared and scorer_models:
        alternatives.append((f"scorer.placement={Placement.dedicated}",
                             replace(inputs, scorer_placement=Placement.dedicated)))
    # with LoRA verl builds no reference model (the actor with its adapter off): no ref key to offload
    has_ref = inputs.use_ref and inputs.lora_rank == 0
    if not (inputs.actor_param_offload and inputs.actor_optimizer_offload
            and (inputs.ref_param_offload or not has_ref)):
        keys = [k for k, _ in OFFLOAD_KEYS.values() if has_ref or ".ref." not in k]
        alternatives.append(("offload (" + " ".join(f"+verl.{k}=true" for k in keys) + ")",
                             replace(inputs, actor_param_offload=True, actor_optimizer_offload=True,
                                     ref_param_offload=True)))
    if inputs.lora_rank == 0:
        alternatives.append(("LoRA (model.lora.rank=64)", replace(inputs, lora_rank=64)))
    fitting = [name for name, x in alternatives if plan_memory(x).fits]
    tried = [name.split(" (")[0] for name, _ in alternatives]
    hint = ("alternatives that fit: " + "; ".join(fitting) if fitting else
            f"none of {', '.join(tried)} fits alone: combine them or use more GPUs (gpus=, nodes=)"
            if tried else "use more GPUs (gpus=, nodes=)")
    scorer = f"scorer {'+'.join(scorer_models)} {placement}" if scorer_models else "no scorer"
    return PlanError(f"memory plan: {cfg['model']['name']} on {inputs.world_size} GPU(s) of {inputs.gpu_gb:g} GiB "
                     f"with {scorer} does not fit: {'; '.join(mem.problems)}; {hint}")

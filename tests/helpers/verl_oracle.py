"""verl's own code as the oracle for the batch sizes the plan derives (not src/plan/verl_rules.py).

`verl_accepts(verl_cfg)` runs, on a generated verl config, what verl 0.9.1 runs on it before and
inside its workers, calling verl's functions wherever they exist:
  - verl/utils/config.py validate_config (what main_ppo calls at start-up);
  - the worker-side config classes built the way the workers build them
    (verl.utils.config.omega_conf_to_dataclass -> __post_init__), and ActorConfig.validate;
  - the V1 trainer's normalisation of the mini batch by rollout.n and the TrainingWorker's split by
    data-parallel size, then verl's own tensordict_utils.make_iterator (mini batches per rank) and
    workers/engine/utils.py prepare_micro_batches (micro batches per GPU) on batches of exactly the
    sizes each rank receives.
Logic that is inline in a worker's method is re-stated minimally, with file:function cited.
The oracle's own tests: tests/launcher/test_verl_oracle.py.
"""
from __future__ import annotations

import math

import torch
from omegaconf import DictConfig, OmegaConf, open_dict


def _rank_batch(rows: int, micro_per_gpu: int):
    from verl.utils import tensordict_utils as tu

    return tu.get_tensordict({"input_ids": torch.zeros(rows, 1, dtype=torch.long)},
                             non_tensor_dict={"micro_batch_size_per_gpu": micro_per_gpu, "use_dynamic_bsz": False})


def _micro_batches(rows: int, micro_per_gpu: int) -> list[int]:
    """verl/workers/engine/utils.py prepare_micro_batches on one rank's `rows` samples."""
    from verl.workers.engine.utils import prepare_micro_batches

    micro, _ = prepare_micro_batches(_rank_batch(rows, micro_per_gpu))
    return [len(mb) for mb in micro]


def _mini_batches(rows: int, mini_per_gpu: int) -> list[int]:
    """verl/utils/tensordict_utils.py make_iterator, as TrainingWorker.train_batch calls it."""
    from verl.utils import tensordict_utils as tu

    it = tu.make_iterator(_rank_batch(rows, 1), mini_batch_size=mini_per_gpu, epochs=1, seed=42,
                          dataloader_kwargs={"shuffle": False})
    return [len(mb) for mb in it]


def rank_split(dp: int, P: int, n: int, m: int, mu: int, lam: int, lam_ref: int | None = None) -> dict:
    """How verl's V1 trainer and workers cut one step's batch, run with verl's own functions.
    Raises where verl raises; returns the padding and the per-rank batch sizes."""
    # verl/trainer/ppo/v1/trainer_base.py _get_required_batch_multiple: the step batch is padded to
    # lcm(dp, m*n); the rows each rank holds are what comes after that padding
    global_mini = m * n  # trainer_base.py _update_actor
    multiple = math.lcm(dp, global_mini)
    padded = math.ceil(P * n / multiple) * multiple
    rows_per_rank = padded // dp
    sizes = {"padding": padded - P * n}
    # engine_workers.py TrainingWorker.train_batch: mini_batch_size % dp, then per-rank mini batches
    assert global_mini % dp == 0, f"mini_batch_size={global_mini} % data_parallel_size={dp}"
    mini_per_gpu = global_mini // dp
    sizes["mini_batches"] = _mini_batches(rows_per_rank, mini_per_gpu)
    sizes["micro_batches"] = _micro_batches(mini_per_gpu, mu)
    # compute_log_prob (actor old log-probs and ref) splits each rank's rows by the infer micro size
    sizes["log_prob_micro_batches"] = _micro_batches(rows_per_rank, lam)
    if lam_ref is not None:
        sizes["ref_micro_batches"] = _micro_batches(rows_per_rank, lam_ref)
    return sizes


def verl_accepts(cfg) -> dict:
    """Raises (AssertionError / ValueError from verl) where verl would; returns the per-rank sizes."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    # no copy: src/verl_config/ppo_trainer.py build resolves its config and nothing here writes into it (verl's
    # validate_config and omega_conf_to_dataclass read; the ref section is renamed on a copy below). The deep copy
    # cost 0.2 s of each call's 0.5 s, in every preset sweep
    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.create(cfg)
    use_ref = need_reference_policy(cfg)
    validate_config(config=cfg, use_reference_policy=use_ref, use_critic=need_critic(cfg))
    arr = cfg.actor_rollout_ref
    world = cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes

    actor = omega_conf_to_dataclass(arr.actor)  # FSDPActorConfig.__post_init__
    actor.validate(n_gpus=world, train_batch_size=cfg.data.train_batch_size, model_config=arr.model)
    rollout = omega_conf_to_dataclass(arr.rollout)  # RolloutConfig.__post_init__
    # verl/workers/engine_workers.py ActorRolloutRefWorker.init_model (3.1 rollout device mesh)
    infer_world = (rollout.tensor_model_parallel_size * rollout.data_parallel_size
                   * rollout.pipeline_model_parallel_size)
    assert world % infer_world == 0, f"rollout world_size {world} % infer_world_size {infer_world}"
    # same function: the actor and rollout dynamic-bsz switches must agree
    assert arr.actor.use_dynamic_bsz == arr.rollout.log_prob_use_dynamic_bsz
    if use_ref:
        # engine_workers.py ActorRolloutRefWorker.init_model (1. build reference model): the ref
        # section is renamed into an actor config before omega_conf_to_dataclass
        ref = OmegaConf.create(OmegaConf.to_container(arr.ref))
        with open_dict(ref):
            ref.ppo_mini_batch_size = arr.actor.ppo_mini_batch_size
            ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
            ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
            ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
            ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
        omega_conf_to_dataclass(ref)
    if actor.use_dynamic_bsz:
        return {}
    # FSDP with ulysses sp 1: data-parallel size = world size (engine get_data_parallel_size)
    dp = world // actor.ulysses_sequence_parallel_size
    return rank_split(dp, cfg.data.train_batch_size, rollout.n, actor.ppo_mini_batch_size,
                      actor.ppo_micro_batch_size_per_gpu, arr.rollout.log_prob_micro_batch_size_per_gpu,
                      arr.ref.log_prob_micro_batch_size_per_gpu if use_ref else None)

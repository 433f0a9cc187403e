"""Human view of a RunPlan: a rich table of every derived value and why it differs from intent."""
from __future__ import annotations

import shlex

from rich.console import Console
from rich.table import Table

from src.plan import RunPlan


def scorer_where(plan: RunPlan) -> str:
    s = plan.scorer
    if s is None:
        return "-"
    if s.placement == "shared":
        return f"shared: training GPU {s.training_gpu_index} of each node, {s.dtype}"
    if s.placement == "dedicated":
        return f"dedicated: {plan.scorer_gpus_per_node} own GPU(s) per node, {s.dtype}"
    return "cpu (debugging)"


def memory_rows(plan: RunPlan) -> list[tuple[str, str, str]]:
    """Per-GPU memory (GiB) of the fullest GPU, formulas in src/memory_plan.py."""
    m = plan.memory
    offload = ", ".join(k.split(".")[-3] + "." + k.split(".")[-1] for k, v in plan.verl_passthrough.items()
                        if k.endswith("_offload") and v) or "no offload"
    rows = [
        ("GPU memory per card", f"{m.gpu_gb:g} GiB", f"memory.gpu_gb; reserve {m.reserve_gb:g} GiB (contexts, NCCL)"),
        ("actor FSDP shard per GPU", f"{m.actor_params_gb:.1f} + {m.actor_grads_gb:.1f} + {m.actor_optimizer_gb:.1f}",
         f"params + grads + Adam, GiB ({offload})"),
        ("reference model per GPU", f"{m.ref_gb:.1f}" if m.ref_gb else "-", "GiB (KL loss only)"),
        ("update activations per GPU", f"{m.update_activations_gb:.1f}", "GiB: logits + checkpointed layers, one micro batch"),
        ("vLLM weights + KV cache", f"{m.vllm_weights_gb:.1f} + {m.kv_cache_gb:.1f}",
         f"GiB of its {m.vllm_gb:.1f}; the step needs {m.kv_needed_gb:.1f} GiB KV "
         f"({m.rollout_seqs_per_replica} seqs per replica)"),
    ]
    if plan.scorer is not None and plan.scorer.placement != "cpu":
        rows.append(("scorer GPU memory", f"{m.scorer_gb:.1f}",
                     f"GiB: weights {m.scorer_weights_gb:.1f} + activations {m.scorer_activations_gb:.1f} "
                     f"(batch_tokens {plan.scorer.batch_tokens}) + context"))
    rows.append(("peak per GPU: rollout / update", f"{m.rollout_gb:.1f} / {m.update_gb:.1f}",
                 f"GiB of {m.gpu_gb:g}" + (" (the shared scorer's GPU)" if m.scorer_on_training_gpu else "")))
    return rows


def render(plan: RunPlan, command: list[str], verl_config_path: str, console: Console | None = None) -> None:
    console = console or Console(width=140)
    why = {a.key: f"{a.intent} -> {a.value}: {a.reason}" for a in plan.adjustments}
    b = plan.batch
    table = Table(title=f"Run plan: {plan.model} / {plan.reward} ({plan.reward_mode}) / {plan.algo}",
                  show_lines=False)
    table.add_column("value")
    table.add_column("", justify="right")
    table.add_column("verl key / note")
    rows = [
        ("GPUs (G = per node x nodes)", f"{plan.gpus_per_node} x {plan.nodes} = {plan.world_size}",
         "trainer.n_gpus_per_node, trainer.nnodes"),
        ("prompts per step (P)", b.P, why.get("prompts_per_step", "data.train_batch_size")),
        ("samples per prompt (n)", b.n, "actor_rollout_ref.rollout.n"),
        ("samples per step (P x n)", plan.samples_per_step, ""),
        ("mini batch prompts (m)", b.m, why.get("mini_batch_prompts", "actor.ppo_mini_batch_size")),
        ("micro batch per GPU (mu)", b.mu if not b.dynamic_bsz else "dynamic",
         why.get("micro_batch_per_gpu", "actor.ppo_micro_batch_size_per_gpu")),
        ("log-prob micro per GPU (lam)", b.lam if not b.dynamic_bsz else "dynamic",
         why.get("log_prob_micro_batch_per_gpu", "rollout/ref.log_prob_micro_batch_size_per_gpu")),
        ("token budget per GPU", b.max_token_len_per_gpu or "-", "dynamic bsz only"),
        ("rollout tensor parallel", b.tp, why.get("rollout_tp", "rollout.tensor_model_parallel_size")),
        ("vLLM memory share", plan.gpu_memory_utilization,
         why.get("gpu_memory_utilization", "rollout.gpu_memory_utilization")),
        *memory_rows(plan),
        ("Ray logical CPUs", f"{plan.ray_num_cpus or 'from cluster'} (need {plan.ray_cpus_needed})",
         "ray_kwargs.ray_init.num_cpus"),
        ("scorer models", ", ".join(plan.scorer_models) or "none (no service started)", "QE scoring service"),
        ("scorer placement", scorer_where(plan), "scorer.placement"),
        ("per node: GPUs, CPUs", f"{plan.node_gpus}, {plan.node_cpus}",
         f"Slurm request per node ({plan.scorer_gpus_per_node} dedicated scorer GPU(s))"),
        ("checkpoint dir", plan.checkpoint_dir, "trainer.default_local_dir"),
        ("wandb project", plan.wandb_project, "trainer.project_name"),
        ("wandb run name", plan.wandb_run_name, "trainer.experiment_name"),
        ("wandb run id", plan.wandb_run_id, "WANDB_RUN_ID (env): stable per checkpoint dir"),
        ("run dir", plan.run_dir, "snapshot/, train.log, metrics/<launch>.jsonl"),
        ("verl config", verl_config_path, "validated by verl.utils.config.validate_config"),
    ]
    for name, value, note in rows:
        adjusted = any(note.startswith(str(a.intent) + " -> ") for a in plan.adjustments)
        table.add_row(name, str(value), f"[yellow]{note}[/yellow]" if adjusted else note)
    console.print(table)
    console.print("command: " + shlex.join(command), soft_wrap=True)

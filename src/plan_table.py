"""Human view of a RunPlan: a rich table of every derived value and why it differs from intent."""
from __future__ import annotations

import shlex

from rich.console import Console
from rich.table import Table

from src.plan import RunPlan


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
        ("vLLM memory share", plan.gpu_memory_utilization, "rollout.gpu_memory_utilization"),
        ("Ray logical CPUs", f"{plan.ray_num_cpus or 'from cluster'} (need {plan.ray_cpus_needed})",
         "ray_kwargs.ray_init.num_cpus"),
        ("scorer models", ", ".join(plan.scorer_models), "QE scoring service"),
        ("per node: GPUs, CPUs", f"{plan.node_gpus}, {plan.node_cpus}",
         f"Slurm request per node ({plan.scorer_gpus_per_node} dedicated scorer GPU(s))"),
        ("checkpoint dir", plan.checkpoint_dir, "trainer.default_local_dir"),
        ("wandb project", plan.wandb_project, "trainer.project_name"),
        ("wandb run name", plan.wandb_run_name, "trainer.experiment_name"),
        ("wandb run id", plan.wandb_run_id, "WANDB_RUN_ID (env): stable per checkpoint dir"),
        ("run dir", plan.run_dir, "snapshot/, train.log, metrics.jsonl"),
        ("verl config", verl_config_path, "validated by verl.utils.config.validate_config"),
    ]
    for name, value, note in rows:
        adjusted = any(note.startswith(str(a.intent) + " -> ") for a in plan.adjustments)
        table.add_row(name, str(value), f"[yellow]{note}[/yellow]" if adjusted else note)
    console.print(table)
    console.print("command: " + shlex.join(command), soft_wrap=True)

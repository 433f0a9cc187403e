"""Human view of a RunPlan: a rich table of every derived value and why it differs from intent."""
from __future__ import annotations

import shlex
import shutil

from rich.console import Console
from rich.table import Table
from rich.text import Text

from src.config.schema import Placement

from . import schedule
from .run_names import reward_names
from .run_plan import RunPlan

# the width where the output is no terminal (a log file, a pipe) and COLUMNS is unset
FALLBACK_WIDTH = 140


def stop_rule_rows(plan: RunPlan) -> list[tuple]:
    """What stops training (src/plan/stop_rules.py, enforced by src/trainer/guard.py)."""
    r = plan.stop_rules
    if r is None:
        return []
    rows = [("lost groups allowed", r.lost_groups_allowed, "scorer.lost_groups_allowed (then the run stops)")]
    if r.filter_metric is not None:
        rows.append(("DAPO gen batches per step", f"<= {r.max_gen_batches} (filter on {r.filter_metric})",
                     "algo.filter_groups.max_num_gen_batches (then the run stops)"))
    return rows


def credit_row(plan: RunPlan) -> tuple[str, str, str]:
    """reward.credit: where the reward lands on the response tokens (src/rewards/credit)."""
    t = plan.token_credit
    if t is None:
        return ("reward credit", "sequence",
                f"reward.credit: one score per answer, on its last token (verl's {plan.estimator})")
    sev = ", ".join(f"{k} {-t.scale * w / max(t.severity_weights.values()):g}" for k, w in t.severity_weights.items())
    return ("reward credit", f"token: {t.estimator}, weight {t.weight:g}",
            f"reward.credit; token penalties from {t.source} ({sev}); agent loop {t.agent_loop}")


def normalise_row(plan: RunPlan) -> tuple[str, str, str]:
    """reward.normalise: how the reward's parts become GRPO's advantage (src/rewards/normalise.py)."""
    from src.rewards import normalise

    if not normalise.enabled(plan.reward_kwargs):
        return ("reward normalisation", normalise.SUM,
                f"reward.normalise: the summed score, one advantage per answer from verl's {plan.estimator}")
    parts = ", ".join(f"{c} x{w:g}" for c, w in normalise.weights_of(plan.reward_kwargs).items())
    return ("reward normalisation", normalise.PER_COMPONENT,
            f"reward.normalise: each part normalised in its group, then weighted ({parts}); "
            f"verl: algorithm.adv_estimator={normalise.ESTIMATOR}")


def trains_rows(plan: RunPlan) -> list[tuple]:
    """What verl trains, with each value's source (src/plan/algorithm.py; empty before the verl config exists)."""
    return [(r["what"], r["value"], r["source"]) for r in plan.trains]


def time_limit_rows(plan: RunPlan) -> list[tuple]:
    """What a Slurm time limit costs (src/plan/time_limit.py; the save: src/trainer/time_limit.py): the step in progress, if it ends in time."""
    t = plan.time_limit
    if t is None:
        return []
    return [("Slurm time limit", f"{t.timeout_min} min, signal {t.signal_delay_s} s before",
             f"slurm.timeout_min/signal_delay_s: the step in progress is saved and the job requeued "
             f"(<= {t.max_num_timeout} times) if it ends within {t.stop_by_s} s of the signal; "
             f"else it resumes from the last periodic save")]


def stall_rows(plan: RunPlan) -> list[tuple]:
    """When a run whose steps stopped ending is stopped (src/plan/stall.py; the guard: src/node/stall.py)."""
    if plan.stall is None:
        return []
    requeues = plan.time_limit.max_stall_requeues if plan.time_limit is not None else 0
    return [("stall guard", plan.stall.describe(),
             "trainer.stall_*: the run is stopped as stalled, every training process's stacks in the run dir; "
             f"a Slurm job is then requeued (<= {requeues} times, a dead training process's included: "
             "slurm.max_stall_requeues)")]


def attention_rows(plan: RunPlan) -> list[tuple]:
    """The actor/ref attention implementation and remove padding, each with why (src/plan/attention.py)."""
    a = plan.attention
    if a is None:
        return []
    return [("attention (actor, ref)", a.implementation,
             f"{a.reason}; verl: actor_rollout_ref.model.override_config.attn_implementation"),
            ("remove padding", "on" if a.remove_padding else "off",
             f"{a.remove_padding_reason}; verl: actor_rollout_ref.model.use_remove_padding")]


def sampler_rows(plan: RunPlan) -> list[tuple]:
    """vLLM's top-k/top-p sampler, with why (src/plan/sampler.py)."""
    s = plan.sampler
    return [] if s is None else [("rollout sampler (vLLM)", s.sampler, s.reason)]


def scorer_where(plan: RunPlan) -> str:
    s = plan.scorer
    if s is None:
        return "-"
    if s.placement == Placement.shared:
        return f"shared: training GPU {s.training_gpu_index} of each node, {s.dtype}"
    if s.placement == Placement.dedicated:
        return f"dedicated: {plan.scorer_gpus_per_node} own GPU(s) per node, {s.dtype}"
    if s.placement == Placement.external:
        return f"external: {s.url} (its token: QE_SCORER_TOKEN)"
    return "cpu (debugging)"


def accelerator_row(plan: RunPlan) -> tuple[str, str, str]:
    """Where training runs; on CPU, how (conf/accelerator/cpu.yaml) and what the GPU rows then mean."""
    if plan.device != "cpu":
        return ("accelerator", plan.device, "trainer.device (accelerator group)")
    return ("accelerator", "cpu (CPU loop)",
            f"trainer.device=cpu: verl's platform from src/cpu_platform (VERL_PLATFORM=cpu), vLLM's CPU build, FSDP on "
            f"gloo, each GPU a Ray logical GPU; trains in {plan.trainer_python}")


KV_CACHE_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes"


def cpu_memory_rows(plan: RunPlan) -> list[tuple[str, str, str]]:
    """On the CPU loop no GPU memory plan applies (memory.gpu_gb, the vLLM share, peaks per GPU): what vLLM-CPU
    reads instead (conf/accelerator/cpu.yaml)."""
    # the user's verl.* keys are applied after the accelerator's
    kv = {**plan.accelerator_verl, **(plan.verl_passthrough or {})}.get(KV_CACHE_KEY)
    return [("GPU memory", "- (no GPU)", "accelerator=cpu: the machine's RAM holds everything; no GPU memory plan"),
            ("vLLM KV cache per engine", f"{int(kv) / 2**20:g} MiB" if kv else "vLLM-CPU's default",
             f"verl.{KV_CACHE_KEY} (vLLM-CPU reads it, not rollout.gpu_memory_utilization)")]


def memory_rows(plan: RunPlan) -> list[tuple[str, str, str]]:
    """Per-GPU memory (GiB) of the fullest GPU, formulas in src/plan/memory.py."""
    m = plan.memory
    offload = ", ".join(k.split(".")[-3] + "." + k.split(".")[-1] for k, v in plan.verl_passthrough.items()
                        if k.endswith("_offload") and v) or "no offload"
    rows = [
        ("GPU memory per card", f"{m.gpu_gb:g} GiB", f"memory.gpu_gb; reserve {m.reserve_gb:g} GiB (contexts, NCCL)"),
        ("actor FSDP shard per GPU", f"{m.actor_params_gb:.1f} + {m.actor_grads_gb:.1f} + {m.actor_optimizer_gb:.1f}",
         f"params + grads + Adam, GiB ({offload})" + (
             f"; LoRA: grads and Adam of the {m.lora_params / 1e6:.0f} M adapter parameters only" if m.lora_params
             else "")),
        ("reference model per GPU", f"{m.ref_gb:.1f}" if m.ref_gb else "-",
         "GiB (KL loss only; with LoRA the actor with its adapter off)"),
        ("update micro batch per GPU", f"{m.update_activations_gb:.1f}",
         "GiB above the FSDP shards: activations + units in flight (measured, benches/RESULTS.md)"),
        ("vLLM weights + KV cache", f"{m.vllm_weights_gb:.1f} + {m.kv_cache_gb:.1f}",
         f"GiB of its {m.vllm_gb:.1f}; the step needs {m.kv_needed_gb:.1f} GiB KV "
         f"({m.rollout_seqs_per_replica} seqs per replica)"),
    ]
    if plan.scorer is not None and plan.scorer.placement not in (Placement.cpu, Placement.external):
        rows.append(("scorer GPU memory", f"{m.scorer_gb:.1f}",
                     f"GiB: weights {m.scorer_weights_gb:.1f} + activations {m.scorer_activations_gb:.1f} "
                     f"(batch_tokens {plan.scorer.batch_tokens}) + context"))
    rows.append(("peak per GPU: rollout / update", f"{m.rollout_gb:.1f} / {m.update_gb:.1f}",
                 f"GiB of {m.gpu_gb:g}" + (" (the shared scorer's GPU)" if m.scorer_on_training_gpu else "")))
    return rows


def wandb_rows(plan: RunPlan, wandb_mode: str | None) -> list[tuple[str, str, str]]:
    """How wandb logs (None: not said by the caller) and the names it logs under."""
    if "wandb" not in plan.logger_backends:
        mode = ("off", "logger.backends has no wandb (logger=console): metrics go to the console and the metrics file")
    else:
        mode = (wandb_mode or ("offline" if plan.wandb_offline else "online"),
                "logger.offline / WANDB_MODE; offline runs: wandb dir below, `wandb sync` it")
    return [("wandb mode", *mode),
            ("wandb project", plan.wandb_project, "trainer.project_name"),
            ("wandb run name", plan.wandb_run_name, "trainer.experiment_name"),
            ("wandb run id", plan.wandb_run_id, "WANDB_RUN_ID (env): stable per run id")]


def path_rows(plan: RunPlan, verl_config_path: str) -> list[tuple[str, str, str]]:
    """The run's paths, printed whole below the table, one a line (a table cell would cut or fold them)."""
    rows = [("checkpoint dir", plan.checkpoint_dir, "trainer.default_local_dir; metrics/ of every attempt")]
    if plan.wandb_dir:
        rows.append(("wandb dir", plan.wandb_dir, "WANDB_DIR (env), in the checkpoint dir: " + (
            f"offline-run-* to `wandb sync`: wandb sync {plan.run_dir}/wandb" if plan.wandb_offline else
            f"wandb's run files (offline: offline-run-* to `wandb sync`: wandb sync {plan.run_dir}/wandb)")))
    rows += [("run dir", plan.run_dir, "snapshot/, train.log of this launch"),
             ("verl config", verl_config_path, "validated by verl.utils.config.validate_config (a pass is reused for "
                                               "the same config and verl: src/verl_config/cache.py)")]
    return rows


def width() -> int:
    """The terminal's width (shutil honours COLUMNS), FALLBACK_WIDTH where the output is no terminal."""
    return shutil.get_terminal_size(fallback=(FALLBACK_WIDTH, 24)).columns


def render(plan: RunPlan, command: list[str], verl_config_path: str, console: Console | None = None,
           lineage: str | None = None, wandb_mode: str | None = None) -> None:
    """`lineage`: for a --from-snapshot run, the line saying whether it reproduces or resumes. `wandb_mode`: how
    wandb will log, as the caller reads it from the environment (src/node/preflight.py wandb_mode)."""
    console = console or Console(width=width())
    if lineage:
        console.print(lineage, soft_wrap=True)
    why = {a.key: f"{a.intent} -> {a.value}: {a.reason}" for a in plan.adjustments}
    b = plan.batch
    # the span model's mode only where a span model runs, as the dir and wandb names (issue 33)
    reward, *mode = reward_names(plan.reward, plan.reward_mode, (plan.reward_kwargs.get("models") or {}).get("span"))
    reward_title = f"{reward} ({mode[0]})" if mode else reward
    table = Table(title=f"Run plan: {plan.model} / {reward_title} / {plan.algo}",
                  show_lines=False)
    # fold, never "...": a long value or note wraps inside its cell
    table.add_column("value", overflow="fold")
    # at most a third of the width: a long value (a run name) folds, the notes keep their room
    table.add_column("", justify="right", overflow="fold", max_width=max(24, console.width // 3))
    table.add_column("verl key / note", overflow="fold")
    cpu = plan.device == "cpu"
    rows = [
        ("GPUs (G = per node x nodes)", f"{plan.gpus_per_node} x {plan.nodes} = {plan.world_size}",
         "trainer.n_gpus_per_node, trainer.nnodes"),
        accelerator_row(plan),
        ("prompts per step (P)", b.prompts_per_step, why.get("prompts_per_step", "data.train_batch_size")),
        ("samples per prompt (n)", b.samples_per_prompt, "actor_rollout_ref.rollout.n"),
        ("samples per step (P x n)", plan.samples_per_step, ""),
        ("mini batch prompts (m)", b.mini_batch_prompts, why.get("mini_batch_prompts", "actor.ppo_mini_batch_size")),
        ("micro batch per GPU (mu)", b.micro_batch_per_gpu if not b.dynamic_bsz else "dynamic",
         why.get("micro_batch_per_gpu", "actor.ppo_micro_batch_size_per_gpu")),
        ("log-prob micro per GPU (lam)", b.log_prob_micro_batch_per_gpu if not b.dynamic_bsz else "dynamic",
         why.get("log_prob_micro_batch_per_gpu", "rollout/ref.log_prob_micro_batch_size_per_gpu")),
        ("token budget per GPU", b.max_token_len_per_gpu or "-", "dynamic bsz only"),
        ("rollout tensor parallel", b.rollout_tp, why.get("rollout_tp", "rollout.tensor_model_parallel_size")),
        *(cpu_memory_rows(plan) if cpu else (
            ("vLLM memory share", plan.gpu_memory_utilization,
             why.get("gpu_memory_utilization", "rollout.gpu_memory_utilization")),
            *memory_rows(plan))),
        *attention_rows(plan),
        *sampler_rows(plan),
        ("Ray logical CPUs", f"{plan.ray_num_cpus or 'from cluster'} (need {plan.ray_cpus_needed})",
         "ray_kwargs.ray_init.num_cpus"),
        ("scorer models", ", ".join(plan.scorer_models) or "none (no service started)", "QE scoring service"),
        ("scorer placement", scorer_where(plan), "scorer.placement"),
        *trains_rows(plan),
        *(schedule.rows(plan.schedule) if plan.schedule is not None else ()),
        credit_row(plan),
        normalise_row(plan),
        ("per node: GPUs, CPUs", f"{plan.node_gpus}, {plan.node_cpus}",
         f"Slurm request per node ({plan.scorer_gpus_per_node} dedicated scorer GPU(s))"),
        *stop_rule_rows(plan),
        *time_limit_rows(plan),
        *stall_rows(plan),
        ("run id", plan.run_id + (f" (reproduces {plan.reproduces})" if plan.reproduces else ""),
         "hash of the training config (src/record/identity.py)"),
        ("differs from the preset", "named as the run it comes from" if plan.differs_from_preset is None
         else ", ".join(d["word"] for d in plan.differs_from_preset) or "nothing",
         "what the run's name reads (src/plan/run_names.py), every word; keys: plan.json, run_identity.json"),
        *wandb_rows(plan, wandb_mode),
    ]
    for name, value, note in rows:
        adjusted = any(note.startswith(str(a.intent) + " -> ") for a in plan.adjustments)
        # Text, not markup: a value or a path with [brackets] is shown as it is
        table.add_row(Text(name), Text(str(value)), Text(note, style="yellow" if adjusted else ""))
    console.print(table)
    paths = path_rows(plan, verl_config_path)
    pad = max(len(name) for name, _, _ in paths)
    for name, path, note in paths:
        # whole, never cut or folded: a path is copied from here (a long line soft-wraps in the terminal)
        console.print(f"{name:<{pad}}  {path}  ({note})", soft_wrap=True, markup=False, highlight=False)
    console.print("command: " + shlex.join(command), soft_wrap=True, markup=False, highlight=False)

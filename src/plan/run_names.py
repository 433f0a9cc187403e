"""A run's names, made here and nowhere else: its checkpoint dir (prefix and leaf), its wandb project, run name
and id.

A name says what the run trains differently from the preset it starts from, in the words a researcher
uses (`seed2_prompts24_kiwi0.5_lr2e-6`): the seed, then one word and value per key of the run's
identity (src/record/identity.py: verl's resolved config, what the run id hashes) whose value differs
from the preset's identity (src/pipeline/lineage.py baseline_identity). So a name claims only what changes
what verl trains, two runs with one id have one name, and the id suffix keeps each name unique.

WORDS is the one table of those words. A key it lacks (a `+verl.` key nobody named) falls back to its
last part without filler, cut to FALLBACK_CHARS; a key it marks None is a copy of a key named above (the
launcher writes one plan value to both, src/verl_config/ppo_trainer.py VERL_KEYS) and is named once.
The dir leaf and the wandb name are at most LIMIT characters: words that do not fit are counted
(`_+3more`); every one of them is in the plan (`differs from the preset`) and the run's identity file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from src.scorer.config import checkpoint_name

LIMIT = 80
# a reproduction's leaf adds `-repro<N>` (with_identity): room for the first nine
REPRO_ROOM = len("-repro1")
FALLBACK_CHARS = 16
ABSENT = "<absent>"

_RK = "reward.custom_reward_function.reward_kwargs."
_ROLLOUT = "actor_rollout_ref.rollout."
_ACTOR = "actor_rollout_ref.actor."

# (identity key, word), in the order a name lists them: what a researcher changes most first, so a
# name cut at LIMIT keeps those. `*` matches one key part and `{}` in the word is that part.
WORDS: tuple[tuple[str, Optional[str]], ...] = (
    ("data.seed", None),  # the seed leads every name (run_name)
    (_ACTOR + "optim.lr", "lr"),
    ("actor_rollout_ref.model.lora_rank", None),  # model.lora.rank: in the model's part (model_label)
    ("actor_rollout_ref.model.lora_alpha", "loraalpha"),
    ("actor_rollout_ref.model.target_modules", "loratargets"),
    (_ACTOR + "strategy", "strategy"),  # FSDP or FSDP2 (a LoRA run on the CPU loop: src/verl_config/ppo_trainer.py)
    ("data.train_batch_size", "prompts"),
    ("trainer.v1.sampler.sampler_kwargs.train_batch_size", None),  # data.train_batch_size's copy
    (_ROLLOUT + "n", "n"),
    (_ACTOR + "ppo_mini_batch_size", "minibatch"),
    (_RK + "train_weights.*", "{}"),
    (_RK + "validation_weights.*", "val{}"),
    ("data.train_files", "data"),
    ("data.val_files", "valdata"),
    ("actor_rollout_ref.model.path", "model"),
    ("trainer.total_training_steps", "steps"),
    ("trainer.total_epochs", "epochs"),
    ("algorithm.adv_estimator", "adv"),
    (_ACTOR + "policy_loss.loss_mode", "loss"),
    (_ACTOR + "loss_agg_mode", "agg"),
    (_ACTOR + "loss_scale_factor", "lossscale"),
    (_ACTOR + "use_kl_loss", "klloss"),
    (_ACTOR + "kl_loss_coef", "kl"),
    (_ACTOR + "kl_loss_type", "kltype"),
    (_ACTOR + "entropy_coeff", "entropy"),
    (_ACTOR + "clip_ratio_low", "cliplow"),
    (_ACTOR + "clip_ratio_high", "cliphigh"),
    (_ACTOR + "clip_ratio_c", "clipc"),
    (_ACTOR + "ppo_epochs", "ppoepochs"),
    ("algorithm.norm_adv_by_std_in_grpo", "stdnorm"),
    ("algorithm.use_kl_in_reward", "klreward"),
    ("algorithm.filter_groups.enable", "filter"),
    ("algorithm.filter_groups.metric", "filtermetric"),
    ("algorithm.filter_groups.max_num_gen_batches", "genbatches"),
    ("trainer.v1.sampler.sampler_kwargs.max_gen_batches", None),  # the filter's genbatches, as the stop rule reads it
    ("trainer.v1.sampler.sampler_kwargs.filter_metric", None),  # the filter's metric
    ("trainer.v1.sampler.sampler_kwargs.lost_groups_allowed", "lostgroups"),
    ("trainer.v1.sampler.sampler_kwargs.max_inflight_gen_batches", "inflight"),
    (_ROLLOUT + "temperature", "temp"),
    (_ROLLOUT + "top_p", "topp"),
    (_ROLLOUT + "top_k", "topk"),
    (_ROLLOUT + "val_kwargs.temperature", "valtemp"),
    (_ROLLOUT + "val_kwargs.top_p", "valtopp"),
    (_ROLLOUT + "val_kwargs.n", "valn"),
    (_ROLLOUT + "val_kwargs.do_sample", "valsample"),
    ("data.max_prompt_length", "maxprompt"),
    ("data.max_response_length", "maxresp"),
    ("reward.reward_kwargs.max_resp_len", None),  # data.max_response_length's copy for the overlong penalty
    ("data.train_max_samples", "trainrows"),
    ("data.val_max_samples", "valrows"),
    ("reward.reward_kwargs.overlong_buffer_cfg.enable", "overlong"),
    ("reward.reward_kwargs.overlong_buffer_cfg.log", None),  # follows enable
    ("reward.reward_kwargs.overlong_buffer_cfg.len", "overlonglen"),
    ("reward.reward_kwargs.overlong_buffer_cfg.penalty_factor", "overlongpenalty"),
    (_RK + "guards.*.enable", "{}"),
    (_RK + "guards.*.penalty", "{}penalty"),
    (_RK + "models.*", "{}model"),
    (_RK + "mode", "rewardmode"),
    (_RK + "reward", "reward"),
    (_RK + "discrete.enable", "discrete"),
    (_RK + "format.bonus", "formatbonus"),
    (_RK + "format.floor", "formatfloor"),
    (_RK + "round_decimals", "rounding"),
    (_RK + "clip.*", "{}clip"),
    ("reward.custom_reward_function.path", "rewardfn"),
    ("reward.custom_reward_function.name", None),  # the function in the module rewardfn names
    ("reward.reward_manager.source", None),  # the manager's name says it
    ("reward.reward_manager.name", "manager"),
    ("reward.reward_manager.module.path", None),  # where the manager (its name) is
    ("data.filter_overlong_prompts", "filterlong"),
    ("data.truncation", "truncation"),
    ("data.apply_chat_template_kwargs.chat_template", "chattemplate"),
    (_ROLLOUT + "name", "rollout"),
    ("trainer.v1.sampler.custom_sampler.path", "sampler"),
    ("trainer.v1.sampler.custom_sampler.name", None),  # the class in the module sampler names
    ("qe_scorer.*.path", "qe"),
    ("qe_scorer.*.dtype", "{}"),
    ("qe_scorer.*.kind", None),  # a scorer of another kind has another checkpoint path: named by it
    (_ACTOR + "ppo_micro_batch_size_per_gpu", "micro"),
    (_ROLLOUT + "log_prob_micro_batch_size_per_gpu", "lpmicro"),
    ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", None),  # the rollout's lpmicro
    (_ACTOR + "use_dynamic_bsz", "dynbsz"),
    (_ROLLOUT + "log_prob_use_dynamic_bsz", None),  # the actor's dynbsz
    ("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", None),
    (_ACTOR + "ppo_max_token_len_per_gpu", "tokens"),
    (_ROLLOUT + "log_prob_max_token_len_per_gpu", None),  # the actor's tokens
    ("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", None),
    (_ROLLOUT + "gpu_memory_utilization", "vllmmem"),
    (_ROLLOUT + "tensor_model_parallel_size", "tp"),
    (_ROLLOUT + "enforce_eager", "eager"),
    (_ROLLOUT + "agent.num_workers", "agentworkers"),
    ("reward.num_workers", "rewardworkers"),
    ("actor_rollout_ref.model.use_remove_padding", "rmpad"),
    ("actor_rollout_ref.model.enable_gradient_checkpointing", "gradckpt"),
    ("trainer.n_gpus_per_node", "gpus"),
    ("trainer.nnodes", "nodes"),
)

# words a fallback drops: they say nothing of which setting it is
_FILLER = {"ppo", "per", "gpu", "size", "use", "num", "the", "of"}
# verl's data file keys: a path names the run by its data set's tag (the file's dir, or its stem when the
# file is not named for its split), never by the path itself; the path is in the snapshot (issue 33)
_DATA_FILES = ("data.train_files", "data.val_files")
_SPLIT_STEMS = ("train", "val", "valid", "validation", "dev", "test")


@dataclass(frozen=True)
class Difference:
    """One word of a name: the key of the identity it reads, its value in the preset and in this run."""
    word: str  # `prompts24`
    key: str
    preset: object
    run: object


def key_part(pattern: str, key: str) -> Optional[str]:
    """"" or the part `*` matched when `key` is `pattern`; None when it is not."""
    p, k = pattern.split("."), key.split(".")
    if len(p) != len(k):
        return None
    caught = ""
    for a, b in zip(p, k):
        if a == "*":
            caught = b
        elif a != b:
            return None
    return caught


def word_of(key: str) -> tuple[int, Optional[str]]:
    """(rank in WORDS, word) of an identity key; the word None for a copy. A key WORDS lacks: rank
    len(WORDS) and its fallback (the last part without filler, cut to FALLBACK_CHARS)."""
    for rank, (pattern, word) in enumerate(WORDS):
        caught = key_part(pattern, key)
        if caught is not None:
            return rank, None if word is None else word.replace("{}", caught.replace("_", ""))
    return len(WORDS), fallback_word(key)


def fallback_word(key: str) -> str:
    """`actor_rollout_ref.actor.fsdp_config.param_offload` -> `paramoffload`; a switch by what it switches."""
    parts = key.split(".")
    last = parts[-2] if parts[-1] == "enable" and len(parts) > 1 else parts[-1]
    kept = [w for w in re.split(r"[_\W]+", last.lower()) if w and w not in _FILLER] or [last.lower()]
    return "".join(kept)[:FALLBACK_CHARS]


def data_tag(value) -> str:
    """`/data/mypairs/train.parquet` -> `mypairs`; `/data/flores_dev.parquet` -> `flores_dev`."""
    paths = value if isinstance(value, (list, tuple)) else [value]
    tags = []
    for path in paths:
        p = Path(str(path))
        tag = p.parent.name if p.stem.lower() in _SPLIT_STEMS and p.parent.name else p.stem
        if tag not in tags:
            tags.append(tag)
    return "+".join(tags) or "none"


def _number(value) -> str:
    # 2e-06 -> 2e-6: how a researcher writes a learning rate
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", repr(value)) if isinstance(value, float) else str(value)


def _value_text(key: str, value) -> str:
    """The value as a name shows it: a number right after its word (`lr2e-6`), anything else after a
    dash (`repetition-off`, `data-mypairs`, `model-Qwen2.5-3B`)."""
    if value == ABSENT or value is None:
        return "-none"
    if isinstance(value, bool):
        return "-on" if value else "-off"
    if isinstance(value, (int, float)):
        return _number(value)
    if key in _DATA_FILES:
        return "-" + data_tag(value)
    if key.startswith("qe_scorer.") and key.endswith(".path"):
        return "-" + (checkpoint_name(str(value)) or "none")
    if isinstance(value, (list, tuple)):
        return "-" + ",".join(_value_text(key, v).lstrip("-") for v in value)
    # a file path names itself by its file (/models/Qwen2.5-3B -> Qwen2.5-3B), a class or module path by
    # its last part (pkg://src.trainer.guard.X -> X)
    text = str(value).rstrip("/").rsplit("/", 1)[-1]
    module = "://" in str(value) or re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(:\w+)?", text)
    return "-" + (re.split(r"[.:]", text)[-1] if module else text)


def differences(ident: dict, preset: dict, derived: frozenset = frozenset()) -> list[Difference]:
    """What this run's identity changes against the preset's, one word per fact, in WORDS' order (then
    fallbacks by key). `derived`: keys verl's yaml derives from another key (the actor's copy of
    rollout.n), named by that key."""
    keys = sorted(k for k in set(ident) | set(preset)
                  if k not in derived and ident.get(k, ABSENT) != preset.get(k, ABSENT))
    ranked = []
    for key in keys:
        rank, word = word_of(key)
        if word is None:
            continue
        value = ident.get(key, ABSENT)
        if key == "data.val_files" and data_tag(value) == data_tag(ident.get("data.train_files")):
            continue  # val files of the train files' data set: `data-<tag>` says both
        ranked.append((rank, key, Difference(_clean(word + _value_text(key, value)), key,
                                             preset.get(key, ABSENT), value)))
    return [d for _, _, d in sorted(ranked, key=lambda r: (r[0], r[1]))]


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text)


def run_name(preset: Optional[str], seed: int, found: list[Difference], budget: int) -> str:
    """`smoke_tiny_seed1_lr2e-6_prompts24`: the experiment preset (when the run starts from one), the seed,
    then each difference's word, in order, while the name stays within `budget` characters; a word that
    does not fit is left out whole and counted (`_+2more`), a shorter one after it may still fit."""
    head = _clean("_".join(([preset] if preset else []) + [f"seed{seed}"]))
    every = "_".join([head] + [d.word for d in found])
    if len(every) <= budget:
        return every
    room = budget - len(f"_+{len(found)}more")
    name, left_out = head, 0
    for diff in found:
        if len(name) + 1 + len(diff.word) <= room:
            name += "_" + diff.word
        else:
            left_out += 1
    return f"{name}_+{left_out}more"


@dataclass(frozen=True)
class RunNames:
    leaf: str         # the checkpoint dir's leaf: `<name>-<id>[-repro<N>]`
    wandb_name: str   # trainer.experiment_name: `<model>-<algo>-g<G>-<leaf>`
    wandb_id: str     # WANDB_RUN_ID: the same id on every attempt resumes the wandb run


def _wandb_prefix(model: str, algo: str, world_size: int) -> str:
    return f"{model}-{algo}-g{world_size}-"


def name_budget(model: str, algo: str, world_size: int, run_id: str) -> int:
    """How long a new run's name may be for its wandb name (the longer one) to stay within LIMIT."""
    return LIMIT - len(_wandb_prefix(model, algo, world_size)) - len(f"-{run_id}") - REPRO_ROOM


def names(model: str, algo: str, world_size: int, name: str, run_id: str, reproduction: int = 0) -> RunNames:
    """The names of the run `name`-`run_id` (the N-th reproduction of it when `reproduction`)."""
    leaf = f"{name}-{run_id}" + (f"-repro{reproduction}" if reproduction else "")
    # wandb ids: letters, digits, - and _ only
    wandb_id = f"qerl-{run_id}" + (f"-repro{reproduction}" if reproduction else "")
    return RunNames(leaf, wandb_name(model, algo, world_size, leaf), wandb_id)


def wandb_name(model: str, algo: str, world_size: int, leaf: str) -> str:
    """The wandb run name of a checkpoint dir's leaf (for a dir named before the limit, as long as it was:
    its wandb run keeps its name)."""
    prefix = _wandb_prefix(model, algo, world_size)
    if len(prefix) + len(leaf) > LIMIT and len(leaf) <= LIMIT - REPRO_ROOM:
        prefix = prefix[:max(0, LIMIT - len(leaf))]  # a model or algo name too long for the limit
    return prefix + leaf


def reward_names(reward: str, mode: str, span_model: Optional[str]) -> tuple[str, ...]:
    """How dirs and wandb name the reward: with its mode only where a span model runs (mode train|eval);
    with mode=off no span model is loaded, and `<reward>_off` would read as "<reward> off"."""
    return (reward, mode) if span_model else (reward,)


def model_label(model: str, lora_rank: int) -> str:
    """The model as dirs and wandb name it: `qwen2.5_7b-lora64` for a LoRA run, which trains other weights than
    a run of the whole model (and saves other checkpoints), whatever the preset it is read against."""
    return f"{model}-lora{lora_rank}" if lora_rank > 0 else model


def checkpoint_prefix(results_root: str, model: str, reward: tuple[str, ...], algo: str, world_size: int) -> str:
    # One subtree per world size because FSDP shards are per rank. The run's own dir below it
    # (with_identity) ends in the run id. No timestamps: requeue/resume find it.
    return f"{results_root}/{model}/{'_'.join(reward)}/{algo}/gpus{world_size}"


def wandb_project(reward: tuple[str, ...], samples_per_step: int) -> str:
    return f"qe-rl-{'-'.join(reward)}-s{samples_per_step}"


def earlier_names(plan) -> tuple[str, str]:
    """(checkpoint prefix, wandb project) of this run (its plan before with_identity) as runs launched
    before issue 33 were named: the reward always with its mode (`comet_off`). A run launched then
    keeps its checkpoints and wandb run there (src/pipeline/lineage.py finds them)."""
    prefix = Path(plan.checkpoint_dir)
    earlier = (plan.reward, plan.reward_mode)
    return (checkpoint_prefix(str(prefix.parents[3]), plan.model, earlier, plan.algo, plan.world_size),
            wandb_project(earlier, plan.samples_per_step))


def name_of_dir(checkpoint_dir: str, rid: str) -> str:
    """The name part of a checkpoint dir `<name>-<id>[-repro<N>]`: a reproduction keeps its original's."""
    leaf = Path(checkpoint_dir).name
    return re.sub(rf"-{re.escape(rid)}(-repro\d+)?$", "", leaf) if rid else leaf

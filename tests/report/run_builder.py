"""Builds a small run directory the way a real verl 0.9.1 run writes it, using verl's own code:

- metrics via verl's `FileLogger` (the file logger behind `trainer.logger=[..., file]`), with the
  metric dicts made by verl's `compute_data_metrics` / `compute_timing_metrics` /
  `compute_throughout_metrics` on a batch, and validation metrics by the V1 trainer's own
  `_val_metrics_update`, so names and layout are exactly what a run logs;
- validation generations via the V1 trainer's `_write_generations` (what
  `trainer.validation_data_dir` gets), prompts rendered with the chat template and decoded with
  special tokens skipped, as the trainer does;
- the reward components sidecar the reward function writes (our own contract).

Only what needs a GPU (generation, the update) is replaced by numbers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from src.data.templates import build_prompt

DATASET = "wmt_zh_en"
PROMPTS_PER_STEP = 4  # data.train_batch_size
SAMPLES_PER_PROMPT = 2  # rollout.n
GPUS = 2
STEPS = 6
TEST_FREQ = 2
RESPONSE_WIDTH = 16  # max_response_length
PROMPT_WIDTH = 12  # max_prompt_length

# Stage seconds of step s: what the plots and tables must show back.
def stage_times(step: int) -> dict[str, float]:
    return {
        "gen": 10.0 + step,
        "old_log_prob": 2.0,
        "ref": 1.5,
        "adv": 0.5,
        "update_actor": 6.0,
    }


STEP_OVERHEAD = 1.0  # driver time outside named stages -> "other"


def train_score(step: int) -> float:
    return 0.1 * step


VAL_SAMPLES = [
    # (direction, source, reference, response, reward extras)
    (
        "zh-en",
        "这只猫坐在垫子上。",
        "The cat sat on the mat.",
        "<think>简单句子。</think> <translate>The cat sat in the mat.</translate>",
        {"xcomet": 0.71, "format": 1.0, "translation": "The cat sat in the mat.",
         "error_spans": [{"text": " in", "confidence": 0.81, "severity": "major", "start": 11, "end": 14}]},
    ),
    (
        "zh-en",
        "<script>alert('x')</script> & 今天",
        "<b>Today</b> & co",
        "<think>?</think><translate><img src=x onerror=alert(1)> today</translate>",
        {"xcomet": 0.20, "format": 1.0, "translation": "<img src=x onerror=alert(1)> today",
         "error_spans": [{"text": "<img src=x onerror=alert(1)>", "confidence": 0.95, "severity": "critical",
                          "start": 0, "end": 28}]},
    ),
    (
        "en-zh",
        "The weather is nice today.",
        "今天天气很好。",
        "<think>翻译</think><translate>今天天气不错。</translate>",
        {"xcomet": 0.93, "format": 1.0, "translation": "今天天气不错。",
         "error_spans": [{"text": "不错", "confidence": 0.4, "severity": "minor", "start": 4, "end": 6}]},
    ),
    (
        "en-zh",
        "No tags here.",
        "这里没有标签。",
        "这里没有标签。",
        {"xcomet": 0.0, "format": 0.0, "translation": "", "error_spans": []},
    ),
]


def val_score(step: int, i: int) -> float:
    return round(0.2 + 0.05 * step + 0.1 * i, 4)


# the training reward's weights the snapshot's verl config names: XCOMET is trained on, COMET-DA
# (logged at validation only with held_out=True) is held out
TRAIN_WEIGHTS = {"bleu": 0.0, "comet": 0.0, "kiwi": 0.0, "xcomet": 1.0, "mqm": 0.0, "ok_ratio": 0.0}


def held_out_comet(step: int, i: int) -> float:
    """The held-out COMET-DA of validation sample i: falls while the trained XCOMET climbs."""
    return round(0.6 + 0.05 * i - 0.02 * step, 4)


def held_out_metricx(step: int, i: int) -> float:
    """The held-out MetricX-24 of validation sample i, raw (0-25, lower is better): it rises (gets
    worse) by 0.25 per step while the trained XCOMET climbs."""
    return round(3.0 + 0.5 * i + 0.25 * step, 4)


def _batch(step: int):
    from verl.protocol import DataProto

    b = PROMPTS_PER_STEP * SAMPLES_PER_PROMPT
    g = torch.Generator().manual_seed(step)
    resp_len = torch.randint(4, RESPONSE_WIDTH + 1, (b,), generator=g)
    prompt_len = torch.randint(6, PROMPT_WIDTH + 1, (b,), generator=g)
    mask = (torch.arange(RESPONSE_WIDTH)[None, :] < resp_len[:, None]).float()
    scores = torch.zeros(b, RESPONSE_WIDTH)
    # verl puts the sequence score on the last response token.
    scores[torch.arange(b), resp_len - 1] = train_score(step)
    adv = torch.randn(b, RESPONSE_WIDTH, generator=g) * mask
    return DataProto.from_dict(
        tensors={
            "prompts": torch.zeros(b, PROMPT_WIDTH, dtype=torch.long),
            "responses": torch.zeros(b, RESPONSE_WIDTH, dtype=torch.long),
            "response_mask": mask.long(),
            "token_level_scores": scores,
            "token_level_rewards": scores,
            "advantages": adv,
            "returns": adv,
            "prompt_length": prompt_len.float(),
            "response_length": resp_len.float(),
        },
        meta_info={"global_token_num": (prompt_len + resp_len).tolist()},
    )


def _decoded_prompt(tokenizer, direction: str, src: str, template: str) -> str:
    src_lang, tgt_lang = direction.split("-")
    ids = tokenizer.apply_chat_template(build_prompt(template, src, src_lang, tgt_lang), add_generation_prompt=True,
                                        tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    return tokenizer.decode(ids, skip_special_tokens=True)


def _validate(step: int, tokenizer, val_dir: Path, template: str, with_src: bool, held_out: bool = False,
              metricx: bool = False) -> dict:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    inputs, outputs, gts, scores, data_sources = [], [], [], [], []
    extras: dict[str, list] = {"reward": []}
    for i, (direction, src, ref, response, extra) in enumerate(VAL_SAMPLES):
        score = val_score(step, i)
        inputs.append(_decoded_prompt(tokenizer, direction, src, template))
        outputs.append(response)
        gts.append(ref)
        scores.append(score)
        data_sources.append(f"{DATASET}/{direction}")
        extras["reward"].append(score)
        # What the reward function returned (verl copies every key of its dict).
        returned = {"score": score, **extra, "error_spans": json.dumps(extra["error_spans"], ensure_ascii=False)}
        returned["xcomet"] = extra["xcomet"] + 0.01 * step
        if with_src:
            returned["src"] = src
        if held_out:
            returned["comet"] = held_out_comet(step, i)
        if metricx:
            returned["metricx"] = held_out_metricx(step, i)
        for k, v in returned.items():
            extras.setdefault(k, []).append(v)
    uids = [f"uid{i}" for i in range(len(inputs))]
    PPOTrainer._write_generations(
        inputs=inputs, outputs=outputs, gts=gts, scores=scores,
        reward_extra_infos_dict=extras | {"uid": [f"{u}_0_0" for u in uids]},
        dump_path=str(val_dir), global_steps=step,
    )
    return PPOTrainer._val_metrics_update(None, data_sources, uids, extras, [1] * len(uids), expected_acc_counts={})


def build_run(run_dir: Path, tokenizer, template: str = "chat", with_src: bool = False,
              held_out: bool = False, metricx: bool = False) -> Path:
    """A 6-step run laid out as the launcher lays it out: `<run>/metrics.jsonl`,
    `<run>/snapshot/verl_config.yaml`, validation dumps beside the checkpoints (outside the run
    directory, named by the config). Initial validation at step 0, validation every 2 steps, a
    checkpoint at step 4. `held_out`: COMET-DA logged at validation; `metricx`: MetricX-24 too (a
    metricx24_* model in reward.validation_models: its weight 0 is in the verl config then)."""
    from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_throughout_metrics, compute_timing_metrics
    from verl.utils.tracking import FileLogger

    run_dir.mkdir(parents=True, exist_ok=True)
    val_dir = run_dir.parent / f"{run_dir.name}-checkpoints" / "val_generations"
    old = os.environ.get("VERL_FILE_LOGGER_PATH")
    os.environ["VERL_FILE_LOGGER_PATH"] = str(run_dir / "metrics.jsonl")
    try:
        logger = FileLogger(project_name="mt-grpo", experiment_name=run_dir.name)
    finally:
        if old is None:
            os.environ.pop("VERL_FILE_LOGGER_PATH")
        else:
            os.environ["VERL_FILE_LOGGER_PATH"] = old

    logger.log(data=_validate(0, tokenizer, val_dir, template, with_src, held_out, metricx), step=0)
    components = run_dir / "reward_components"
    components.mkdir(exist_ok=True)
    with open(components / "worker-1234.jsonl", "w") as side:
        for step in range(1, STEPS + 1):
            timing = stage_times(step)
            if step == 4:
                timing["save_checkpoint"] = 3.0
            timing["step"] = sum(timing.values()) + STEP_OVERHEAD
            metrics = {}
            if step % TEST_FREQ == 0:
                timing["testing"] = 4.0  # V1 times validation after the step timer closed
                metrics.update(_validate(step, tokenizer, val_dir, template, with_src, held_out, metricx))
            batch = _batch(step)
            metrics.update({"training/global_step": step, "training/epoch": 0})
            metrics.update(compute_data_metrics(batch=batch, use_critic=False))
            metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing))
            metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing, n_gpus=GPUS))
            metrics["actor/pg_loss"] = 0.01 * step
            logger.log(data=metrics, step=step)
            for i in range(PROMPTS_PER_STEP * SAMPLES_PER_PROMPT):
                side.write(json.dumps({"step": step, "split": "train", "xcomet": 0.5 + 0.02 * step,
                                       "format": 1.0 if i % 4 else 0.0, "score": train_score(step)}) + "\n")
    logger.finish()
    (run_dir / "snapshot").mkdir()
    (run_dir / "snapshot" / "verl_config.yaml").write_text(
        f"data:\n  train_batch_size: {PROMPTS_PER_STEP}\n  max_prompt_length: {PROMPT_WIDTH}\n"
        f"actor_rollout_ref:\n  rollout:\n    n: {SAMPLES_PER_PROMPT}\n"
        f"trainer:\n  n_gpus_per_node: {GPUS}\n  nnodes: 1\n  logger: [console, file]\n"
        f"  validation_data_dir: {val_dir}\n  rollout_data_dir: null\n"
        "reward:\n  custom_reward_function:\n    reward_kwargs:\n      train_weights:\n"
        + "".join(f"        {k}: {v}\n" for k, v in {**TRAIN_WEIGHTS, **({"metricx": 0.0} if metricx else {})}.items())
    )
    return run_dir

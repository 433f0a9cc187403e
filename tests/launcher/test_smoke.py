"""`python -m src.launch experiment=smoke`: the preset plans and verl validates it for 1 and 2 GPUs; a
real launch of the preset (real scorer service on the tiny CometKiwi in .venv-scorer, real reward function,
real report) with tests/launcher/smoke_stand_in.py in place of verl's trainer that writes no checkpoint
and runs no vLLM prints FAIL for those stages and exits non-zero, verdict still printed. PASS on every
stage, the resume included, is proven on the real loop: tests/loop/test_smoke_on_cpu.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from src import verl_config
from src.pipeline import smoke
from src.record.verl_metrics import read_metrics
from src.data.parquet_io import write_parquet_atomic
from src.data.rows import Example, make_row
from src.config import compose_config
from src.plan import build_plan
from tests.helpers.scorer_service import NETGUARD

REPO = Path(__file__).resolve().parents[2]
STAND_IN = REPO / "tests" / "launcher" / "smoke_stand_in.py"
STAGES = ["scorer", "training", "rollout", "reward", "update", "validation", "checkpoint", "resume", "report"]
PAIRS = [("今天天气很好。", "The weather is nice today."), ("我喜欢读书。", "I like reading books."),
         ("他在北京工作。", "He works in Beijing."), ("这家餐厅很有名。", "This restaurant is famous."),
         ("请把门关上。", "Please close the door."), ("火车晚点了。", "The train is late."),
         ("她会说三种语言。", "She speaks three languages."), ("我们明天见。", "See you tomorrow."),
         ("这本书很有意思。", "This book is interesting."), ("河边有很多树。", "There are many trees by the river.")]


@pytest.mark.parametrize("gpus", ["1", "2"])
def test_preset_composes_plans_and_verl_validates_it(gpus, tmp_path):
    composed = compose_config(["experiment=smoke", f"gpus={gpus}", f"paths.output_dir={tmp_path}"])
    assert composed["smoke"] is True and composed["model"]["name"] == "qwen2.5_0.5b"
    plan = build_plan(composed, run_dir=str(tmp_path / "run"))
    assert plan.world_size == int(gpus) and plan.batch.prompts_per_step == 4 and plan.adjustments == ()
    cfg = verl_config.build(plan, composed)  # raises when verl's validate_config says no
    assert (cfg.trainer.total_training_steps, cfg.trainer.save_freq, cfg.trainer.test_freq) == (2, 1, 1)
    assert (cfg.data.train_max_samples, cfg.data.val_max_samples) == (16, 8)
    # a fresh checkpoint dir per smoke run, so a second smoke run does not resume at the end
    assert plan.checkpoint_dir.startswith(f"{tmp_path}/smoke/")


def _launch(tmp: Path, tiny: Path, *stand_in_args: str) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp / "models" / "Qwen2.5-0.5B-Instruct").mkdir(parents=True)
    data = tmp / "data" / "wmt_zh_en"
    for split, pairs in (("train", PAIRS), ("val", PAIRS[:4])):
        rows = [make_row(Example(zh, en, "zh", "en"), dataset_name="wmt_zh_en", template="base", split=split,
                         index=i) for i, (zh, en) in enumerate(pairs)]
        write_parquet_atomic(rows, data / f"{split}.parquet")
    stand_in = " ".join([sys.executable, str(STAND_IN), *stand_in_args])
    out = tmp / "out"
    args = [sys.executable, "-m", "src.launch", "experiment=smoke", "scorer.placement=cpu",
            f"scorer.models.cometkiwi_da.path={tiny}/models/cometkiwi", "scorer.ready_timeout_s=120",
            f"debug.train_command_override='{stand_in}'", f"paths.output_dir={out}", f"paths.model_root={tmp}/models",
            f"paths.data_root={tmp}/data"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "QE_SCORER_"))}
    # one (pretend) GPU for preflight; SLURM_CPUS_PER_TASK is this task's CPU grant for Ray's 3G+10 check
    env.update(CUDA_VISIBLE_DEVICES="0", PYTHONPATH=str(NETGUARD), SLURM_CPUS_PER_TASK="16")
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    (run_dir,) = (out / "runs").iterdir()
    return proc, run_dir


def _verdict(output: str) -> dict[str, str]:
    lines = output[output.index("=== qe-rl smoke verdict"):].splitlines()
    return {l.split()[0]: l for l in lines[1:] if l.split() and l.split()[0] in STAGES + ["versions", "run"]}


def test_missing_checkpoint_fails_that_stage_and_exits_non_zero_with_the_verdict(tmp_path, tiny_comet_dir):
    proc, run_dir = _launch(tmp_path, tiny_comet_dir, "--no-checkpoint")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    verdict = _verdict(out)
    assert verdict["checkpoint"].split()[1] == "FAIL" and "global_step_1/actor" in verdict["checkpoint"]
    assert verdict["resume"].split()[1] == "FAIL" and "not attempted" in verdict["resume"]
    # no vLLM in the stand-in: its update reports a gradient but no vLLM/actor agreement after a sync
    assert verdict["update"].split()[1] == "FAIL" and smoke.SYNC_METRIC in verdict["update"]
    for stage in ("scorer", "training", "rollout", "reward", "validation", "report"):
        assert verdict[stage].split()[1] == "PASS", verdict[stage]
    # the reward the verdict shows is the real reward function's, scored by the real service
    (first,) = [p for p in (tmp_path / "out").rglob("metrics/*.jsonl") if not p.stem.endswith("-resume")]
    scores = {s: m["critic/score/mean"] for s, m in read_metrics(first).items()}
    assert f"step 1 {scores[1]:.4g}" in verdict["reward"]
    assert "scorer ready url=" in (run_dir / "scorer" / "node-0.log").read_text()
    assert (run_dir / "report" / "summary.md").is_file() and (run_dir / smoke.VERDICT_FILE).read_text() in out
    assert "error: smoke run failed at update, checkpoint, resume" in out
    # no relaunch was attempted
    assert len((run_dir / "stand_in.jsonl").read_text().splitlines()) == 1

from __future__ import annotations

import json
import os

import pytest

from src.report.run_files import RunDirError, load_run

from . import run_builder as rb


def test_reads_verl_file_logger_output(run_dir):
    run = load_run(run_dir)
    m = run.metrics
    assert list(m.index) == list(range(0, rb.STEPS + 1))
    # Step 0 is the initial validation only: no step timing there.
    assert m.loc[0, "val-core/wmt_zh_en/zh-en/reward/mean@1"] == pytest.approx(0.25)
    assert m["timing_s/step"].isna().loc[0]
    assert m.loc[3, "timing_s/gen"] == rb.stage_times(3)["gen"]
    assert m.loc[4, "timing_s/save_checkpoint"] == 3.0
    assert m.loc[2, "timing_s/testing"] == 4.0
    # Validation dumps live where the config's trainer.validation_data_dir says (beside checkpoints).
    assert run.val_dir.name == "val_generations" and run.val_dir.parent != run_dir
    assert sorted(run.val_samples) == [0, 2, 4, 6]
    assert len(run.val_samples[2]) == len(rb.VAL_SAMPLES)
    assert run.shape.prompts_per_step == rb.PROMPTS_PER_STEP and run.shape.gpus == rb.GPUS


def test_resumed_run_merges_metric_files_later_wins(run_dir):
    # A relaunch into the same run dir would truncate metrics.jsonl (verl opens it "wb"), so the
    # launcher may give each launch its own file under metrics/.
    first = run_dir / "metrics.jsonl"
    (run_dir / "metrics").mkdir()
    later = run_dir / "metrics" / "20260102-000000.jsonl"
    with later.open("w") as f:
        for step in (6, 7):
            f.write(json.dumps({"step": step, "data": {"critic/score/mean": 9.0 + step, "timing_s/step": 1.0}}) + "\n")
        f.write('{"step": 8, "data": {"critic/sco')  # killed mid-write
    st = first.stat()
    os.utime(later, (st.st_atime + 60, st.st_mtime + 60))
    m = load_run(run_dir).metrics
    assert m.loc[6, "critic/score/mean"] == 15.0
    assert m.loc[7, "critic/score/mean"] == 16.0
    assert m.loc[5, "critic/score/mean"] == pytest.approx(rb.train_score(5))
    assert 8 not in m.index
    # Keys the later file did not log for step 6 stay from the first file.
    assert m.loc[6, "timing_s/gen"] == rb.stage_times(6)["gen"]


def test_val_generations_in_the_run_dir_win(run_dir):
    local = run_dir / "val_generations"
    local.mkdir()
    (local / "9.jsonl").write_text('{"input": "p", "output": "o", "gts": "g", "score": 1.0, "step": 9}\n')
    assert sorted(load_run(run_dir).val_samples) == [9]


def test_missing_run_dir_and_missing_metrics(tmp_path):
    with pytest.raises(RunDirError, match="run directory not found"):
        load_run(tmp_path / "nope")
    (tmp_path / "run").mkdir()
    with pytest.raises(RunDirError, match="trainer.logger must include 'file'"):
        load_run(tmp_path / "run")


def _lines(path, steps, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": value + s}}) + "\n" for s in steps))


def test_attempts_in_the_checkpoint_dir_read_as_one_series(tmp_path):
    # what the launcher leaves: each launch (first run, requeue, --from-snapshot --resume) its own
    # run dir, and its own metrics file in the checkpoint dir all attempts share
    ckpt = tmp_path / "results" / "m" / "comet_off" / "grpo" / "gpus4" / "seed1-0123abcd"
    first, second = ckpt / "metrics" / "20261123-000000-run_a.jsonl", ckpt / "metrics" / "20261123-010000-run_b.jsonl"
    _lines(first, [1, 2, 3, 4], 0.0)  # killed after step 4, last checkpoint at step 2
    _lines(second, [3, 4, 5], 100.0)  # resumed from step 2: steps 3 and 4 again
    os.utime(first, (1_000, 1_000))
    os.utime(second, (2_000, 2_000))
    run_b = tmp_path / "outputs" / "runs" / "run_b"
    (run_b / "snapshot").mkdir(parents=True)
    (run_b / "snapshot" / "verl_config.yaml").write_text(f"trainer:\n  default_local_dir: {ckpt}\n")
    run = load_run(run_b)
    assert list(run.metrics.index) == [1, 2, 3, 4, 5]  # no duplicate steps
    assert list(run.metrics["critic/score/mean"]) == [1.0, 2.0, 103.0, 104.0, 105.0]  # the later attempt wins
    assert run.metric_files == [first, second]
    assert list(load_run(ckpt).metrics.index) == [1, 2, 3, 4, 5]  # the checkpoint dir alone reads the same

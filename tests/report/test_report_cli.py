from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

from src.report.cli import main

from . import run_builder as rb

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = ["rewards.png", "step_time.png", "throughput.png", "gpu_wait.png", "held_out.png", "val_samples.html",
           "summary.md"]


def test_report_writes_all_outputs_with_the_key_numbers(run_dir, capsys):
    assert main([str(run_dir)]) == 0
    out = run_dir / "report"
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)
    for name in OUTPUTS[:4]:
        with Image.open(out / name) as img:
            assert img.format == "PNG" and img.width > 500 and img.height > 300
    summary = (out / "summary.md").read_text()
    mean_step = sum(sum(rb.stage_times(s).values()) + rb.STEP_OVERHEAD for s in range(1, rb.STEPS + 1)) / rb.STEPS
    mean_step += 3.0 / rb.STEPS  # the checkpoint at step 4
    assert f"Mean step time: {mean_step:.1f} s." in summary
    assert "| reward | train | 0.1000 | 0.6000 | 0.6000 (step 6) | 6 |" in summary
    assert "| reward | val zh-en |" in summary and "| xcomet | train |" in summary
    assert f"{rb.GPUS} GPUs; tokens per GPU = (response_length/mean + prompt_length/mean) x 4 prompts x 2" in summary
    assert "Validation (not in the step time): 4.0 s on average, 3 times." in summary
    assert "Mean step time" in capsys.readouterr().out


def test_flags_override_the_config(run_dir, tmp_path):
    out = tmp_path / "elsewhere"
    assert main([str(run_dir), "--out", str(out), "--gpus", "4", "--max-samples-per-step", "1"]) == 0
    assert "4 GPUs; tokens per GPU" in (out / "summary.md").read_text()
    assert "(1 samples" in (out / "val_samples.html").read_text()
    assert not (run_dir / "report").exists()


def test_bad_run_dir_is_one_line_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("report: error: run directory not found")


def test_module_entry_point(run_dir):
    proc = subprocess.run([sys.executable, "-m", "src.report", str(run_dir)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "report" / "val_samples.html").is_file()


def test_a_missing_validation_dir_is_named_not_called_unset(run_dir):
    """Issue 33 (finding 12): val_samples.html said "trainer.validation_data_dir was not set" when it was
    set and the dir was just missing."""
    config = run_dir / "snapshot" / "verl_config.yaml"
    missing = run_dir.parent / "moved-away" / "val_generations"
    text = config.read_text()
    config.write_text("\n".join(f"  validation_data_dir: {missing}" if line.startswith("  validation_data_dir:")
                                else line for line in text.splitlines()) + "\n")
    assert main([str(run_dir)]) == 0
    page = (run_dir / "report" / "val_samples.html").read_text()
    assert "was not set" not in page
    assert f"trainer.validation_data_dir is {missing}, which does not exist" in page

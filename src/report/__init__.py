"""Plots and pages from a finished (or running) verl run: `python -m src.report outputs/<run>`.

Reads what verl writes into the run directory (see run_files.py for the exact files and the verl
settings that produce them) and writes into `<run>/report/`:

    rewards.png        reward and each reward component over steps, train and validation
    step_time.png      step time split by stage (stacked)
    throughput.png     tokens/GPU/s end-to-end, actor update, rollout (MindSpeed-RL definitions)
    gpu_wait.png       share of each step the GPUs wait on non-GPU work
    val_samples.html   validation samples per step with xCOMET error spans, sortable
    summary.md         the key numbers
"""

from .cli import build_report, main

__all__ = ["build_report", "main"]

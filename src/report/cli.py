"""`python -m src.report RUN_DIR [--out DIR] [--verl-config FILE] [--gpus N ...]`.

Reads what verl writes into the run directory (see run_files.py for the exact files and the verl
settings that produce them) and writes into `<run>/report/`:

    rewards.png        reward and each reward component over steps, train and validation
    step_time.png      step time split by stage (stacked)
    throughput.png     tokens/GPU/s end-to-end, actor update, rollout (MindSpeed-RL definitions)
    gpu_wait.png       share of each step the GPUs wait on non-GPU work
    val_samples.html   validation samples per step with xCOMET error spans, sortable
    summary.md         the key numbers
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from . import plots
from .run_files import RunDirError, load_run
from .samples_page import render_samples_page
from .series import gpu_wait_share, reward_panels, step_time_breakdown, throughput
from .summary import render_summary

EXIT_BAD_INPUT = 2


@dataclass
class ReportFiles:
    out_dir: Path
    files: dict[str, Path]


def build_report(
    run_dir: Path,
    out_dir: Path | None = None,
    verl_config: Path | None = None,
    gpus: int | None = None,
    prompts_per_step: int | None = None,
    samples_per_prompt: int | None = None,
    max_samples_per_step: int | None = None,
) -> ReportFiles:
    run = load_run(run_dir, verl_config)
    # Explicit flags beat what the config says (e.g. a config that was changed after the run).
    overrides = {k: v for k, v in {"gpus": gpus, "prompts_per_step": prompts_per_step,
                                   "samples_per_prompt": samples_per_prompt}.items() if v}
    shape = replace(run.shape, **overrides)

    out = out_dir or run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    panels = reward_panels(run)
    breakdown = step_time_breakdown(run.metrics)
    wait = gpu_wait_share(run.metrics)
    tp = throughput(run.metrics, shape)

    files = {
        "rewards": plots.save(plots.plot_rewards(panels), out / "rewards.png"),
        "step_time": plots.save(plots.plot_step_time(breakdown), out / "step_time.png"),
        "throughput": plots.save(plots.plot_throughput(tp), out / "throughput.png"),
        "gpu_wait": plots.save(plots.plot_gpu_wait(wait), out / "gpu_wait.png"),
    }
    page = out / "val_samples.html"
    page.write_text(
        render_samples_page(run.val_samples, f"Validation samples: {run_dir.name}", max_samples_per_step),
        encoding="utf-8",
    )
    files["val_samples"] = page
    summary = out / "summary.md"
    names = [p.name for p in files.values()]
    summary.write_text(
        render_summary(run_dir.name, run.metrics, panels, breakdown, wait, tp, names + [summary.name]),
        encoding="utf-8",
    )
    files["summary"] = summary
    return ReportFiles(out, files)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m src.report", description="Plots and pages from a verl run directory.")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path, help="output directory (default: RUN_DIR/report)")
    p.add_argument("--verl-config", type=Path,
                   help="the run's resolved verl config (default: RUN_DIR/snapshot/verl_config.yaml)")
    p.add_argument("--gpus", type=int, help="world size (default: from the config, else inferred from perf/throughput)")
    p.add_argument("--prompts-per-step", type=int, help="data.train_batch_size")
    p.add_argument("--samples-per-prompt", type=int, help="actor_rollout_ref.rollout.n")
    p.add_argument("--max-samples-per-step", type=int, help="cap the validation samples shown per step")
    args = p.parse_args(argv)
    try:
        report = build_report(args.run_dir, args.out, args.verl_config, args.gpus, args.prompts_per_step,
                              args.samples_per_prompt, args.max_samples_per_step)
    except RunDirError as e:
        sys.stderr.write(f"report: error: {e}\n")
        return EXIT_BAD_INPUT
    print(report.files["summary"].read_text(encoding="utf-8"))
    print(f"report written to {report.out_dir}")
    return 0

"""`python -m src.report RUN_DIR [--out DIR] [--verl-config FILE] [--gpus N ...]`, or a comparison:
`python -m src.report SWEEP_DIR [--out DIR]`, `python -m src.report RUN_DIR RUN_DIR ... [--out DIR]`
(compare_report.py).

Reads what verl writes into the run directory (see run_files.py for the exact files and the verl
settings that produce them) and writes into `<run>/report/`:

    rewards.png        reward and each reward component over steps, train and validation
    step_time.png      step time split by stage (stacked)
    throughput.png     tokens/GPU/s end-to-end, actor update, rollout (MindSpeed-RL definitions)
    gpu_wait.png       share of each step the GPUs wait on non-GPU work
    held_out.png       trained vs held-out validation metrics per direction, and their change since step 0
    val_samples.html   validation samples per step with xCOMET error spans, sortable
    summary.md         the key numbers

Bad input (no run dir, no metrics, a --verl-config that is not YAML, a non-positive number, an --out
that is a file, holds files a report did not write, or cannot be written) is one line
`report: error: ...`, exit 2, before anything is read or written. The files are written into a temp
dir beside the output dir and moved in only when all are complete (a full disk: one line, exit 1,
the previous report as it was); only a previous report's files are ever replaced.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from src.data.safe_write import dir_mode, file_mode, new_dir_beside, os_reason

from . import plots
from .compare_report import CompareWriteError, build_comparison, is_sweep_dir
from .run_files import RunDirError, load_run, refuse_out_dir, no_val_samples_reason
from .samples_page import render_samples_page
from .series import gpu_wait_share, held_out_panels, reward_panels, step_time_breakdown, throughput
from .summary import render_summary

EXIT_BAD_INPUT, EXIT_WRITE_FAILED = 2, 1
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as the shell reports it
# what a report writes; an existing --out holding anything else is not ours to write into
REPORT_FILES = ("rewards.png", "step_time.png", "throughput.png", "gpu_wait.png", "held_out.png", "val_samples.html",
                "summary.md")
SUMMARY_HEADER = "# Run report: "  # summary.render_summary's first line


class ReportWriteError(Exception):
    """Writing the checked output failed (disk full); the output dir is as it was."""


@dataclass
class ReportFiles:
    out_dir: Path
    files: dict[str, Path]


def check_out_dir(out: Path) -> None:
    """`out` is missing, empty, or a previous report (only report files, its summary.md ours), and
    writable: RunDirError (one line) otherwise, before any work."""
    if out.exists() and not out.is_dir():
        raise RunDirError(f"--out {out} is a file, not a directory; give a directory for the report's files")
    foreign: list[str] = []
    if out.is_dir():
        entries = sorted(p.name for p in out.iterdir())
        foreign = [n for n in entries if n not in REPORT_FILES]
        summary = out / "summary.md"
        if not foreign and summary.is_file():
            with summary.open(encoding="utf-8", errors="replace") as f:
                if not f.readline().startswith(SUMMARY_HEADER):
                    foreign = ["summary.md"]
    refuse_out_dir(out, foreign, "report")


def build_report(
    run_dir: Path,
    out_dir: Path | None = None,
    verl_config: Path | None = None,
    gpus: int | None = None,
    prompts_per_step: int | None = None,
    samples_per_prompt: int | None = None,
    max_samples_per_step: int | None = None,
) -> ReportFiles:
    """Raises RunDirError (bad input, nothing written) or ReportWriteError (`out` as it was)."""
    out = out_dir or run_dir / "report"
    for name, value in (("gpus", gpus), ("prompts_per_step", prompts_per_step),
                        ("samples_per_prompt", samples_per_prompt), ("max_samples_per_step", max_samples_per_step)):
        if value is not None and value < 1:
            raise RunDirError(f"{name} must be a positive integer, got {value}")
    if not run_dir.is_dir():
        raise RunDirError(f"run directory not found: {run_dir}")
    check_out_dir(out)
    run = load_run(run_dir, verl_config)
    # Explicit flags beat what the config says (e.g. a config that was changed after the run).
    overrides = {k: v for k, v in {"gpus": gpus, "prompts_per_step": prompts_per_step,
                                   "samples_per_prompt": samples_per_prompt}.items() if v is not None}
    shape = replace(run.shape, **overrides)

    panels = reward_panels(run)
    breakdown = step_time_breakdown(run.metrics)
    wait = gpu_wait_share(run.metrics)
    tp = throughput(run.metrics, shape)
    held = held_out_panels(run)

    try:
        with new_dir_beside(out) as tmp:
            files = {
                "rewards": plots.save(plots.plot_rewards(panels), tmp / "rewards.png"),
                "step_time": plots.save(plots.plot_step_time(breakdown), tmp / "step_time.png"),
                "throughput": plots.save(plots.plot_throughput(tp), tmp / "throughput.png"),
                "gpu_wait": plots.save(plots.plot_gpu_wait(wait), tmp / "gpu_wait.png"),
                "held_out": plots.save(plots.plot_held_out(held), tmp / "held_out.png"),
            }
            page = tmp / "val_samples.html"
            page.write_text(
                render_samples_page(run.val_samples, f"Validation samples: {run_dir.name}", max_samples_per_step,
                                    empty_reason=no_val_samples_reason(run)),
                encoding="utf-8",
            )
            files["val_samples"] = page
            summary = tmp / "summary.md"
            names = [p.name for p in files.values()]
            summary.write_text(
                render_summary(run_dir.name, run.metrics, panels, breakdown, wait, tp, names + [summary.name], held),
                encoding="utf-8",
            )
            files["summary"] = summary
            # every file is complete before any is moved: a failure above leaves `out` as it was
            out.mkdir(mode=dir_mode(), parents=True, exist_ok=True)
            for key, path in files.items():
                os.chmod(path, file_mode())
                os.replace(path, out / path.name)
                files[key] = out / path.name
    except OSError as e:
        raise ReportWriteError(f"cannot write the report to {out}: {os_reason(e)}; nothing was replaced") from None
    return ReportFiles(out, files)


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage + error on two lines; the contract is one clear line, exit 2."""

    def error(self, message):
        sys.stderr.write(f"report: error: {message}\n")
        sys.exit(EXIT_BAD_INPUT)


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {number}")
    return number


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # one line, no traceback (issue 33)
        print("report: stopped (interrupt): the report dir is written whole or not at all", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: list[str] | None) -> int:
    p = _OneLineParser(prog="python -m src.report",
                       description="Plots and pages from a verl run directory; given a sweep dir or several run "
                                   "dirs, one comparison across their runs.")
    p.add_argument("run_dir", type=Path, nargs="+", metavar="DIR",
                   help="a run dir (outputs/runs/<run>); or a sweep dir (outputs/multirun/<date>), or several run "
                        "dirs, to compare")
    p.add_argument("--out", type=Path, help="output directory (default: RUN_DIR/report; a comparison: "
                                            "SWEEP_DIR/compare); new, empty, or a previous report")
    p.add_argument("--verl-config", type=Path,
                   help="the run's resolved verl config (default: RUN_DIR/snapshot/verl_config.yaml)")
    p.add_argument("--gpus", type=_positive,
                   help="world size (default: from the config, else inferred from perf/throughput)")
    p.add_argument("--prompts-per-step", type=_positive, help="data.train_batch_size")
    p.add_argument("--samples-per-prompt", type=_positive, help="actor_rollout_ref.rollout.n")
    p.add_argument("--max-samples-per-step", type=_positive, help="cap the validation samples shown per step")
    args = p.parse_args(argv)
    if len(args.run_dir) > 1 or is_sweep_dir(args.run_dir[0]):
        return _compare(args)
    report, code = _one_line_errors(lambda: build_report(
        args.run_dir[0], args.out, args.verl_config, args.gpus, args.prompts_per_step, args.samples_per_prompt,
        args.max_samples_per_step), ReportWriteError)
    if report is None:
        return code
    print(report.files["summary"].read_text(encoding="utf-8"))
    print(f"report written to {report.out_dir}")
    return 0


def _one_line_errors(build, write_error: type[Exception]):
    """(what build() returns, 0), or (None, the exit code) after one error line: bad input (a run dir that
    is not one, an --out that holds other files) exits 2, a write that failed midway exits 1."""
    try:
        return build(), 0
    except (RunDirError, write_error) as e:
        sys.stderr.write(f"report: error: {' '.join(str(e).splitlines())}\n")
        return None, EXIT_BAD_INPUT if isinstance(e, RunDirError) else EXIT_WRITE_FAILED


def _compare(args: argparse.Namespace) -> int:
    one_run = [f"--{k.replace('_', '-')}" for k in ("verl_config", "gpus", "prompts_per_step", "samples_per_prompt",
                                                    "max_samples_per_step") if getattr(args, k) is not None]
    if one_run:
        sys.stderr.write(f"report: error: {', '.join(one_run)} applies to one run's report, not to a comparison "
                         f"of several runs; leave it out, or report one run dir\n")
        return EXIT_BAD_INPUT
    comparison, code = _one_line_errors(lambda: build_comparison(args.run_dir, args.out), CompareWriteError)
    if comparison is None:
        return code
    print(comparison.files["compare.md"].read_text(encoding="utf-8"))
    print(f"comparison written to {comparison.out_dir}")
    return 0

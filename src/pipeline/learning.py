"""The verdict of `python -m src.launch experiment=learn_tiny`: did the policy learn?

After training the launcher reads verl's own metrics file (the file logger's rows, as the smoke verdict
does) and compares:
- trained: the trained reward (`critic/score/mean`, verl/trainer/ppo/metric_utils.py compute_data_metrics)
  averaged over the last `learn.window` steps against the first `learn.window`;
- held out: the validation metric `learn.val_metric` on the held-out sentences
  (`val-aux/<data source>/<metric>/mean@N`, verl/trainer/ppo/metric_utils.py process_validation_metrics)
  at the last validation against the one before training.
It passes when both rise by at least `learn.min_rise` / `learn.min_val_rise`: margins set above the spread
of the rise across seeds (benches/learn.py, benches/RESULTS.md "The loop learns"). The same run with the
advantage's sign flipped (tests/loop/flipped_estimator.py) must fail it: the check can fail.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from src.record.verl_metrics import read_metrics, val_value

from .errors import RunError

TRAINED_METRIC = "critic/score/mean"
VERDICT_FILE = "learn_verdict.txt"


@dataclass(frozen=True)
class Rise:
    name: str
    metric: str
    before: float
    after: float
    needed: float
    where: str  # which steps were compared

    @property
    def rise(self) -> float:
        return self.after - self.before

    @property
    def ok(self) -> bool:
        return math.isfinite(self.rise) and self.rise >= self.needed


def requested(composed: dict) -> bool:
    return bool((composed.get("learn") or {}).get("enable"))


def refusal(composed: dict) -> str | None:
    """A learn_tiny config whose verdict could not be read: one line, or None."""
    if not requested(composed):
        return None
    learn, trainer = composed["learn"], composed["trainer"]
    steps, window = trainer["total_training_steps"], learn["window"]
    if window < 1 or not steps or 2 * window > steps:
        return (f"learn.window={window} needs 2 x window <= trainer.total_training_steps ({steps}): the verdict "
                f"compares the first and last window of steps; lower learn.window or raise the steps")
    if not trainer["val_before_train"] or not trainer["test_freq"] or trainer["test_freq"] > steps:
        return ("experiment=learn_tiny compares validation before training with a later one: keep "
                "trainer.val_before_train=true and trainer.test_freq between 1 and trainer.total_training_steps")
    return None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def trained_rise(metrics: dict[int, dict], window: int, needed: float) -> Rise:
    steps = sorted(s for s, row in metrics.items() if isinstance(row.get(TRAINED_METRIC), (int, float)))
    first, last = steps[:window], steps[-window:]
    if len(steps) < 2 * window:
        first = last = []
    return Rise("trained", TRAINED_METRIC, _mean([metrics[s][TRAINED_METRIC] for s in first]),
                _mean([metrics[s][TRAINED_METRIC] for s in last]), needed,
                f"steps {first[0]}-{first[-1]} vs {last[0]}-{last[-1]}" if first else
                f"{len(steps)} steps logged, {2 * window} needed")


def val_rise(metrics: dict[int, dict], metric: str, needed: float) -> Rise:
    """`val_value` at the first validation against the last."""
    steps = sorted(s for s, row in metrics.items() if val_value(row, metric) is not None)
    name = f"val-aux/*/{metric}/mean@N"
    if len(steps) < 2:
        return Rise("held-out", name, math.nan, math.nan, needed, f"{len(steps)} validations logged, 2 needed")
    return Rise("held-out", name, val_value(metrics[steps[0]], metric), val_value(metrics[steps[-1]], metric),
                needed, f"step {steps[0]} vs step {steps[-1]}")


def render(rises: list[Rise], metrics: dict[int, dict], run_dir: Path) -> str:
    failed = [r.name for r in rises if not r.ok]
    lines = [f"=== qe-rl learn verdict: {'PASS' if not failed else 'FAIL (' + ', '.join(failed) + ')'} ==="]
    for r in rises:
        lines.append(f"{r.name:<9} {'PASS' if r.ok else 'FAIL'}  {r.metric}: {r.where}: {r.before:.4g} -> "
                     f"{r.after:.4g}, rise {r.rise:+.4g} (needs >= {r.needed:g})")
    curve = [f"{metrics[s][TRAINED_METRIC]:.2f}" for s in sorted(metrics) if TRAINED_METRIC in metrics[s]]
    lines += [f"{'curve':<9} {TRAINED_METRIC} by step: {' '.join(curve)}", f"{'run dir':<9} {run_dir}",
              f"{'report':<9} python -m src.report {run_dir}"]
    return "\n".join(lines) + "\n"


def check(composed: dict, run_dir: Path, metrics_path: Path) -> None:
    """Print and save the verdict; RunError (exit 1) when the policy did not learn."""
    learn = composed["learn"]
    metrics = read_metrics(metrics_path)
    rises = [trained_rise(metrics, learn["window"], learn["min_rise"]),
             val_rise(metrics, learn["val_metric"], learn["min_val_rise"])]
    text = render(rises, metrics, run_dir)
    print(text, end="", flush=True)
    (run_dir / VERDICT_FILE).write_text(text, encoding="utf-8")
    failed = [r.name for r in rises if not r.ok]
    if failed:
        raise RunError(f"the policy did not learn ({', '.join(failed)} reward did not rise enough); verdict above "
                       f"and in {run_dir / VERDICT_FILE}")

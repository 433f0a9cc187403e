"""run=: the checkpoints of training runs, each evaluated as `checkpoint=` is, found before anything generates.

A spec is a run dir (what `python -m src.launch` wrote: its snapshot's plan.json names the checkpoint dir), a sweep
dir (what `--multirun` wrote: every run dir in it), or a checkpoint dir itself (verl's `global_step_N/` dirs beside
`latest_checkpointed_iteration.txt`). `steps=` picks each run's checkpoints:
- all: every saved step (a `global_step_N/` with an `actor/`, none past the step verl's tracker names: a later one
  may be a save cut short);
- last: the highest saved;
- best: the saved step whose validation reward was highest: `val-aux/<source>/score/mean@N` in the run's metrics
  file (verl's file logger, `<checkpoint dir>/metrics/*.jsonl`), averaged over data sources; a run that validated
  at none of its saved steps is refused;
- N[,N...]: those steps, each of which every run must have saved.
A run dir's reward (its snapshot's verl config) says which metrics the run trained on: its columns are marked
*trained* or *held out* unless trained_on= says otherwise. Runs that differ only in their seed are one configuration
(src/record/run_params.py, as the sweep's comparison groups them), whose seeds the results average.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from src.record import snapshot, yaml_files
from src.record.reward_weights import train_weights_of
from src.record.run_params import describe
from src.record.verl_metrics import read_metrics, val_value
from src.rewards.components import trained_metrics

from .checkpoint import LATEST_FILE
from .errors import UsageError

STEP_DIR = "global_step_"
METRICS_DIR = "metrics"
# the validation metric `steps=best` ranks by: the reward's own score (src/rewards: `score` in verl's val-aux)
BEST_BY = "score"


@dataclass(frozen=True)
class RunCheckpoint:
    run: str       # the run's name: its dir's name (with its parent's where two runs share one)
    step: int
    path: Path     # its global_step_N dir
    # the metrics its run's reward trained on (its snapshot's verl config); None: not known (a checkpoint dir)
    trained_on: tuple[str, ...] | None = None
    # its configuration: the parameters that differ between the evaluated runs, seed aside (run_params.describe)
    configuration: str = ""


def _trained_on(run_dir: Path) -> tuple[str, ...] | None:
    """What a run dir's training reward weighted, as evaluation metrics (src/rewards/components.py)."""
    path = run_dir / snapshot.SNAPSHOT / snapshot.VERL_CONFIG
    try:
        weights = train_weights_of(yaml_files.load(path.read_text(encoding="utf-8")) or {})
    except (OSError, ValueError, AttributeError):
        return None
    return tuple(trained_metrics(weights)) if weights is not None else None


def _saved_steps(ckpt_dir: Path) -> list[int]:
    """The steps saved whole: a global_step_N/ with an actor/, none past the step verl's tracker names (verl writes
    the tracker once a save is complete: a later step's dir may be a save cut short)."""
    tracked = _tracked(ckpt_dir)
    steps = []
    for d in ckpt_dir.glob(f"{STEP_DIR}*"):
        number = d.name[len(STEP_DIR):]
        if number.isdigit() and (d / "actor").is_dir() and (tracked is None or int(number) <= tracked):
            steps.append(int(number))
    return sorted(steps)


def _checkpoint_dir(run_dir: Path) -> Path | None:
    """A run dir's checkpoint dir, from its snapshot's plan; None when `run_dir` has no snapshot."""
    plan = run_dir / snapshot.SNAPSHOT / snapshot.PLAN
    if not plan.is_file():
        return None
    try:
        return Path(json.loads(plan.read_text(encoding="utf-8"))["checkpoint_dir"])
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"run: {plan} has no checkpoint_dir: not a plan of python -m src.launch") from None


def _runs(spec: str) -> list[tuple[Path, Path]]:
    """(the dir that names the run, its checkpoint dir) for each run of one spec."""
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise UsageError(f"run: no such directory: {path} (give a run dir, a sweep dir or a checkpoint dir)")
    if _saved_steps(path) or (path / LATEST_FILE).is_file():
        return [(path, path)]
    own = _checkpoint_dir(path)
    if own is not None:
        return [(path, own)]
    found = [(d, c) for d in sorted(p for p in path.iterdir() if p.is_dir()) if (c := _checkpoint_dir(d)) is not None]
    if not found:
        raise UsageError(f"run: {path} is neither a run dir (snapshot/plan.json), a sweep dir holding run dirs, nor "
                         f"a checkpoint dir (global_step_N/)")
    return found


def _tracked(ckpt_dir: Path) -> int | None:
    try:
        return int((ckpt_dir / LATEST_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _best(ckpt_dir: Path, saved: list[int], where: str) -> int:
    metrics: dict[int, dict] = {}
    for path in sorted((ckpt_dir / METRICS_DIR).glob("*.jsonl")):  # one file per launch: a resume adds one
        for step, row in read_metrics(path).items():
            metrics.setdefault(step, {}).update(row)
    scored = {s: v for s in saved if (v := val_value(metrics.get(s, {}), BEST_BY)) is not None}
    if not scored:
        raise UsageError(f"run: steps=best ranks saved steps by their validation reward (val-aux/*/{BEST_BY}/mean@N "
                         f"in {ckpt_dir / METRICS_DIR}), and {where} validated at none of its saved steps "
                         f"{saved}; name the steps (steps=N,M) or use steps=last")
    return max(scored, key=lambda s: (scored[s], s))


def pick(ckpt_dir: Path, steps: str, where: str) -> list[int]:
    """The steps `steps` picks of one run's saved ones; UsageError naming `where` when it cannot."""
    saved = _saved_steps(ckpt_dir)
    if not saved:
        raise UsageError(f"run: {where} has no saved checkpoint (no {STEP_DIR}N/actor in {ckpt_dir})")
    if steps == "all":
        return saved
    if steps == "last":
        return [saved[-1]]
    if steps == "best":
        return [_best(ckpt_dir, saved, where)]
    wanted = sorted({int(s) for s in steps.split(",")})
    missing = [s for s in wanted if s not in saved]
    if missing:
        raise UsageError(f"run: {where} saved no step {missing[0]} (it saved {saved})")
    return wanted


def home(specs: list[str]) -> Path | None:
    """The one run or sweep dir `specs` name, whose `eval/` holds their evaluation by default (where
    `python -m src.report` finds it: src/report/evaluations.py); None for a checkpoint dir or several specs."""
    if len(specs) != 1:
        return None
    path = Path(specs[0]).expanduser()
    runs = _runs(specs[0])
    return None if runs == [(path, path)] else path


def find(specs: list[str], steps: str) -> list[RunCheckpoint]:
    """Every checkpoint `steps` picks of every run the specs name, in the order given, steps ascending."""
    runs = [run for spec in specs for run in _runs(spec)]
    names = [d.name for d, _ in runs]
    configurations = {e.run_dir: e.configuration for e in describe([d for d, _ in runs], {})}
    found = []
    for named_by, ckpt_dir in runs:
        name = named_by.name if names.count(named_by.name) == 1 else f"{named_by.parent.name}/{named_by.name}"
        trained = _trained_on(named_by) if named_by != ckpt_dir else None
        found += [RunCheckpoint(name, s, ckpt_dir / f"{STEP_DIR}{s}", trained, configurations[named_by])
                  for s in pick(ckpt_dir, steps, str(named_by))]
    seen = [(c.run, c.step) for c in found]
    if len(set(seen)) != len(seen):
        raise UsageError(f"run: {', '.join(specs)} name one run twice; give each run once")
    return found

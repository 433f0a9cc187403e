"""What a run logged: verl's file logger rows (`<checkpoint dir>/metrics/*.jsonl`, one `{"step": N, "data": {...}}`
a line, verl/utils/tracking.py FileLogger), read back per step, and the validation metrics in them. The smoke's and
the learning run's verdicts (src/pipeline) and the evaluation's `steps=best` (src/evaluate) read them here."""
from __future__ import annotations

import json
import re
from pathlib import Path


def read_metrics(path: Path) -> dict[int, dict]:
    """verl's file logger rows ({"step": N, "data": {...}}) merged per step."""
    steps: dict[int, dict] = {}
    if not path.is_file():
        return steps
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            steps.setdefault(row["step"], {}).update(row.get("data") or {})
    return steps


def val_value(row: dict, metric: str) -> float | None:
    """The mean over data sources of val-aux/<source>/<metric>/mean@N in one step's row, N the samples per
    validation prompt (verl/trainer/ppo/metric_utils.py process_validation_metrics also logs mean@n for n
    below N, over subsets: the largest N is the mean over all samples). None: not logged at that step."""
    pattern = re.compile(rf"^val-aux/(.+)/{re.escape(metric)}/mean@(\d+)$")
    per_source: dict[str, tuple[int, float]] = {}
    for key, v in row.items():
        m = pattern.match(key)
        if m and isinstance(v, (int, float)) and int(m.group(2)) > per_source.get(m.group(1), (0, 0.0))[0]:
            per_source[m.group(1)] = (int(m.group(2)), v)
    values = [v for _, v in per_source.values()]
    return sum(values) / len(values) if values else None

"""The evaluations of a sweep's or a run's checkpoints beside its training curves: what `python -m src.evaluate
run=<dir>` wrote into `<dir>/eval/<name>/` (its default place, src/evaluate/run_results.py), each one's results
table shown in the comparison's pages and its own page linked; where it evaluated two seeds or more of one
configuration at a step, each metric's mean and standard deviation over them."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from src.evaluate import run_results
from src.evaluate.run_results import EVAL_DIR, RESULTS_HTML, RESULTS_JSON, RESULTS_MD


@dataclass(frozen=True)
class Evaluation:
    dir: Path
    table: str       # its results.md
    results: dict    # its results.json


def find_evaluations(paths: list[Path]) -> list[Evaluation]:
    """The complete evaluations (results.md, .html and .json all there, the json readable) under each path's
    eval/, oldest first (their names begin with the time)."""
    found = []
    for path in paths:
        for folder in sorted(p for p in (path / EVAL_DIR).glob("*") if p.is_dir()):
            if not all((folder / name).is_file() for name in (RESULTS_MD, RESULTS_HTML, RESULTS_JSON)):
                continue
            try:
                results = json.loads((folder / RESULTS_JSON).read_text(encoding="utf-8"))
                table = (folder / RESULTS_MD).read_text(encoding="utf-8")
            except (OSError, ValueError):
                continue  # one being written by hand or cut short: not shown, the rest is
            found.append(Evaluation(folder, table, results))
    return found


def page_link(evaluation: Evaluation, page_dir: Path) -> str:
    """Its results page relative to the page that links it."""
    return os.path.relpath(evaluation.dir / RESULTS_HTML, page_dir)


def over_seeds(evaluation: Evaluation, label_of_run: dict[str, str]) -> list[dict]:
    """Per configuration (`label_of_run`: a run dir's name -> its configuration's label), step and direction that
    the evaluation has two seeds or more of: each metric's mean and sample standard deviation over them
    (src/evaluate/run_results.py over_seeds, with this comparison's configurations)."""
    return run_results.over_seeds(evaluation.results.get("evaluations") or [],
                                  lambda run: label_of_run.get(Path(run).name))

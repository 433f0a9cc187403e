"""`python -m src.report <sweep dir>` or `python -m src.report RUN_DIR RUN_DIR ...`: one comparison
across runs, written into `<sweep dir>/compare/` (or `--out`):

    compare.md, compare.html   one row per configuration: swept parameters, seeds, runs' outcomes,
                               final and best of each metric (mean [min, max] over seeds)
    compare.json               the same numbers, unrounded, and every run with its outcome
    <metric>.png               per metric, a line per configuration, a min-max band over its seeds

and, where `python -m src.evaluate run=<sweep dir>` evaluated its checkpoints (into `<sweep dir>/eval/`), each
evaluation's results table beside them (src/report/evaluations.py).

Runs still training (partial metrics), failed runs (summary.json's state and error), runs with no
metrics (listed with why) and run dirs older versions wrote (missing records are left out) are all
compared; bad input is one line before anything is written. Files are written into a temp dir and
moved into the output dir only when all are complete; only an earlier comparison's files are replaced.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from src.data.safe_write import dir_mode, file_mode, new_dir_beside, os_reason

from . import plots
from .compare import compare
from .compare_page import COMPARE_HEADER, render_html, render_json, render_markdown
from .compare_plots import file_name, plot_metric
from .evaluations import find_evaluations
from .run_files import DRY_RUN, RunDirError, dry_run, load_run, refuse_out_dir
from .sweep_dirs import find_runs, is_run_dir, sweep_runs

COMPARE_DIR = "compare"
PAGES = ("compare.md", "compare.html", "compare.json")


class CompareWriteError(Exception):
    """Writing the checked output failed (disk full); the output dir is as it was."""


@dataclass
class CompareFiles:
    out_dir: Path
    files: dict[str, Path]  # "compare.md", ..., and each plot by file name


def is_sweep_dir(path: Path) -> bool:
    return path.is_dir() and not is_run_dir(path) and bool(sweep_runs(path))


def default_out(paths: list[Path]) -> Path:
    if len(paths) == 1:
        return paths[0] / COMPARE_DIR
    parents = {p.resolve().parent for p in paths}
    if len(parents) > 1:
        raise RunDirError("the runs lie in different dirs, so there is no default place for the comparison; "
                          "give --out DIR")
    return parents.pop() / COMPARE_DIR


def check_out_dir(out: Path) -> None:
    """`out` is missing, empty, or an earlier comparison (its compare.md ours, else only plots), and
    writable; RunDirError (one line) otherwise."""
    if out.exists() and not out.is_dir():
        raise RunDirError(f"--out {out} is a file, not a directory; give a directory for the comparison")
    foreign: list[str] = []
    if out.is_dir():
        names = sorted(p.name for p in out.iterdir())
        foreign = [n for n in names if n not in PAGES and not n.endswith(".png")]
        md = out / "compare.md"
        if names and not foreign:
            first = md.read_text(encoding="utf-8", errors="replace").splitlines()[:1] if md.is_file() else []
            if not (first and first[0].startswith(COMPARE_HEADER)):
                foreign = ["compare.md" if md.is_file() else "plots without compare.md"]
    refuse_out_dir(out, foreign, "comparison")


def build_comparison(paths: list[Path], out_dir: Path | None = None) -> CompareFiles:
    """Raises RunDirError (bad input, nothing written) or CompareWriteError (`out` as it was)."""
    entries = find_runs(paths)
    out = out_dir or default_out(paths)
    check_out_dir(out)
    loaded, unusable = {}, {}
    for e in entries:
        try:
            loaded[e.run_dir] = load_run(e.run_dir)
        except RunDirError as err:  # no step logged yet, or a record it cannot read: shown, not fatal
            unusable[e.run_dir] = DRY_RUN if dry_run(e.run_dir) else str(err)
    if not loaded:
        first = entries[0].run_dir
        raise RunDirError(f"none of the {len(entries)} runs has metrics to compare ({first}: {unusable[first]}); "
                          f"compare runs that trained at least one step")
    comparison = compare(entries, loaded, unusable)
    evaluations = find_evaluations(paths)
    title = paths[0].name if len(paths) == 1 else f"{len(entries)} runs"
    try:
        with new_dir_beside(out) as tmp:
            files = {}
            for m in comparison.metrics:
                files[file_name(m)] = plots.save(plot_metric(comparison, m), tmp / file_name(m))
            for name, text in (("compare.md", render_markdown(title, comparison, entries, evaluations)),
                               ("compare.html", render_html(title, comparison, entries, evaluations, out)),
                               ("compare.json", render_json(comparison, entries, evaluations))):
                (tmp / name).write_text(text, encoding="utf-8")
                files[name] = tmp / name
            # every file is complete before any is moved; an earlier comparison's plots of metrics
            # not shown now go (the check above made sure the dir holds only a comparison's files)
            out.mkdir(mode=dir_mode(), parents=True, exist_ok=True)
            for name, path in files.items():
                os.chmod(path, file_mode())
                os.replace(path, out / name)
                files[name] = out / name
            for stale in out.glob("*.png"):
                if stale.name not in files:
                    stale.unlink()
    except OSError as e:
        raise CompareWriteError(f"cannot write the comparison to {out}: {os_reason(e)}") from None
    return CompareFiles(out, files)

"""Which runs a comparison reads, and what each one is: its swept parameters, seed and outcome.

A sweep dir is what `--multirun` writes, locally or on Slurm: `outputs/multirun/<date>/` holding one
run dir per job (`<n>_<model>_<reward>_<algo>_g<G>x<nodes>/`, each with its `snapshot/`) and, once
the sweep has ended (a local sweep: once each job has started), `summary.json` with every job's
state (src/record/sweep_summary.py); a Slurm sweep also holds `code/` and `.submitit/`. The metrics
themselves lie in each run's checkpoint dir under `results/`, which the run's verl config names
(run_files.py reads them there). A run dir may also be given directly, or a checkpoint dir
(`results/.../seed1-<id>/`: its `metrics/` and `run_identity.json`).

What each run is trained with (its swept parameters, seed and outcome): src/record/run_params.py describe.
"""
from __future__ import annotations

from pathlib import Path

from src.record import identity as run_identity
from src.record import snapshot, sweep_summary
from src.record.run_params import RunEntry, describe

from .run_files import METRICS_DIR, METRICS_FILE, TRAIN_LOG, RunDirError


def is_run_dir(path: Path) -> bool:
    """A dir one run wrote: its snapshot, the launcher's train.log, verl's metrics, or (a
    checkpoint dir) its identity file."""
    return path.is_dir() and any((path / p).exists() for p in (
        snapshot.SNAPSHOT, TRAIN_LOG, METRICS_FILE, METRICS_DIR, run_identity.IDENTITY_FILE))


def sweep_runs(sweep_dir: Path) -> list[Path]:
    """The run dirs of a sweep dir, in job order (`<n>_...`), then by name."""
    def order(p: Path):
        head = p.name.split("_", 1)[0]
        return (0, int(head), p.name) if head.isdigit() else (1, 0, p.name)

    return sorted((p for p in sweep_dir.iterdir() if not p.name.startswith(".") and is_run_dir(p)), key=order)


def _rows_by_dir(sweep_dir: Path) -> dict[Path, dict]:
    try:
        rows = sweep_summary.read(sweep_dir) or []
    except sweep_summary.SummaryError as e:
        raise RunDirError(str(e)) from None
    out = {}
    for row in rows:
        if isinstance(row.get("run_dir"), str):
            out[(sweep_dir / Path(row["run_dir"]).name).resolve()] = row
    return out


def find_runs(paths: list[Path]) -> list[RunEntry]:
    """The runs of the given sweep dirs and run dirs; RunDirError (one line) for a path that is
    neither, or a sweep dir without runs."""
    run_dirs: list[Path] = []
    rows: dict[Path, dict] = {}
    for path in paths:
        if not path.is_dir():
            raise RunDirError(f"{path}: no such directory; give a sweep dir (outputs/multirun/<date>) or run dirs")
        if is_run_dir(path):
            run_dirs.append(path)
            # a run of a sweep: its outcome is in the sweep dir above it
            rows.update({k: v for k, v in _rows_by_dir(path.parent).items() if k == path.resolve()})
            continue
        found = sweep_runs(path)
        if not found:
            raise RunDirError(f"{path} is neither a run dir (snapshot/, train.log, metrics) nor a sweep dir holding "
                              f"run dirs; give outputs/multirun/<date>, or run dirs outputs/runs/<run> ...")
        run_dirs += found
        rows.update(_rows_by_dir(path))
    unique = list({d.resolve(): d for d in run_dirs}.values())
    return describe(unique, rows)

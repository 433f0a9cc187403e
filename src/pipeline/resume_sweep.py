"""`--resume-sweep <sweep dir>`: run a sweep's failed and unfinished jobs again, each in its own run dir.

Running a sweep's command again makes a new sweep dir (its name is the time of the launch). This runs the
same sweep again in the same dir instead:
- the command is the sweep's own, read from the `multirun.yaml` Hydra's BasicSweeper writes into every
  sweep dir (hydra/_internal/core_plugins/basic_sweeper.py, BasicSweeper.sweep): its task overrides and
  its Hydra overrides (the launcher: hydra/launcher=slurm), with hydra.sweep.dir set to this dir;
- the jobs are what that command expands to (src/config/compose.py sweep_jobs, as BasicSweeper numbers
  them), checked against `summary.json` (src/record/sweep_summary.py): a job recorded there with other
  overrides means conf/ or sweeps/ changed since, and the sweep is refused;
- a job whose row says succeeded is left alone; the others (failed, still "pending" in a local sweep that
  was killed, or with no row: never started) run again. Each gets the job number it had, so Hydra gives it
  the same run dir; the run reuses that dir's snapshot (src/record/snapshot.py reuse: a config that changed
  since is refused there) and verl resumes from the checkpoint dir's latest_checkpointed_iteration.txt
  (trainer.resume_mode=auto), as a requeued Slurm job does;
- a local sweep skips the finished jobs in its task function (`left_alone`); a Slurm sweep does not
  submit them (src/slurm/sweep.py `launch`), and its summary keeps their rows.
Bad input (no such dir, no multirun.yaml, an unreadable summary, a Slurm sweep whose submitter wrote no
summary, a changed expansion) is one `error:` line and exit 2, before anything runs.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from src.config import override_grammar
from src.record import sweep_summary, yaml_files
from src.record.sweep_resume import Resumed, start

from .errors import UsageError

FLAG = "--resume-sweep"
MULTIRUN_FILE = "multirun.yaml"  # Hydra's BasicSweeper writes it into the sweep dir
# Hydra overrides of the sweep's command that the resumed launch sets itself
_OWN_HYDRA_KEYS = ("hydra.sweep.dir", "hydra.mode")


def argv_for(argv: list[str]) -> tuple[list[str] | None, str]:
    """`... --resume-sweep DIR`: the command line that runs the sweep again in DIR (None: nothing to run)
    and the line that says what runs; marks this process as resuming it (src/record/sweep_resume.py).
    Raises UsageError (one line)."""
    i = argv.index(FLAG)
    if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
        raise UsageError(f"{FLAG} needs a sweep dir, e.g. {FLAG} outputs/multirun/<time>")
    extra = argv[:i] + argv[i + 2:]
    if extra:
        raise UsageError(f"{FLAG} runs the sweep's own command again and takes nothing else, got {extra[0]}; "
                         f"for other values launch a new sweep")
    sweep_dir = Path(argv[i + 1]).resolve()
    task, hydra = _command(sweep_dir)
    on_slurm = any(o.split("=", 1)[0] == "hydra/launcher" and o.split("=", 1)[1].startswith("slurm") for o in hydra)
    rows = _rows(sweep_dir, on_slurm)
    jobs = expanded_jobs(task + hydra)
    _check_rows(sweep_dir, rows, jobs)
    finished = {r["idx"]: r for r in rows if r.get("state") == sweep_summary.SUCCEEDED}
    resumed = Resumed(sweep_dir, on_slurm, finished, {r["idx"]: r for r in rows}, jobs)
    todo = resumed.to_run()
    if not todo:
        return None, f"[sweep] nothing to resume in {sweep_dir}: all {len(jobs)} job(s) succeeded"
    start(resumed)
    states = {r["idx"]: r.get("state") for r in rows}
    failed = [i for i in todo if states.get(i) == sweep_summary.FAILED]
    unfinished = [i for i in todo if i not in failed]
    parts = ([f"{len(failed)} failed ({_ids(failed)})"] if failed else []) + (
        [f"{len(unfinished)} never finished ({_ids(unfinished)})"] if unfinished else [])
    line = (f"[sweep] resuming {sweep_dir}: running {' and '.join(parts)} again, each in its own run dir; "
            f"{len(finished)} succeeded and left alone" + (f" ({_ids(sorted(finished))})" if finished else ""))
    command = ["--multirun", *hydra, *task, override_grammar.override("hydra.sweep.dir", str(sweep_dir))]
    return command, line


def _ids(indices: list[int]) -> str:
    return ", ".join(f"#{i}" for i in indices)


def _command(sweep_dir: Path) -> tuple[list[str], list[str]]:
    """The sweep's task overrides and Hydra overrides, as its command line had them."""
    if not sweep_dir.is_dir():
        raise UsageError(f"{FLAG} {sweep_dir}: no such dir; pass a sweep dir, e.g. outputs/multirun/<time>")
    path = sweep_dir / MULTIRUN_FILE
    try:
        recorded = yaml_files.load(path.read_text(encoding="utf-8"))
        overrides = recorded["hydra"]["overrides"]
        task, hydra = list(overrides["task"] or []), list(overrides["hydra"] or [])
    except FileNotFoundError:
        raise UsageError(f"{FLAG} {sweep_dir}: no {MULTIRUN_FILE} (Hydra writes it into every sweep dir): not a "
                         f"sweep dir; a single run continues with --from-snapshot <run dir> --resume") from None
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise UsageError(f"{path} does not hold the sweep's command ({type(exc).__name__}: {exc}); restore it as "
                         f"Hydra wrote it") from None
    return task, [o for o in hydra if o.split("=", 1)[0] not in _OWN_HYDRA_KEYS]


def _rows(sweep_dir: Path, on_slurm: bool) -> list[dict]:
    try:
        rows = sweep_summary.read(sweep_dir)
    except sweep_summary.SummaryError as exc:
        raise UsageError(str(exc).split("; ")[0] + f"; {FLAG} reads which jobs succeeded from it") from None
    if rows is None and on_slurm:
        # a Slurm sweep's submitter writes its summary when every job has ended: without one, its jobs may
        # still be queued or running, and resubmitting them would run each twice in one run dir
        raise UsageError(f"{sweep_dir}/{sweep_summary.SUMMARY_FILE} is missing: the sweep's submitter writes it "
                         f"when all its jobs have ended; it was stopped or still waits, and its jobs may still run "
                         f"(squeue --me); resume once none of them is queued or running")
    return rows or []


def expanded_jobs(overrides: list[str]) -> list[list[str]]:
    """Each job's task overrides, by job number, as the sweep's command expands them now."""
    from omegaconf import OmegaConf

    from src import config

    try:
        base = config.compose(config.fixed_overrides(overrides), with_hydra=True)
        params = base.hydra.sweeper.get("params")
        sweeper_params = OmegaConf.to_container(params, resolve=True) if params is not None else {}
        combos = config.sweep_jobs(overrides, True, sweeper_params)
    except Exception as exc:  # the sweep's command no longer composes: the pre-launch check's line says why
        raise UsageError(f"the sweep's recorded command no longer composes ({config.one_line(exc)}); conf/ "
                         f"changed since it ran") from None
    return [[o for o in combo if not config.is_hydra_override(o)] for combo in combos]


def _check_rows(sweep_dir: Path, rows: list[dict], jobs: list[list[str]]) -> None:
    for row in rows:
        idx, ran = row.get("idx"), list(row.get("overrides") or [])
        now = jobs[idx] if isinstance(idx, int) and 0 <= idx < len(jobs) else None
        if now != ran:
            # only what differs: a sweep's overrides name every path of the command
            was = " ".join(o for o in ran if o not in (now or [])) or "(the same overrides)"
            makes = "no such job" if now is None else " ".join(o for o in now if o not in ran) or "(fewer overrides)"
            raise UsageError(f"{sweep_dir}/{sweep_summary.SUMMARY_FILE}: job #{idx} ran with {was}, the sweep's "
                             f"command now makes {makes} (conf/ or sweeps/ changed since); resume it with the code "
                             f"it ran with, or launch a new sweep")

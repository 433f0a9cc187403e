"""`python -m src.launch`: parse the command line, check every job, hand the run to the pipeline.

    python -m src.launch reward=xcomet_xl gpus=4 dry_run=true
    python -m src.launch --multirun hydra/launcher=slurm reward=comet,xcomet_xl gpus=8
    python -m src.launch --from-snapshot outputs/runs/<run>/snapshot [--resume] [dry_run=true]
    python -m src.launch --resume-sweep outputs/multirun/<time>

Bad input is refused with one line and exit code 2 before anything is written or submitted: the
pre-launch check (src/pipeline/precheck.py) composes and plans every job first. Then Hydra runs
the app (src/pipeline/run.py `hydra_task`) for one run, or its launcher for a sweep.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from src import config, pipeline
from src.config import override_grammar

# Hydra's own flags that print or explain instead of running: no pre-launch check for them
_INFO_FLAGS = ("--help", "-h", "--hydra-help", "--info", "--cfg", "-c")
# our own flags, read here before Hydra sees the command line
_OWN_FLAGS = ("--from-snapshot", "--resume", "--resume-sweep", pipeline.ALLOW_CHANGED_INPUTS)
# every flag Hydra 1.3's argument parser knows (hydra/_internal/utils.py get_args_parser): another
# one would end in argparse's usage text and "unrecognized arguments" instead of one line
_HYDRA_FLAGS = ("--help", "-h", "--hydra-help", "--version", "--cfg", "-c", "--resolve", "--package", "-p",
                "--run", "-r", "--multirun", "-m", "--shell-completion", "-sc", "--config-path", "-cp",
                "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun", "--info", "-i")


def usage() -> str:
    """What `--help` says before Hydra's own help (groups and config): our flags and the sweeps."""
    sweeps = sorted(p.stem for p in (config.CODE_ROOT / "sweeps").glob("*.yaml"))
    return "\n".join([
        "usage: python -m src.launch [group=option ...] [key=value ...]      one run (dry_run=true: plan only)",
        "       python -m src.launch --multirun [hydra/launcher=slurm] key=a,b ...   a sweep (one job per value)",
        "       python -m src.launch --multirun +sweep=<name> [key=value ...]      a sweep kept in sweeps/",
        "       python -m src.launch --from-snapshot <run dir>/snapshot [--resume] [--allow-changed-inputs] [dry_run=...]",
        "       python -m src.launch --resume-sweep <sweep dir>",
        "",
        "  --from-snapshot DIR  run a past run again exactly, from its snapshot: from step 0 in a new",
        "                       checkpoint dir; a dry run's snapshot dry-runs again unless dry_run=false",
        "  --resume             with --from-snapshot: continue that run in its own checkpoint dir",
        "  --resume-sweep DIR   a sweep's failed and unfinished jobs again, each resuming in its own run dir",
        "                       (the sweep's own command, from DIR/multirun.yaml); the succeeded ones left alone",
        "  --allow-changed-inputs  with --from-snapshot: re-run although the model, data or QE files",
        "                       differ from what the snapshot recorded (refused otherwise)",
        f"  +sweep=NAME          sweeps/: {', '.join(sweeps) or '(none)'}",
        "  Values with spaces or non-ASCII characters need quotes for Hydra: \"paths.data_root='/data/数据'\"",
        "  Exit codes: 0 done, 2 bad input (nothing written), another: the run started and failed",
        "  (the training command's own code); docs/failures.md",
        "",
    ])


def check(argv: list[str]) -> int | pipeline.Checked | None:
    """The command line's refusals and the pre-launch check: an exit code when the launch stops
    here (one `error:` line printed), else what the check found for Hydra to run (None: no check, for
    Hydra's flags that print instead of running). Writes nothing."""
    flags = [a for a in argv if a.startswith("-")]
    if "--resume" in flags and "--from-snapshot" not in flags:
        print("error: --resume continues a past run and needs its snapshot: --from-snapshot "
              "outputs/runs/<run>/snapshot --resume", file=sys.stderr)
        return pipeline.USAGE_EXIT
    if pipeline.ALLOW_CHANGED_INPUTS in flags and "--from-snapshot" not in flags:
        print(f"error: {pipeline.ALLOW_CHANGED_INPUTS} re-runs a past run on files that changed since its snapshot "
              f"and needs it: --from-snapshot outputs/runs/<run>/snapshot {pipeline.ALLOW_CHANGED_INPUTS}",
              file=sys.stderr)
        return pipeline.USAGE_EXIT
    unknown = [f for f in flags if f.split("=", 1)[0] not in _HYDRA_FLAGS + _OWN_FLAGS]
    if unknown:
        print(f"error: unknown option {unknown[0]}: the launcher's own are --from-snapshot DIR, --resume and "
              f"--resume-sweep DIR, {pipeline.ALLOW_CHANGED_INPUTS}, "
              f"Hydra's --multirun, --help, --cfg job, ... (python -m src.launch --help)", file=sys.stderr)
        return pipeline.USAGE_EXIT
    overrides = [a for a in argv if not a.startswith("-")]
    if any(f in _INFO_FLAGS or f.startswith("--info") for f in flags):
        return None
    try:
        return pipeline.check_launch(overrides, multirun=any(f in ("--multirun", "-m") for f in flags))
    except pipeline.UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return pipeline.USAGE_EXIT


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # before a run starts (composition, the pre-launch check): one line, no traceback (issue 33); a run
        # that started says so itself (src/pipeline/run.py hydra_task)
        print("stopped (interrupt): nothing was started", file=sys.stderr)
        return pipeline.INTERRUPTED_EXIT


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--from-snapshot" in argv:
        return pipeline.from_snapshot_command(argv)
    resuming = None
    if pipeline.RESUME_SWEEP_FLAG in argv:
        try:
            resumed, resuming = pipeline.resume_sweep_argv(argv)
        except pipeline.UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return pipeline.USAGE_EXIT
        if resumed is None:
            print(resuming)
            return 0
        argv = resumed  # the sweep's own command, in its own dir: checked and run as any sweep
    if any(a in ("--help", "-h") for a in argv):
        print(usage())
    argv, note = pipeline.on_cpu_without_gpu(argv)
    if note:
        print(note)
    checked = check(argv)
    if isinstance(checked, int):
        return checked
    if resuming:
        print(resuming, flush=True)
    if checked is not None and checked.run_dir is not None:
        # a dir of this launch's own, which Hydra makes the run's (src/pipeline/run_dirs.py); not in the snapshot's
        # overrides (Hydra's own are not the task's), so a run from the snapshot gets a new one
        argv = [*argv, override_grammar.override("hydra.run.dir", str(pipeline.claim_run_dir(Path(checked.run_dir))))]

    import hydra

    config.register()
    # the task function is pipeline.hydra_task, an importable module's: submitit pickles it by
    # reference, so a Slurm job imports it from its code snapshot
    entry = hydra.main(config_path=str(config.CONF_DIR), config_name="config", version_base="1.3")(pipeline.hydra_task)
    sys.argv = [sys.argv[0], *argv]
    # the check composed these overrides: Hydra need not compose them once more only to read the run mode
    known = config.mode_known(checked.hydra_mode) if checked is not None else contextlib.nullcontext()
    try:
        with known:
            entry()
    except SystemExit:
        # a local sweep stopped (an interrupt) or ended in a bug Hydra reported: what its jobs did so far
        pipeline.finish_local_sweep()
        raise
    # a local --multirun: its summary, as a Slurm sweep ends (1 if a job failed); nothing after a single run
    return pipeline.finish_local_sweep()


if __name__ == "__main__":
    sys.exit(main())

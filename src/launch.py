"""`python -m src.launch`: parse the command line, check every job, hand the run to the pipeline.

    python -m src.launch reward=xcomet_xl gpus=4 dry_run=true
    python -m src.launch --multirun hydra/launcher=slurm reward=comet,xcomet_xl gpus=8
    python -m src.launch --from-snapshot outputs/runs/<run>/snapshot [--resume] [dry_run=true]

Bad input is refused with one line and exit code 2 before anything is written or submitted: the
pre-launch check (src/pipeline/precheck.py) composes and plans every job first. Then Hydra runs
the app (src/pipeline/run.py `hydra_task`) for one run, or its launcher for a sweep.
"""
from __future__ import annotations

import sys
from pathlib import Path

from src import config, pipeline

# Hydra's own flags that print or explain instead of running: no pre-launch check for them
_INFO_FLAGS = ("--help", "-h", "--hydra-help", "--info", "--cfg", "-c")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--from-snapshot" in argv:
        i = argv.index("--from-snapshot")
        if i + 1 >= len(argv):
            print("error: --from-snapshot needs a dir, e.g. --from-snapshot outputs/runs/<run>/snapshot",
                  file=sys.stderr)
            return pipeline.USAGE_EXIT
        return pipeline.from_snapshot(Path(argv[i + 1]), argv[:i] + argv[i + 2:])
    flags = [a for a in argv if a.startswith("-")]
    overrides = [a for a in argv if not a.startswith("-")]
    if not any(f in _INFO_FLAGS or f.startswith("--info") for f in flags):
        try:
            pipeline.precheck(overrides, multirun=any(f in ("--multirun", "-m") for f in flags))
        except pipeline.UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return pipeline.USAGE_EXIT

    import hydra

    config.register()
    # the task function is pipeline.hydra_task, an importable module's: submitit pickles it by
    # reference, so a Slurm job imports it from its code snapshot
    entry = hydra.main(config_path=str(config.CONF_DIR), config_name="config", version_base="1.3")(pipeline.hydra_task)
    sys.argv = [sys.argv[0], *argv]
    entry()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A copy of the code and config at submission, which a queued Slurm job runs from.

A job may wait in the queue for hours while the user edits conf/ or src/; it must still run what
was submitted. At submission the Slurm launcher copies src/, conf/ (with conf/local/), sweeps/
and hydra_plugins/ into `<sweep dir>/code/`, and the job starts there (sbatch --chdir), so
`python -m submitit...` imports `src` and the Hydra plugins from the copy and the job composes
its config from the copy's conf/. The copy records the checkout it came from (data, models,
results and outputs stay under the checkout, src/config/resolvers.py) and the git state at submission
(the run snapshot's git.txt/git.diff then describe the submitted code, not the checkout's later
state).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import tempfile
from pathlib import Path

from src.config import CODE_ROOT, CODE_SNAPSHOT_MARKER, PROJECT_ROOT

from . import git_state
from .redact import scrub

# what a job needs to compose its config and run; tests/, data and envs are not code of the run
COPIED = ("src", "conf", "sweeps", "hydra_plugins", "pyproject.toml")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def write(dest: Path, environ: dict | None = None) -> Path:
    """Copy the running code into `dest` (which must not exist); whole or absent. The recorded git
    state passes the secret scrubber, as every file of a run snapshot does (an uncommitted diff can
    hold a token someone pasted)."""
    environ = dict(os.environ if environ is None else environ)
    if dest.exists():
        raise FileExistsError(f"{dest} already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".code-", dir=dest.parent))
    try:
        # mkdtemp makes the dir 0700: a teammate reads the job's code as the user's umask says
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        for name in COPIED:
            source = CODE_ROOT / name
            if source.is_dir():
                shutil.copytree(source, tmp / name, ignore=_IGNORE)
            elif source.is_file():
                shutil.copy2(source, tmp / name)
        git_text, git_diff = git_state.current()
        (tmp / "git.txt").write_text(scrub(git_text, environ), encoding="utf-8")
        (tmp / "git.diff").write_text(scrub(git_diff, environ), encoding="utf-8")
        marker = {"checkout": str(PROJECT_ROOT), "copied_from": str(CODE_ROOT),
                  "created": dt.datetime.now().isoformat(timespec="seconds"), "copied": list(COPIED)}
        (tmp / CODE_SNAPSHOT_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def unique_dir(parent: Path, name: str = "code") -> Path:
    """parent/code, or parent/code.1, ... when a sweep dir is reused."""
    candidate, n = parent / name, 0
    while candidate.exists():
        n += 1
        candidate = parent / f"{name}.{n}"
    return candidate

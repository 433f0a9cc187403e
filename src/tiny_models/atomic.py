"""Build a tree once, whole or not at all: in a sibling temp dir renamed into place as the last step.

A killed build never leaves a tree that looks complete; a temp dir whose builder process is gone is
removed by the next build. `ensure` adds a marker file written inside the temp tree before the
rename: a tree is complete (and reused) exactly when its marker holds the same build key (builder
source hash, shapes); a tree from another key is replaced. Stdlib only: both environments use it.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

TMP_PREFIX = ".building-"
MARKER = "tiny_build.json"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_temps(parent: Path) -> None:
    """Temp dirs of builds that were killed (their pid is gone) are garbage."""
    if not parent.is_dir():
        return
    for p in parent.glob(TMP_PREFIX + "*"):
        try:
            pid = int(p.name[len(TMP_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if not pid_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


def atomic_build(final: Path, build: Callable[[Path], object]) -> None:
    """Runs build(tmp) in a sibling temp dir, then renames it to `final`. A concurrent builder
    that wins the rename race is fine: its tree is equivalent, ours is discarded."""
    if final.is_dir():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(final.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def read_marker(final: Path) -> dict | None:
    try:
        return json.loads((final / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def ensure(final: Path, key: dict, build: Callable[[Path], object]) -> str:
    """'reused' when `final` is complete for `key`, else builds it ('built'); a tree of another key
    or without a marker (half-copied, older builder) is moved aside and removed first."""
    final = Path(final)
    if read_marker(final) == key:
        return "reused"
    if final.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        aside = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-old-", dir=final.parent))
        os.rename(final, aside / "tree")
        shutil.rmtree(aside, ignore_errors=True)

    def build_and_mark(tmp: Path) -> None:
        build(tmp)
        (tmp / MARKER).write_text(json.dumps(key, indent=1, sort_keys=True) + "\n", encoding="utf-8")

    atomic_build(final, build_and_mark)
    return "built"

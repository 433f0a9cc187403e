"""The state of the code a run runs: a checkout's git sha, dirtiness and diff, or what a Slurm code
snapshot recorded of its checkout when it was copied (src/record/code_snapshot.py).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from src.config import CODE_ROOT, CODE_SNAPSHOT_MARKER, PROJECT_ROOT


def git_state(root: Path = PROJECT_ROOT) -> tuple[str, str]:
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)

    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
        return "not a git checkout (or no commits yet): code state not recorded\n", ""
    status = git("status", "--porcelain").stdout
    diff = git("diff", "HEAD").stdout
    untracked = [line[3:] for line in status.splitlines() if line.startswith("??")]
    text = f"sha: {head.stdout.strip()}\ndirty: {bool(status.strip())}\n"
    if untracked:
        text += "untracked (not in git.diff):\n" + "".join(f"  {u}\n" for u in untracked)
    return text, diff


def is_code_snapshot(code_root: Path = CODE_ROOT) -> bool:
    return (code_root / CODE_SNAPSHOT_MARKER).is_file()


def recorded_git_state(code_root: Path = CODE_ROOT) -> tuple[str, str] | None:
    """(git.txt, git.diff) recorded when `code_root` was copied; None for a checkout."""
    if not is_code_snapshot(code_root):
        return None
    text = (code_root / "git.txt").read_text(encoding="utf-8")
    diff = (code_root / "git.diff").read_text(encoding="utf-8")
    return f"code snapshot: {code_root} (copied at submission)\n{text}", diff


def current() -> tuple[str, str]:
    """(git.txt, git.diff) of the code this process runs: a code snapshot's record, else the checkout's."""
    return recorded_git_state() or git_state(PROJECT_ROOT)

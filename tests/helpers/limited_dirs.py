"""Directories that refuse writes for real: a read-only one, a full one and a small one (for the data,
evaluate and report tests).

As root, permission bits stop nothing (CAP_DAC_OVERRIDE), so both are small tmpfs mounts (read-only,
or a few KiB); as another user, the read-only one is a mode-0555 directory. A full file system needs
a mount, so that case needs root, like the Slurm tests.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


def _mount_tmpfs(path: Path, options: str) -> None:
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs at {path} ({done.stderr.strip()}); these tests need root with mount "
                    "rights, or (read-only case) a non-root user")


@contextlib.contextmanager
def _mounted(path: Path, options: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    _mount_tmpfs(path, options)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def read_only_dir(path: Path) -> Iterator[Path]:
    """An empty directory nothing can be written into."""
    if os.geteuid() == 0:
        with _mounted(path, "ro,size=64k") as p:
            yield p
        return
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o555)
    try:
        yield path
    finally:
        path.chmod(0o755)


@contextlib.contextmanager
def full_dir(path: Path, keep: dict[str, bytes] | None = None) -> Iterator[Path]:
    """A directory on a small file system (64 KiB plus what `keep` needs) filled to the last byte,
    holding the files of `keep` ({relative path: bytes})."""
    if os.geteuid() != 0:
        pytest.fail("a full file system is a small tmpfs mount: run this test as root")
    keep = keep or {}
    size_k = 64 + sum(len(data) // 4096 + 2 for data in keep.values()) * 4
    with _mounted(path, f"size={size_k}k") as p:
        for name, data in keep.items():
            (p / name).parent.mkdir(parents=True, exist_ok=True)
            (p / name).write_bytes(data)
        with contextlib.suppress(OSError), open(p / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        yield p


@contextlib.contextmanager
def small_fs(path: Path, size_k: int) -> Iterator[Path]:
    """An empty directory on a file system of `size_k` KiB (a tmpfs mount: root only)."""
    if os.geteuid() != 0:
        pytest.fail("a small file system is a tmpfs mount: run this test as root")
    with _mounted(path, f"size={size_k}k") as p:
        yield p

"""Writing files without ever losing one: checks before work, atomic replace, modes the umask gives.

- `writable_dir_problem(path)`: None when `path` (a directory to write into, created if missing) can be
  written, else one line saying why. Called before any work, so a read-only or misspelt output dir
  costs nothing.
- `atomic_files(...)`: several files written into temp files beside their targets, then renamed into
  place together, so a reader (or a training run started meanwhile) sees the old set or the new one,
  never half a file; a failure (disk full) leaves no temp file behind.
- `new_dir_beside(...)` / `claim_dir(...)`: a temp dir built beside its destination, then renamed to a
  name created exclusively (mkdir), so two commands started in the same second never share or replace
  a directory, and an existing one is never touched.

Modes: `tempfile.mkstemp`/`mkdtemp` create 0600/0700 whatever the umask (they are meant for private
temp files); what we keep must be readable as the user's umask says (teammates on a shared data root),
so each kept file gets 0666 & ~umask and each kept dir 0777 & ~umask, as open()/mkdir() would give.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator


def current_umask() -> int:
    """The process umask, read without changing it where Linux says it (/proc), else set-and-restore."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    return 0o777 & ~current_umask()


def os_reason(exc: OSError) -> str:
    """'No space left on device' rather than '[Errno 28] No space left on device: ...' (pyarrow's
    OSErrors carry no errno: their own first line then)."""
    if exc.errno:
        return os.strerror(exc.errno)
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def writable_dir_problem(path: Path) -> str | None:
    """Why files cannot be created in directory `path` (made if missing), or None when they can.
    Looks at the nearest existing ancestor when `path` is not there yet; writes nothing."""
    path = Path(os.path.abspath(path))
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory" if probe == path else f"{probe} (in {path}) is not a directory"
    # access() answers EROFS for a read-only mount even to root, and EACCES for the permission bits
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "read-only file system" if _read_only_mount(probe) else "no write permission"
        return f"cannot write in {probe}: {what}"
    return None


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def atomic_files(writers: dict[Path, Callable[[str], None]]) -> None:
    """`{target: write(tmp_path)}`: every file is written to a temp file in its target's directory (so
    the rename stays on one file system), given the umask's mode, then all are renamed into place.
    On any error every temp file is removed and the targets are as they were; the OSError propagates."""
    temps: list[tuple[str, Path]] = []
    try:
        for target, write in writers.items():
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            os.close(fd)
            temps.append((tmp, target))
            write(tmp)
            os.chmod(tmp, file_mode())
        for tmp, target in temps:
            os.replace(tmp, target)
    except BaseException:
        for tmp, _ in temps:
            Path(tmp).unlink(missing_ok=True)
        raise


def claim_dir(wanted: Path, unique: bool) -> Path:
    """Create a new empty directory at `wanted` exclusively and return it. An existing `wanted` is
    never touched: with `unique`, `wanted-2`, `wanted-3`, ... are tried instead; without, FileExistsError."""
    wanted.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        candidate = wanted if n == 1 else wanted.with_name(f"{wanted.name}-{n}")
        try:
            candidate.mkdir(mode=dir_mode())
            return candidate
        except FileExistsError:
            if not unique:
                raise
    raise FileExistsError(errno.EEXIST, "no free name", str(wanted))


@contextlib.contextmanager
def new_dir_beside(wanted: Path) -> Iterator[Path]:
    """A temp dir in `wanted`'s parent to fill; removed at the end unless the caller renamed it away
    (see `publish_dir`)."""
    wanted.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{wanted.name}.", suffix=".tmp", dir=wanted.parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def publish_dir(tmp: Path, wanted: Path, unique: bool) -> Path:
    """Move the filled temp dir `tmp` to a new directory at `wanted` (or, with `unique`, the first free
    `wanted-N`), with the umask's modes. The name is claimed with an exclusive mkdir first, so the
    rename only ever replaces the empty directory this call just created."""
    os.chmod(tmp, dir_mode())
    for p in tmp.iterdir():
        if p.is_file():
            os.chmod(p, file_mode())
    final = claim_dir(wanted, unique)
    try:
        os.rename(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            final.rmdir()
        raise
    return final

"""The processes of one CPU-loop launch, found by what the tests can see from outside: the launcher by its own
`paths.output_dir=` argument, the processes under it by their parent chain (Ray's workers and vLLM's engine
descend from the training command, which descends from the launcher)."""
from __future__ import annotations

from pathlib import Path

from src.node.processes import command_line, forked_from_its_title, parent


def launcher_pid(out: Path) -> int:
    """The launcher of the launch writing into `out` (its own `paths.output_dir=` argument; verl's processes
    under it name the dir only inside longer arguments)."""
    mine = f"paths.output_dir={out}".encode()
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if mine in argv and b"src.launch" in argv:
            return int(proc.name)
    raise AssertionError(f"no launcher with {mine.decode()} runs")


def descendants_titled(ancestor: int, title: str) -> list[int]:
    """The processes under `ancestor` whose command line (a process title, for Ray's and vLLM's) starts with
    `title`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if not cmd.startswith(title):
            continue
        pid = int(proc.name)
        while pid not in (None, 0, 1, ancestor):
            pid = parent(pid)
        if pid == ancestor:
            found.append(int(proc.name))
    return found


def titled_with_env(title_has: str, env_text: str) -> list[tuple[int, str]]:
    """(pid, title) of the processes whose title (first word of the command line) has `title_has` and whose
    environment has `env_text` (a run dir: what the training command passes to every process it starts); not a
    child forked from a process of the same title (it carries its parent's title until it execs, and with pids
    wrapping around at 32768 it may have the lower pid: src/node/processes.py forked_from_its_title, which the death
    watch skips them by too)."""

    def title_of(pid: int) -> str | None:
        try:
            return command_line(pid)
        except OSError:
            return None

    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if title_has in cmd.split(" ")[0] and env_text.encode() in (proc / "environ").read_bytes() \
                    and not forked_from_its_title(int(proc.name), cmd, title_of):
                found.append((int(proc.name), cmd))
        except (OSError, IndexError):
            continue
    return sorted(found)

"""The processes of one training launch on this node, seen from /proc: what the launcher's watches (the stall
guard, src/node/stall.py; the death watch, src/node/deaths.py) look at, dump and stop. A launch's processes are the
training command's process group and session, and every process under it: Ray starts vLLM's engine outside the
group (src/node/leftovers.py)."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable, Iterable, Optional


def command_line(pid: int) -> str:
    """A process's command line on one line (a `python -c` script has newlines in its argument). Raises OSError."""
    return " ".join((Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
                    .decode(errors="replace").split())


def parent(pid: int) -> Optional[int]:
    """A process's parent pid; None when it is gone."""
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def forked_from_its_title(pid: int, title: str, title_of: Callable[[int], Optional[str]]) -> bool:
    """Whether `pid` (command line `title`) is a child forked from a process of the same title: its own title is
    inherited, not set, until it execs (a dataloader worker forked from verl's TaskRunner). `title_of(pid)`: a
    process's command line, None when unknown. Compared up to the first dot (`ray::WorkerDict.<method>`)."""
    up = parent(pid)
    return up is not None and (title_of(up) or "").split(".")[0] == title.split(".")[0]


def training_processes(leader: int) -> list[tuple[int, str, str]]:
    """(pid, state, command line) of each process in `leader`'s process group or session, or under it (Ray starts
    vLLM's engine outside training's process group: src/node/leftovers.py), leader first."""
    table = {}
    for pid, fields in _stats():
        try:
            cmd = command_line(pid)
        except OSError:
            continue
        state, ppid, pgrp, session = fields[:4]
        table[pid] = (state, int(ppid), int(pgrp), int(session), cmd)

    def under(pid: int) -> bool:
        seen = set()
        while pid in table and pid not in seen:
            seen.add(pid)
            if pid == leader:
                return True
            pid = table[pid][1]
        return False

    found = [(pid, state, cmd) for pid, (state, _, pgrp, session, cmd) in table.items()
             if pgrp == leader or session == leader or under(pid)]
    return sorted(found, key=lambda p: (p[0] != leader, p[0]))


def running(processes: list[tuple[int, str, str]]) -> dict[int, str]:
    """pid -> command line of the `training_processes` still running as themselves: not a zombie or dead, and with a
    command line. A process that is exiting has released its memory before it becomes a zombie, and its command line
    reads empty in that window (a scan on a loaded machine lands in it): it is ending, not retitled."""
    return {pid: cmd for pid, state, cmd in processes if state not in ("Z", "X") and cmd}


def kill_left(dumps: dict[int, tuple[str, str, str]]) -> None:
    """SIGKILL each dumped process still running as itself (its command line unchanged): what the group's stop
    did not reach (outside the group; a stopped process takes SIGKILL only); returns once they are gone."""
    killed = []
    for pid, (_, cmd, _) in dumps.items():
        try:
            if command_line(pid) == cmd:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        except (OSError, ProcessLookupError):
            continue
    wait_gone(killed)


def _stat(pid: int) -> Optional[list[str]]:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...); None when gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def live(pid: int) -> bool:
    """Whether a process is still running: neither gone nor a zombie (ended, not yet reaped by its parent)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid`."""
    return [pid for pid, fields in _stats() if fields[0] != "Z" and fields[2] == str(pgid)]


def _stats():
    """(pid, its `_stat` fields) of every process there is."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                yield int(entry.name), fields


def wait_gone(pids: Iterable[int], timeout_s: float = 10.0) -> list[int]:
    """Wait until none of `pids` runs (SIGKILL is delivered at once but a process takes a moment to exit: on a
    loaded machine, longer than a caller that goes on to say "nothing is left" may assume); those left after
    `timeout_s`."""
    left = list(pids)
    deadline = time.monotonic() + timeout_s
    while left:
        left = [pid for pid in left if live(pid)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return left

"""The processes of one training launch on this node, seen from /proc: what the launcher's watches (the stall
guard, src/node/stall.py; the death watch, src/node/deaths.py) look at, dump and stop. A launch's processes are the
training command's process group and session, and every process under it: Ray starts vLLM's engine outside the
group (src/node/leftovers.py)."""
from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Optional


def command_line(pid: int) -> str:
    """A process's command line on one line (a `python -c` script has newlines in its argument). Raises OSError."""
    return " ".join((Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
                    .decode(errors="replace").split())


def parent(pid: int) -> Optional[int]:
    """A process's parent pid; None when it is gone."""
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def training_processes(leader: int) -> list[tuple[int, str, str]]:
    """(pid, state, command line) of each process in `leader`'s process group or session, or under it (Ray starts
    vLLM's engine outside training's process group: src/node/leftovers.py), leader first."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # fields after the command name in parentheses: state, ppid, pgrp, session, ...
            state, ppid, pgrp, session = stat.rsplit(")", 1)[1].split()[:4]
            cmd = command_line(int(entry.name))
        except (OSError, ValueError):
            continue
        table[int(entry.name)] = (state, int(ppid), int(pgrp), int(session), cmd)

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


def kill_left(dumps: dict[int, tuple[str, str, str]]) -> None:
    """SIGKILL each dumped process still running as itself (its command line unchanged): what the group's stop
    did not reach (outside the group; a stopped process takes SIGKILL only)."""
    for pid, (_, cmd, _) in dumps.items():
        try:
            if command_line(pid) == cmd:
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue

"""What verl and vLLM leave on the node when a run ends, removed by the launcher after training stopped.

Killed at shutdown (the launcher stops training's whole process group), vLLM's engine and verl's rollout
workers never unlink what they created:
- /dev/shm/psm_*: vLLM's shared-memory message queues (vllm/distributed/device_communicators/
  shm_broadcast.py, MessageQueue: multiprocessing.shared_memory's default names), 160-250 MB each, two per
  engine start; a CPU machine's /dev/shm (RAM) fills up run by run;
- /dev/shm/verl_weights_*: verl's weight-sync bucket when the sync failed (verl/workers/rollout/
  vllm_rollout/bucketed_weight_transfer.py);
- <tmp>/vllm_dist_*: vLLM's file store for its process group (vllm/utils/network_utils.py);
- /tmp/rl-colocate-zmq-*.sock: verl's weight-sync sockets (vllm_rollout.py), when a worker was killed.

Only what appeared during this run and no live process still maps or holds open is removed: another run
on the node keeps its segments, and older leftovers are not ours to judge.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

from src.verl_fixes.weight_sync_socket import PREFIX as _SOCKET

_SOCKET_PATH = Path(_SOCKET.removeprefix("ipc://"))
PATTERNS = ((Path("/dev/shm"), "psm_"), (Path("/dev/shm"), "verl_weights_"),
            (Path(tempfile.gettempdir()), "vllm_dist_"), (_SOCKET_PATH.parent, _SOCKET_PATH.name))


def present(tmp_dir: Path | None = None, patterns: tuple[tuple[Path, str], ...] = PATTERNS) -> set[str]:
    """The paths matching `patterns` (folder, name prefix) now; with `tmp_dir`, vLLM's stores are looked for there
    instead of this process's temp dir (another process's TMPDIR: tests/loop/conftest.py)."""
    out = set()
    for folder, prefix in patterns:
        if tmp_dir is not None and prefix == "vllm_dist_":
            folder = tmp_dir
        with contextlib.suppress(OSError):
            out.update(str(folder / name) for name in os.listdir(folder) if name.startswith(prefix))
    return out


def in_use() -> set[str]:
    """Files mapped (/proc/PID/maps) or open (/proc/PID/fd) by a process this user may inspect, and the paths of
    the unix sockets bound now (/proc/net/unix): another run's weight-sync socket in /tmp, bound by its sender for
    the length of a sync, is no file descriptor's path, and removing it mid-sync would leave that run's vLLM
    waiting for ever (src/verl_fixes/weight_sync_socket.py)."""
    used = bound_sockets()
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                used.update(line.split(maxsplit=5)[5].strip() for line in maps if line.count(" ") >= 5
                            and "/" in line)
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    used.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    # a deleted file shows as "PATH (deleted)": gone already
    return used


def bound_sockets() -> set[str]:
    """The paths of the unix sockets bound in this network namespace (the last column of /proc/net/unix)."""
    with contextlib.suppress(OSError):
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as table:
            return {parts[7].rstrip("\n") for parts in (line.split(maxsplit=7) for line in table) if len(parts) >= 8
                    and parts[7].startswith("/")}
    return set()


# a run stopped by a signal (a scorer dead for good, Ctrl-C): vLLM's engine processes, which Ray started
# outside training's process group, still map their queues for a few seconds after the group is killed
HOLDERS_GRACE_S = 20.0


class Leftovers:
    """`Leftovers()` before training starts; `remove()` after its process group is stopped. `patterns` other than
    PATTERNS: a test's own folder, which no run beside it on the node sweeps (another run's `remove()` takes an
    unheld /dev/shm/psm_* that appeared during its run, a test's included)."""

    def __init__(self, patterns: tuple[tuple[Path, str], ...] = PATTERNS):
        self.patterns = patterns
        self.before = present(patterns=patterns)

    def remove(self, grace_s: float = HOLDERS_GRACE_S) -> list[str]:
        """Unlink what appeared since and nothing holds, waiting up to `grace_s` for the processes still
        holding some of it to exit; the paths removed."""
        removed: list[str] = []
        deadline = time.monotonic() + grace_s
        while True:
            new = present(patterns=self.patterns) - self.before - set(removed)
            if not new:
                return removed
            # the deadline is read before the scan: a scan of every process's maps and fds takes seconds on a loaded
            # node, and one begun inside the grace can end after it still seeing a holder that exited within it (a
            # CI run on a machine loaded past its cores kept a 2 s holder's segment with an 8 s grace), so the last
            # word is always a scan begun after the grace ended
            scanned_at = time.monotonic()
            held = in_use()
            for path in sorted(new - held):
                with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                    os.unlink(path)
                    removed.append(path)
            if not new & held or scanned_at > deadline:
                return removed
            time.sleep(0.5)

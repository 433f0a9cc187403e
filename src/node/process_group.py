"""Stopping a child that leads its own process group (started with start_new_session=True)."""
import contextlib
import os
import signal
import subprocess

from .processes import group_members, wait_gone


def stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the group, wait up to `grace_s` for the leader, then SIGKILL whatever is left and wait
    (up to 10 s) until none of it runs.

    The final SIGKILL also runs when the leader already exited: what it started (verl's Ray
    workers, a scorer's helpers) stays in its group and would otherwise outlive the run.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    wait_gone(group_members(proc.pid))

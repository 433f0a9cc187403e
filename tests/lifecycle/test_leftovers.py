"""What verl/vLLM leave in /dev/shm is removed after training stops, once no process holds it
(src/node/leftovers.py): a holder still exiting is waited for, a live one keeps its file.

Each test's files lie in a folder of its own, under the patterns' prefixes: in /dev/shm or /tmp, a launch running
beside the test (the loop's, on another worker) sweeps an unheld psm_* that appeared during its run, and the test's
own `remove()` then finds it gone (a CI run failed so: the exiting holder's segment missing from `removed`)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from src.node.leftovers import Leftovers

HOLD = "import sys, time; f = open(sys.argv[1]); print('held', flush=True); time.sleep(float(sys.argv[2]))"


@pytest.fixture
def folder():
    """A short private folder (a unix socket's path is at most 107 bytes) on the same file system kinds."""
    path = Path(tempfile.mkdtemp(prefix="leftovers-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _segment(folder: Path) -> Path:
    path = folder / f"psm_test_{uuid.uuid4().hex[:8]}"
    path.write_bytes(b"x")
    return path


def _hold(path: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_segment_whose_holder_is_exiting_is_removed_once_it_exits_and_a_live_holders_stays(folder):
    leftovers = Leftovers(patterns=((folder, "psm_"),))
    exiting, live = _segment(folder), _segment(folder)
    holders = [_hold(exiting, 2.0), _hold(live, 60.0)]
    try:
        t0 = time.monotonic()
        removed = leftovers.remove(grace_s=8.0)
        assert str(exiting) in removed and str(live) not in removed and not exiting.exists()
        assert live.exists() and time.monotonic() - t0 >= 2.0   # waited for the exiting holder, not past the grace
    finally:
        for proc in holders:
            proc.kill()
            proc.wait()
        live.unlink(missing_ok=True)
        exiting.unlink(missing_ok=True)


def test_files_from_before_the_run_are_not_ours(folder):
    older = _segment(folder)
    leftovers = Leftovers(patterns=((folder, "psm_"),))
    assert str(older) not in leftovers.remove() and older.exists()


def test_another_runs_bound_weight_sync_socket_stays_and_a_dead_ones_file_goes(folder):
    """A socket file is held by no file descriptor's path: a bound one (another run's sender mid-sync) is in
    /proc/net/unix, and removing it would leave that run's vLLM waiting for ever."""
    import socket

    leftovers = Leftovers(patterns=((folder, "rl-colocate-zmq-"),))
    bound_path, dead_path = (f"{folder}/rl-colocate-zmq-test{uuid.uuid4().hex[:8]}-{n}.sock" for n in (0, 1))
    bound, dead = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
    try:
        bound.bind(bound_path)
        dead.bind(dead_path)
        dead.close()  # its file stays, as a killed sender's does
        removed = leftovers.remove(grace_s=0.0)
        assert bound_path not in removed and os.path.exists(bound_path)
        assert dead_path in removed and not os.path.exists(dead_path)
    finally:
        bound.close()
        for path in (bound_path, dead_path):
            Path(path).unlink(missing_ok=True)

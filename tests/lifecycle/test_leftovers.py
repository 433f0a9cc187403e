"""What verl/vLLM leave in /dev/shm is removed after training stops, once no process holds it
(src/node/leftovers.py): a holder still exiting is waited for, a live one keeps its file."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from src.node.leftovers import Leftovers

HOLD = "import sys, time; f = open(sys.argv[1]); print('held', flush=True); time.sleep(float(sys.argv[2]))"


def _segment() -> Path:
    path = Path("/dev/shm") / f"psm_test_{uuid.uuid4().hex[:8]}"
    path.write_bytes(b"x")
    return path


def _hold(path: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_segment_whose_holder_is_exiting_is_removed_once_it_exits_and_a_live_holders_stays():
    leftovers = Leftovers()
    exiting, live = _segment(), _segment()
    holders = [_hold(exiting, 2.0), _hold(live, 60.0)]
    try:
        t0 = time.monotonic()
        removed = leftovers.remove(grace_s=8.0)
        # (another run's segments may come and go meanwhile: only these two are this test's)
        assert str(exiting) in removed and str(live) not in removed and not exiting.exists()
        assert live.exists() and time.monotonic() - t0 >= 2.0   # waited for the exiting holder, not past the grace
    finally:
        for proc in holders:
            proc.kill()
            proc.wait()
        live.unlink(missing_ok=True)
        exiting.unlink(missing_ok=True)


def test_files_from_before_the_run_are_not_ours():
    older = _segment()
    try:
        leftovers = Leftovers()
        assert str(older) not in leftovers.remove() and older.exists()
    finally:
        older.unlink(missing_ok=True)

"""Launches of the real training loop on CPU (accelerator=cpu: verl's trainer, vLLM's CPU build, FSDP on
gloo) with an outer time limit, and the check that nothing outlives them.

verl's weight sync hangs instead of failing when a worker dies inside it (docs/cpu-loop.md), so every
launch here has a deadline: past it, the launcher gets SIGTERM (it stops training's process group and its
services, as on Ctrl-C), then SIGKILL, and whatever still runs under this launch's Ray temp dir is
killed; the test then fails with the output's tail. After every launch, finished or not, the test fails
if a process of it, its Ray session or a shared-memory segment it created is left.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from src.node import leftovers
from tests.helpers.env import LEAKY_ENV

REPO = Path(__file__).resolve().parents[2]
LOOP_PYTHON = REPO / ".venv-loop" / "bin" / "python"


@dataclass
class LoopRun:
    returncode: int
    output: str
    run_dirs: list[Path]
    seconds: float


def _processes_naming(text: str) -> list[int]:
    """PIDs whose command line or environment names `text` (this user's processes)."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        for part in ("cmdline", "environ"):
            try:
                if text.encode() in Path(f"/proc/{pid}/{part}").read_bytes():
                    found.append(int(pid))
                    break
            except OSError:
                continue
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def cpu_loop(tmp_path):
    """`run(args, timeout_s, env=None)`: `python -m src.launch accelerator=cpu ARGS` under a deadline, in a fresh
    output dir (`out_name` under the test's tmp dir), with `env` added to the launcher's environment."""
    if not LOOP_PYTHON.is_file():
        pytest.fail(f"{LOOP_PYTHON} is missing: `make setup` creates the CPU loop env on a CPU machine")
    # Ray's sockets live under its temp dir: a short path (AF_UNIX paths hold 107 bytes), one per launch
    ray_tmp = Path(tempfile.mkdtemp(prefix="qerl-ray-", dir="/tmp"))
    before = leftovers.present()

    def run(args: list[str], timeout_s: float, env: dict | None = None, out_name: str = "out") -> LoopRun:
        out = tmp_path / out_name
        extra = env or {}
        env = {k: v for k, v in os.environ.items() if k not in LEAKY_ENV and not k.startswith(("SLURM_", "QE_SCORER_"))}
        env.update(RAY_TMPDIR=str(ray_tmp), PYTHONUNBUFFERED="1", **extra)
        argv = [sys.executable, "-m", "src.launch", "accelerator=cpu", f"paths.output_dir={out}", *args]
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the launcher unwinds as on Ctrl-C: training's group, the scorer
            try:
                output, _ = proc.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
            _kill(_processes_naming(str(ray_tmp)))
            pytest.fail(f"the CPU loop launch ran past its {timeout_s:.0f} s limit and was stopped; its output "
                        f"ended:\n{output[-6000:]}")
        return LoopRun(proc.returncode, output, sorted((out / "runs").glob("*")) if (out / "runs").is_dir() else [],
                       time.monotonic() - t0)

    yield run
    # nothing of the launches may outlive them: a process of their Ray session, or a file they left
    time.sleep(1)
    alive = _processes_naming(str(ray_tmp))
    _kill(alive)
    new_files = sorted(leftovers.present() - before)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert not alive, f"{len(alive)} processes of the CPU loop outlived their launch (pids {alive})"
    # another test's live vLLM may have made some meanwhile: only files no process holds count
    left = sorted(set(new_files) - leftovers.in_use())
    assert not left, f"the CPU loop left {left} behind (src/node/leftovers.py removes what it knows)"

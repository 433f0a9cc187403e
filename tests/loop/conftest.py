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
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from src.node import leftovers
from tests.helpers.env import LEAKY_ENV
from tests.helpers.memory_gate import CPU_LOOP_GB, said_wait

REPO = Path(__file__).resolve().parents[2]
LOOP_PYTHON = REPO / ".venv-loop" / "bin" / "python"
# how long a launch's processes may take to exit after the launcher returned
EXIT_GRACE_S = 20


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


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        return "(gone)"


def in_loop_env(code: str, env: dict | None = None) -> str:
    """The last line `python -c CODE` prints in the loop env (.venv-loop), run from the repo root."""
    proc = subprocess.run([str(LOOP_PYTHON), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()[-1]


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def cpu_loop(tmp_path, memory_gate, request):
    """`run(args, timeout_s, env=None, out_name="out", during=None, cwd=None)`: `python -m src.launch accelerator=cpu
    ARGS` under a deadline, in a fresh output dir (`out_name` under the test's tmp dir), with `env` added to the
    launcher's environment, from the repo root (or `cwd`, with the repo on PYTHONPATH). `during(out, running)`, if given, runs in a thread while the launch does (to act on
    it mid-run: a flag file, a killed scorer); `running()` says whether the launcher still runs; what it raises
    fails the test after the launch ended. Each launch holds its share of the suite's memory budget while it
    runs (tests/helpers/memory_gate.py)."""
    if not LOOP_PYTHON.is_file():
        pytest.fail(f"{LOOP_PYTHON} is missing: `make setup` creates the CPU loop env on a CPU machine")
    # Ray's sockets live under its temp dir: a short path (AF_UNIX paths hold 107 bytes), one per launch
    ray_tmp = Path(tempfile.mkdtemp(prefix="qerl-ray-", dir="/tmp"))
    # the launches' own temp dir (TMPDIR), where vLLM writes its process-group file store (vllm_dist_*): a store
    # that another test's loop (a Slurm job's) writes into /tmp meanwhile is not this test's to answer for. Its
    # file is never held open, so "held by a live process" cannot tell whose it is
    launch_tmp = Path(tempfile.mkdtemp(prefix="qerl-tmp-", dir="/tmp"))
    before = leftovers.present(tmp_dir=launch_tmp)

    def run(args: list[str], timeout_s: float, env: dict | None = None, out_name: str = "out",
            during=None, cwd: Path | None = None) -> LoopRun:
        with memory_gate.hold(CPU_LOOP_GB, request.node.nodeid, on_wait=said_wait):
            return launch(args, timeout_s, env, out_name, during, cwd)

    def launch(args, timeout_s, env, out_name, during, cwd) -> LoopRun:
        out = tmp_path / out_name
        extra = env or {}
        env = {k: v for k, v in os.environ.items() if k not in LEAKY_ENV and not k.startswith(("SLURM_", "QE_SCORER_"))}
        env.update(RAY_TMPDIR=str(ray_tmp), TMPDIR=str(launch_tmp), PYTHONUNBUFFERED="1", **extra)
        if cwd is not None:
            # a launch from outside the code: `src` is importable through PYTHONPATH alone, as on a node whose
            # jobs start in another dir (the launcher passes it on to verl's processes: src/node/environment.py)
            env["PYTHONPATH"] = str(REPO)
        argv = [sys.executable, "-m", "src.launch", "accelerator=cpu", f"paths.output_dir={out}", *args]
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd or REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        failures: list[BaseException] = []
        if during is not None:
            def act():
                try:
                    during(out, lambda: proc.poll() is None)
                except BaseException as exc:  # reported after the launch, with its output
                    failures.append(exc)
            actor = threading.Thread(target=act, name="during-the-launch", daemon=True)
            actor.start()
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
        if during is not None:
            actor.join(timeout=60)
        if failures:
            pytest.fail(f"acting on the launch failed: {failures[0]!r}; its output ended:\n{output[-6000:]}")
        return LoopRun(proc.returncode, output, sorted((out / "runs").glob("*")) if (out / "runs").is_dir() else [],
                       time.monotonic() - t0)

    yield run
    # nothing of the launches may outlive them: a process of their Ray session, or a file they left. A process
    # still exiting is not a leak: each gets up to EXIT_GRACE_S
    deadline = time.monotonic() + EXIT_GRACE_S
    while (alive := _processes_naming(str(ray_tmp))) and time.monotonic() < deadline:
        time.sleep(1)
    seen = {pid: _command_line(pid) for pid in alive}
    _kill(alive)
    new_files = sorted(leftovers.present(tmp_dir=launch_tmp) - before)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    shutil.rmtree(launch_tmp, ignore_errors=True)
    assert not alive, f"{len(alive)} processes of the CPU loop outlived their launch: {seen}"
    # another test's live vLLM may have made some meanwhile: only files no process holds count
    left = sorted(set(new_files) - leftovers.in_use())
    assert not left, f"the CPU loop left {left} behind (src/node/leftovers.py removes what it knows)"

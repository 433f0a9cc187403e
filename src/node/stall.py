"""The stall guard: a run with no training step ending within its bound (src/plan/stall.py) is stopped, with
every training process's Python stacks dumped into the run dir and one line naming the phase that stalled.

A hung run shows no error: a collective that never returns, a vLLM engine that died or stopped while its
caller waits, a weight sync stuck on a full /dev/shm. Without a bound it holds its GPUs until the job's time
limit. The launcher already reads every line of the training output (src/node/training.py run); the step-end
line the trainer prints (src/trainer/progress.py) is the heartbeat.

The stacks come from py-spy (shipped with Ray's `ray[default]`, in the train and CPU-loop envs): it reads a
process's stacks from outside, without its cooperation, which a process stuck in C code or stopped (SIGSTOP)
could not give through a Python signal handler such as faulthandler's. It needs ptrace rights over the
processes: root, or Yama's ptrace_scope 0 (a node with 1 lets only an ancestor trace): where it has none,
each dump file says so and the run still stops. The processes: the training command's process group and
session, and every process under it (Ray starts vLLM's engine outside the group), each with its command line
and state (`T` for a stopped one) in `processes.txt`; after the dump, the group is stopped and what is left of
them gets SIGKILL (a stopped process takes no other signal).

The phase is read from the TaskRunner's stack (the Ray actor that runs verl's PPOTrainer.fit, titled
`ray::...TaskRunner...` by Ray): the innermost of verl's step functions it is in.
"""
from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from src.plan.stall import StallPlan
from src.trainer.progress import parse_step_end

from .polling_watch import PollingWatch
from .process_group import stop_group
from .processes import kill_left, training_processes

DUMP_TIMEOUT_S = 20
STOP_GRACE_S = 30  # for the training command to end on SIGTERM before the group gets SIGKILL
# verl 0.9.1's functions in the TaskRunner's stack (verl/trainer/ppo/v1/trainer_base.py: PPOTrainer.fit, _step_once
# with its marked_timer phases, on_step_end's weight sync), each with the phase it is in. The first found wins:
# a stack holds fit's whole chain, so the inner phases come first, and the rollout's `sample` (the replay buffer
# waiting for the agent loop's trajectories, or on_sample_begin submitting them) last.
PHASES = (
    ("_save_checkpoint", "save"),
    ("update_weights", "weight sync"),
    ("_validate", "validation"),
    ("_update_actor", "update"),
    ("_update_critic", "update"),
    ("_compute_old_log_prob", "log-prob"),
    ("_compute_ref_log_prob", "log-prob"),
    ("_compute_values", "log-prob"),
    ("_compute_reward_colocate", "reward"),
    ("_compute_advantage", "advantage"),
    ("generate_sequences", "rollout"),
    ("on_sample_begin", "rollout"),
    ("sample", "rollout"),
)


class StallWatch(PollingWatch):
    """Watches the training output for step ends; past the bound, dumps the stacks, stops training
    (SIGTERM to its process group) and keeps the line `after_training` raises."""

    thread_name = "stall-guard"

    def __init__(self, plan: StallPlan, run_dir: Path, log: Callable[[str], None] = print, poll_s: float = 5.0):
        super().__init__(log, poll_s)
        self.plan, self.run_dir = plan, Path(run_dir)
        self._last_end: Optional[float] = None
        self._since = time.monotonic()
        self._longest: Optional[float] = None
        self._last_step: Optional[int] = None
        self._decided_at: Optional[float] = None  # time.time() when the run was found stalled

    def attach(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._proc, self._since = proc, time.monotonic()

    def stopped_before(self, path: Path) -> bool:
        """Whether this watch had found the run stalled before the file at `path` was last written. The trainer's
        guard leaves its stop reason (src/trainer/stop_reason.py) when a step's rollouts fail, and the stall's stop
        makes them fail: SIGTERM cuts the hung engine's requests, and a guard that counts them as lost groups writes
        its line after the stall's (the CI of 3109815). Such a line followed the fault; the stall is the fault."""
        with self._lock:
            decided_at = self._decided_at
        try:
            return decided_at is not None and path.stat().st_mtime >= decided_at
        except OSError:
            return False

    def observe(self, line: str) -> None:
        ended = parse_step_end(line)
        if ended is None:
            return
        now = time.monotonic()
        with self._lock:
            if self._last_end is not None:
                self._longest = max(self._longest or 0.0, now - self._last_end)
            self._last_end = self._since = now
            self._last_step = ended[0]

    def after_training(self) -> None:
        if self.line is not None:
            raise Stalled(self.line)

    def _watch(self) -> None:
        while not self._done.wait(self.poll_s):
            with self._lock:
                proc, waited, limit = self._proc, time.monotonic() - self._since, self.plan.limit(self._longest)
                step = self._last_step
            if proc is None or proc.poll() is not None or waited <= limit:
                continue
            self._stalled(proc, waited, limit, step)
            return

    def _stalled(self, proc: subprocess.Popen, waited: float, limit: float, step: Optional[int]) -> None:
        with self._lock:
            self._decided_at = time.time()
        folder = self.run_dir / f"stall-{dt.datetime.now():%Y%m%d-%H%M%S}"
        dumps = dump_stacks(proc.pid, folder)
        phase = phase_of(dumps)
        after = f"after step {step}" if step is not None else "before the first step ended"
        self.line = (f"stalled: no training step ended in {waited:.0f} s {after} (the bound: {limit:.0f} s, "
                     f"trainer.stall_*); {phase}; stacks of {len(dumps)} processes in {folder}; training stopped")
        self.log(self.line)
        # SIGTERM, then SIGKILL to what is left: a stopped or hung process ignores SIGTERM, and every process of
        # the group holds the training output open, which the runner reads until it ends
        stop_group(proc, STOP_GRACE_S)
        kill_left(dumps)


class Stalled(RuntimeError):
    """No training step ended within the stall bound; training was stopped. One line."""


def _is_python(pid: int) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("python")
    except OSError:
        return True  # not readable: let py-spy say why


def _py_spy() -> Optional[str]:
    near = Path(sys.executable).with_name("py-spy")
    return str(near) if near.is_file() else shutil.which("py-spy")


def dump_stacks(leader: int, folder: Path) -> dict[int, tuple[str, str, str]]:
    """Each training process's Python stacks into `folder` (`<pid>.txt`, and `processes.txt`: pid, state,
    command line). Returns {pid: (state, command line, stacks or py-spy's reason)}."""
    folder.mkdir(parents=True, exist_ok=True)
    spy = _py_spy()
    dumps = {}
    listing = []
    for pid, state, cmd in training_processes(leader):
        listing.append(f"{pid}\t{state}\t{cmd}")
        if not _is_python(pid):
            text = "not a Python process (Ray's gcs_server, raylet): no Python stacks"
        elif spy is None:
            text = "py-spy is not installed in this env: no stacks"
        else:
            try:
                done = subprocess.run([spy, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True,
                                      text=True, timeout=DUMP_TIMEOUT_S)
                text = done.stdout if done.returncode == 0 else f"py-spy could not read it: {done.stderr.strip()}"
            except subprocess.TimeoutExpired:
                text = f"py-spy did not answer within {DUMP_TIMEOUT_S} s"
        (folder / f"{pid}.txt").write_text(f"{cmd}\nstate {state}\n\n{text}\n", encoding="utf-8")
        dumps[pid] = (state, cmd, text)
    (folder / "processes.txt").write_text("pid\tstate\tcommand\n" + "\n".join(listing) + "\n", encoding="utf-8")
    return dumps


def phase_of(dumps: dict[int, tuple[str, str, str]]) -> str:
    """Which phase the TaskRunner's stack is in, in words; and the processes found stopped (state T)."""
    stopped = [f"{cmd.split()[0] if cmd else '?'} (pid {pid})" for pid, (state, cmd, _) in dumps.items() if state == "T"]
    runner = [text for _, cmd, text in dumps.values() if cmd.startswith("ray::") and "TaskRunner" in cmd]
    phase = next((name for fn, name in PHASES for text in runner if f"{fn} (" in text), None)
    words = f"the {phase} phase hung" if phase else "the phase could not be read from the TaskRunner's stack"
    return words + (f"; stopped: {', '.join(stopped)}" if stopped else "")

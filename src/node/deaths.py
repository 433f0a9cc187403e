"""The death watch: a training process that dies mid-run (killed: the OOM killer, a SIGKILL; crashed: a segfault in
a CUDA kernel) stops the run within seconds, with one line naming what died, instead of leaving the rest waiting for
it until the job's time limit.

What verl does about a death by itself, measured on the CPU loop (tests/slurm/test_real_loop_faults.py): an FSDP worker
(Ray actor `WorkerDict`) or verl's TaskRunner that dies fails the caller's `ray.get` with Ray's ActorDiedError, and
the training command exits within seconds, naming neither which process nor why. vLLM's engine process
(`VLLM::EngineCore`, a child of the `vLLMHttpServer` actor, not an actor itself) that dies leaves verl waiting in
the weight sync to it (`WorkerDict.actor_rollout_ref_update_weights`) with no error, for ever.

So the launcher watches, every POLL_S, the processes of the launch (src/node/processes.py) that training needs for
its whole length: verl's Ray actors (a `ray::` title naming a class: `ray::WorkerDict`, `ray::TaskRunner.run`; not a
pool worker `ray::IDLE`, Ray's own agents, or a function task `ray::get_master_addr_port`, which ends by design) and
vLLM's processes (`VLLM::` titles); not a process forked from one of them, which carries its parent's title until it
execs (a dataloader worker forked from the TaskRunner, which ends by design). One that is gone while training runs is
a death. The training command gets GRACE_S to end by itself (verl's own error, the ActorDiedError above, then stays in
the log); after that it is stopped. Either way the run ends with the line naming what died, its pid, the method a Ray
actor was last seen in, the step after which it died and the checkpoint a relaunch resumes from.

Not a death: processes ending after training ran its last step, after the launcher began to stop training (a
service's failure, Ctrl-C, the stall guard, a time limit's or preemption's save: `quiet`), or after the trainer
stopped for a reason no death made (a save that failed on a full disk, DAPO's bound: src/trainer/stop_reason.py;
verl's unwinding then ends the FSDP workers, and a loaded machine sees that before the training command exits).
Only this node's processes are seen: on a multi-node run, a death on another node ends the run through Ray (an
actor's death) or the stall guard (a hang).
"""
from __future__ import annotations

import re
import subprocess
import time
from typing import Callable, Optional

from src.trainer.checkpoints import tracked_step
from src.trainer.progress import parse_progress

from .polling_watch import PollingWatch
from .process_group import stop_group
from .processes import forked_from_its_title, running, training_processes

POLL_S = 2.0
GRACE_S = 15.0   # for verl's own error (an actor's death reaches the trainer in ~7 s on the CPU loop) before the stop
STOP_GRACE_S = 30.0
# Ray's processes that are not verl's: pool workers waiting for a task, Ray's per-node agents
NOT_TRAINING = ("IDLE", "DashboardAgent", "RuntimeEnvAgent")
# what each of verl's and vLLM's processes is, in words (the class in the process title; any other is named by it)
ROLES = {
    "WorkerDict": "an FSDP worker",
    "EngineCore": "the vLLM engine",
    "vLLMHttpServer": "vLLM's server",
    "AgentLoopWorker": "an agent-loop worker",
    "AgentLoopWorkerTQ": "an agent-loop worker",
    "RewardLoopWorker": "a reward worker",
    "TransferQueueController": "the transfer queue",
    "SimpleStorageUnit": "the transfer queue's storage",
    "GlobalRequestLoadBalancer": "the rollout's load balancer",
}
# ended by verl itself whenever its TaskRunner's run raises (verl/trainer/main_ppo.py TaskRunnerV1.run: `finally:
# tq.close()`, which kills the transfer queue's controller and storage actors: transfer_queue/interface.py close),
# as after the trainer's guard stopped the run: such an end does not explain the stop, it follows it
ENDED_BY_UNWINDING = ("TransferQueueController", "SimpleStorageUnit")
# Ray's report of a dead actor, in the traceback verl's driver prints (ray/exceptions.py ActorDiedError.__init__): a
# `class_name: ...` line, then `actor_id: ...`, then `pid: N`. When processes end together (the driver's teardown after
# the error), the pid Ray names is the one that died first, which a scan every POLL_S cannot tell.
_RAY_CLASS = re.compile(r"^\s*class_name: ")
_RAY_PID = re.compile(r"^\s*pid: (\d+)\s*$")
_TITLE = re.compile(r"^(?:ray::(?P<actor>[A-Z]\w*)(?:\.(?P<method>\w+))?|VLLM::(?P<vllm>\w+))")


def vital(title: str) -> Optional[tuple[str, Optional[str]]]:
    """(class, method or None) of a process training needs for its whole length, from its title; None for any
    other process."""
    m = _TITLE.match(title)
    if m is None:
        return None
    name = m.group("actor") or m.group("vllm")
    return None if name in NOT_TRAINING else (name, m.group("method"))


def _unwinding(title: str) -> bool:
    return (vital(title) or ("",))[0] in ENDED_BY_UNWINDING


def _follows_a_stop(title: str) -> bool:
    """A process whose end follows the trainer's own stop: what verl's unwinding ends, and the TaskRunner itself,
    which ran to write the stop's reason and then ends with verl's driver (a save that failed: the CPU loop saw the
    TaskRunner's end before the training command's)."""
    name = (vital(title) or ("",))[0]
    return name in ENDED_BY_UNWINDING or _is_task_runner(name)


def _is_task_runner(name: str) -> bool:
    return name.endswith("TaskRunner")  # verl's TaskRunner, or a subclass of it (ours: TimeLimitTaskRunner)


def role(name: str) -> str:
    if _is_task_runner(name):
        return "verl's TaskRunner"
    return ROLES.get(name, name)


class Died(RuntimeError):
    """A training process died while training ran; training ended or was stopped. One line."""


class DeathWatch(PollingWatch):
    """Watches the launch's processes; past GRACE_S after a death, stops training (SIGTERM to its process group,
    then SIGKILL) and keeps the line `after_training` raises. `quiet()` (set by src/node/training.py run) says
    when processes end by design."""

    thread_name = "death-watch"

    def __init__(self, checkpoint_dir: str, log: Callable[[str], None] = print, poll_s: float = POLL_S,
                 grace_s: float = GRACE_S, quiet: Callable[[], bool] = lambda: False):
        super().__init__(log, poll_s)
        self.checkpoint_dir, self.grace_s, self.quiet = checkpoint_dir, grace_s, quiet
        self._seen: dict[int, str] = {}   # pid -> its last title, of each vital process seen alive
        self._titles: dict[int, str] = {}  # the same, never forgotten: the title of a pid Ray reports dead
        self._reported: Optional[int] = None  # the pid of the actor Ray reported dead in the training output
        self._class_lines_left = 0
        # pid, last title, when (monotonic) and when (epoch seconds, the clock of the step-end lines) a scan found it gone
        self._death: Optional[tuple[int, str, float, float]] = None
        self._ended: list[tuple[float, int]] = []  # (when, step) of each step-end line read
        self._all_ran = False

    def observe(self, line: str) -> None:
        if _RAY_CLASS.match(line):
            self._class_lines_left = 3
        elif self._class_lines_left:
            self._class_lines_left -= 1
            m = _RAY_PID.match(line)
            if m and self._reported is None:
                with self._lock:
                    self._reported = int(m.group(1))
        ended = parse_progress(line)
        if ended is None:
            return
        with self._lock:
            self._ended.append((ended.epoch, ended.step))
            # after the last step, verl shuts its processes down: their ends are not deaths
            self._all_ran = ended.total is not None and ended.step >= ended.total

    def after_training(self, then: Optional[str] = None) -> None:
        """Raise Died if a death stopped training, or if training failed after one (its line then names it).
        `then`: the trainer's own one-line reason for stopping, which a death may have made (the guard's lost groups
        when vLLM's engine is gone and the step's requests fail at once); a death that such a stop explains (verl's
        unwinding after it, ENDED_BY_UNWINDING, or the TaskRunner's own end) is then not raised: the reason is the
        run's line."""
        with self._lock:
            death, line, proc = self._death, self.line, self._proc
        if line is not None:
            raise Died(line)
        if then is not None and death is not None and _follows_a_stop(death[1]):
            return
        death = self._judged(death)
        code = proc.poll() if proc is not None else None
        if death is not None and code not in (0, None):
            why = f" ({then.split('; ')[0]})" if then else ""
            raise Died(self._line(death, f"training then exited with code {code}{why}"))

    def _judged(self, death):
        """The death to name: Ray's word on which actor died (the pid `observe` read) wins over the scan's guess (or
        is a death no scan saw before training ended), unless it names a process verl's unwinding ended (the transfer
        queue's, whose callers Ray then tells of its death) and the scan saw one that unwinding does not explain. The
        scan sees processes that end together in one look, and the pid Ray names may reach the output after it: an
        FSDP worker killed while saving, the save's error, the driver's exit and its TaskRunner's end within one
        POLL_S (the CI of 222276c named the TaskRunner)."""
        with self._lock:
            reported = self._reported
        if reported is None or reported not in self._titles or (death is not None and reported == death[0]) or (
                death is not None and _unwinding(self._titles[reported]) and not _unwinding(death[1])):
            return death
        return (reported, self._titles[reported], death[2] if death else time.monotonic(),
                death[3] if death else time.time())

    def _armed(self) -> bool:
        return not (self._all_ran or self.quiet())

    def _watch(self) -> None:
        while not self._done.wait(self.poll_s):
            with self._lock:
                proc, death = self._proc, self._death
            if proc is None or proc.poll() is not None:
                continue
            if death is None:
                self._scan(proc.pid)
            elif time.monotonic() - death[2] >= self.grace_s and self._armed():
                self._stop(proc, death)
                return

    def _scan(self, leader: int) -> None:
        # an exiting process (its command line empty) is gone: its title stays the last one a scan saw
        alive = running(training_processes(leader))
        for pid, cmd in alive.items():
            if pid not in self._seen and vital(cmd) is not None and not forked_from_its_title(pid, cmd, alive.get):
                self._seen[pid] = cmd
            elif pid in self._seen:
                self._seen[pid] = cmd
        self._titles.update(self._seen)
        gone = [pid for pid, title in self._seen.items() if alive.get(pid, "").split(".")[0] != title.split(".")[0]]
        if gone and self._armed():
            # several gone in one scan: one that verl's unwinding does not end (the cause) first, then Ray's word: after
            # a guard's stop, verl's tq.close() kills the transfer queue and Ray reports it dead to the queue's callers,
            # maybe before this scan, while the engine whose death made the stop is gone too (a loaded machine, CI)
            with self._lock:
                reported = self._reported
            gone.sort(key=lambda pid: (_unwinding(self._seen[pid]), pid != reported))
            with self._lock:
                first = gone[0]
                self._death = (first, self._seen[first], time.monotonic(), time.time())
            pid, title, _, _ = self._death
            self.log(f"death watch: {title} (pid {pid}) is gone while training runs; training has "
                     f"{self.grace_s:.0f} s to end before it is stopped")
        for pid in gone:
            del self._seen[pid]

    def _stop(self, proc: subprocess.Popen, death) -> None:
        # a grace later, Ray's word has had time to reach the output: it names the stop's death too
        line = self._line(self._judged(death),
                          f"training did not end within {self.grace_s:.0f} s of it and was stopped")
        with self._lock:
            self.line = line
        self.log(line)
        stop_group(proc, STOP_GRACE_S)

    def _step_before(self, when: float) -> Optional[int]:
        """The last step that ended before `when`, by the step-end lines' own times: a line may be read after the
        scan that found the death (the trainer printed it, then the worker was killed, and the output reader ran
        late on a loaded machine: a fast tier's line said "before the first step ended" after step 3)."""
        with self._lock:
            steps = [step for at, step in self._ended if at <= when]
        return max(steps) if steps else None

    def _line(self, death, what_then: str) -> str:
        pid, title, _, found_at = death
        step = self._step_before(found_at)
        name, method = vital(title) or (title, None)
        # the method of its last title the watch saw (every POLL_S): what it was doing then, maybe not when it died
        doing = f", last seen in {method}" if method else ""
        after = f"after step {step}" if step is not None else "before the first step ended"
        saved = tracked_step(self.checkpoint_dir)
        resume = (f"a relaunch resumes from step {saved} in {self.checkpoint_dir}" if saved is not None
                  else "no checkpoint was saved yet: a relaunch starts over")
        return (f"died: {role(name)} ({title.split()[0]}, pid {pid}{doing}) died {after} (killed or crashed: "
                f"the OOM killer, a segfault); {what_then}; {resume}")

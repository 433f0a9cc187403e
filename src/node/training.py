"""Runs verl for a planned run: a subprocess whose output goes to a log file, every line, and to the
terminal through a `Console` (src/node/console.py: progress, warnings once, errors; or every line).

`services` is the seam for processes that must live exactly as long as training (the QE
scoring service): each is a context manager entered before verl starts and exited on every
path out (normal end, error, Ctrl-C, SIGTERM), and may add environment variables for verl.
A service that fails for good while training runs (the scorer died again after its restart)
calls a `TrainingStop`: training is terminated and `run` raises `ServiceFailure` with its reason.
The trainer itself stops a run it must not continue (lost groups, unbounded DAPO resampling;
src/trainer/guard.py) by writing one line to $QE_TRAINING_STOP_FILE and exiting: `run` raises
`ServiceFailure` with that line too, so the user sees the reason, not verl's traceback.
A Slurm time limit (`TimeLimitWatch`, protocol in src/trainer/time_limit.py) does not kill training: the
trainer saves the step in progress and ends, then the job is requeued and resumes from that step.
"""
from __future__ import annotations

import codecs
import contextlib
import datetime as dt
import io
import os
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import BinaryIO, Callable, ContextManager, Iterable, Iterator, Optional

from src.config import override_grammar
from src.plan.time_limit import REQUEUE_S
from src.record.redact import scrub
from src.trainer import checkpoints, stop_reason, time_limit

from .console import Console
from .leftovers import Leftovers
from .deaths import DeathWatch, Died  # noqa: F401  (Died: what run raises)
from .stall import Stalled, StallWatch  # noqa: F401  (Stalled: what run raises)
from .process_group import stop_group
from .startup import StartupClock

# verl's main_ppo with a trainer that saves the step in progress on a time limit (src/trainer/entry.py)
VERL_ENTRY = ["-m", "src.trainer"]
# the longest the runner waits for training's next output line before it looks at signals again
OUTPUT_POLL_S = 0.5
# after a save-on-signal deadline: for training to end on SIGTERM before what is left gets SIGKILL
DEADLINE_GRACE_S = 5.0


def verl_command(python: str, snapshot_dir: Path, run_dir: Path) -> list[str]:
    """The exact command: verl's own entry point on the snapshot's verl config. An argv list (no
    shell); --config-path is argparse's, but hydra.run.dir is a Hydra override, parsed by Hydra's
    grammar: a checkout path with a space or a non-ASCII character must be quoted for it."""
    return [python, *VERL_ENTRY, f"--config-path={snapshot_dir}", "--config-name=verl_config",
            override_grammar.override("hydra.run.dir", f"{run_dir}/verl"), "hydra.output_subdir=null"]


class SigtermAsInterrupt:
    """Slurm sends SIGTERM before a kill: unwind like Ctrl-C so services stop and verl is reaped."""

    def __enter__(self):
        self._old = signal.signal(signal.SIGTERM, self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc):
        signal.signal(signal.SIGTERM, self._old)
        return False


class ServiceFailure(RuntimeError):
    """A service beside training failed for good; training was stopped. One line."""


class TimeLimitReached(ServiceFailure):
    """The time-limit signal came outside a submitit job (nothing to requeue it). One line."""


def time_limit_signal() -> signal.Signals:
    """The signal Slurm sends before the time limit: submitit's (SUBMITIT_PREEMPT_SIGNAL, default
    USR2; submitit/core/job_environment.py, JobEnvironment._usr_sig)."""
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))


class TimeLimitSignalBlocked:
    """Block the time-limit signal in this thread while children start: Slurm sends it to every
    process of the job step (all of them under proctrack/linuxproc and cgroup, whatever their
    session), and its default action would kill verl, its Ray workers and the scorer at once.
    A blocked mask is inherited through fork and exec, so every process started inside keeps it."""

    def __init__(self, signum: Optional[signal.Signals] = None):
        self.signum = signum or time_limit_signal()

    def __enter__(self):
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, {self.signum})
        return self

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        return False


def clear_time_limit_flags(checkpoint_dir: str | Path) -> None:
    """Every launch, before its training starts (src/pipeline/run.py): a request in the checkpoint dir
    was left by an earlier attempt (src/trainer/time_limit.py, "Whose request") and is not this one's."""
    time_limit.clear(checkpoint_dir)


# an unreadable checkpoint tracker: the launch stops in one line, before it writes anything
CheckpointError = checkpoints.CheckpointError


def discard_partial_checkpoints(checkpoint_dir: str | Path) -> list[str]:
    """Every launch, before its training starts (src/pipeline/run.py): a global_step_N/ newer than the tracker's
    step is a save a kill cut short (src/trainer/checkpoints.py): removed. A line per removed dir."""
    return checkpoints.discard_partial(checkpoint_dir)


class SavesOnSignal:
    """What the time limit's watch and the preemption's share: on a signal, the trainer is asked through the
    checkpoint dir to save the step in progress and end (src/trainer/time_limit.py), and a deadline stops
    training that has not ended by then; after training, what was saved. `word` starts each line."""

    word = ""

    def __init__(self, checkpoint_dir: str, log: Callable[[str], None] = print):
        self.checkpoint_dir, self.log = checkpoint_dir, log
        self.received_at: Optional[float] = None
        self.stopped_at_deadline = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._signalled = threading.Event()
        self._ended = False
        self._proc: Optional[subprocess.Popen] = None
        self._timer: Optional[threading.Timer] = None

    def attach(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._proc = proc

    def training_ended(self) -> None:
        """Training exited on its own: a signal from now on has no step to save."""
        with self._lock:
            self._ended = True

    @property
    def acting(self) -> bool:
        """A signal came: training saves and ends, or is stopped at the deadline."""
        return self.received_at is not None

    def _first_signal(self) -> bool:
        """The first signal while training runs: the time it came (True); a later one, or one after the end: False."""
        with self._lock:
            if self.received_at is not None or self._ended:
                return False
            self.received_at = time.time()
            return True

    def _ask_to_save(self, signal_name: str, left: float, said: str) -> None:
        time_limit.request(self.checkpoint_dir, signal_name, left)
        self.log(f"{self.word}: {signal_name} received; training saves the step in progress and ends "
                 f"(stopped in {max(left, 0):.0f}s otherwise{said})")
        self._timer = threading.Timer(max(left, 0.0), self._deadline)
        self._timer.daemon = True
        self._timer.start()

    def _start_watching(self, wait: Callable[[], None], name: str) -> None:
        time_limit.clear(self.checkpoint_dir)
        self._thread = threading.Thread(target=wait, name=name, daemon=True)

    def _stop_watching(self) -> None:
        self._done.set()
        self._thread.join()
        if self._timer is not None:
            self._timer.cancel()

    def _deadline(self) -> None:
        with self._lock:
            proc = self._proc if self._proc is not None and self._proc.poll() is None else None
            if proc is not None:
                self.stopped_at_deadline = True
        if proc is not None:
            # SIGTERM, then SIGKILL to what is left: a hung process would hold the training output open
            stop_group(proc, DEADLINE_GRACE_S)

    def _outcome(self, advice: str) -> Optional[str]:
        """After training: None if it ran all its steps anyway (said in the log), else the line saying what
        was saved (or that the run resumes from its last checkpoint, with `advice`)."""
        if self._finished_step() is not None:
            return None
        result = time_limit.saved(self.checkpoint_dir)
        if result is not None:
            how = "saved now" if result.get("saved_now") else "saved by the periodic save"
            return f"{self.word}: step {result['step']} {how} in {self.checkpoint_dir}"
        why = "was stopped at its deadline" if self.stopped_at_deadline else "ended"
        return (f"{self.word}: training {why} before the end of a step; the run resumes from the last checkpoint "
                f"in {self.checkpoint_dir} ({advice})")

    def _finished_step(self) -> Optional[int]:
        """The last step of a training that ran all its steps (the trainer's save on the signal says so, or its
        mark after the last step), else None."""
        result = time_limit.saved(self.checkpoint_dir)
        return result["step"] if result is not None and result.get("finished") else (
            time_limit.finished(self.checkpoint_dir))

    def _finished_line(self) -> str:
        return f"{self.word}: training finished at step {self._finished_step()} before it"


class TimeLimitWatch(TimeLimitSignalBlocked, SavesOnSignal):
    """Slurm's time-limit signal while training runs (src/trainer/time_limit.py, steps 2 and 4).

    The signal is blocked (see the base class) and taken by a thread with sigtimedwait. A thread
    started earlier without the block may receive it instead: Python's C handler then only marks it
    for the main thread, which sits in a blocking read of training's output and would run the
    handler at the next line (maybe never); so the watcher also reads Python's wakeup fd, which that
    C handler writes from whichever thread it runs on (signal.set_wakeup_fd). On the signal:
    the flag for the trainer, and a deadline after which training is stopped. `after_training`
    then hands the signal to the handler that was there before, submitit's, which requeues the job
    (scontrol requeue, bounded by max_num_timeout) and exits the job process.
    """

    word = "time limit"

    def __init__(self, checkpoint_dir: str, stop_by_s: float, signum: Optional[signal.Signals] = None,
                 log: Callable[[str], None] = print):
        TimeLimitSignalBlocked.__init__(self, signum)
        SavesOnSignal.__init__(self, checkpoint_dir, log)
        self.stop_by_s = stop_by_s

    def __enter__(self):
        self._start_watching(self._wait, "time-limit-signal")
        super().__enter__()
        self._previous = signal.getsignal(self.signum)
        self._wakeup = None
        if threading.current_thread() is threading.main_thread():
            # only an event: the handler may run inside a write of the main thread (EINTR), where
            # writing the log again would be a reentrant call; the watcher thread does the work
            signal.signal(self.signum, lambda signum, frame: self._signalled.set())
            self._wakeup = socket.socketpair()
            self._wakeup[1].setblocking(False)
            self._old_wakeup_fd = signal.set_wakeup_fd(self._wakeup[1].fileno(), warn_on_full_buffer=False)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop_watching()
        if self._wakeup is not None:
            signal.set_wakeup_fd(self._old_wakeup_fd)
            for sock in self._wakeup:
                sock.close()
        if threading.current_thread() is threading.main_thread():
            signal.signal(self.signum, self._previous)
        return super().__exit__(*exc)

    def _wait(self) -> None:
        while not self._done.is_set():
            if self._signalled.is_set() or signal.sigtimedwait({self.signum}, 0) is not None:
                self._received()
            if self._wakeup is None:
                time.sleep(0.2)
            elif select.select([self._wakeup[0]], [], [], 0.2)[0]:
                # one byte per signal Python caught (SIGCONT and SIGTERM too)
                if self.signum in self._wakeup[0].recv(64):
                    self._received()

    def _received(self) -> None:
        if not self._first_signal():
            return
        # Slurm may signal up to a minute early (sbatch(1), --signal): the job's end decides when
        # it is known; the plan's stop_by_s is the time the signal itself promises
        end = _slurm_end_time()
        self._ask_to_save(self.signum.name, self.stop_by_s if end is None else end - REQUEUE_S - self.received_at, "")

    def after_training(self) -> None:
        """After training ended, before the services stop: requeue if the signal came (may not return)."""
        if self.received_at is None:
            return
        line = self._outcome(f"raise slurm.signal_delay_s to one step + one save + {REQUEUE_S}s")
        if line is None:
            self.log(self._finished_line() + "; nothing to requeue")
            return
        previous = self._previous
        if callable(previous):
            self.log(line + "; requeueing the job")
            previous(self.signum, None)  # submitit: scontrol requeue, then sys.exit
            return
        raise TimeLimitReached(line + "; run the same command again to continue from it")


class Preempted(ServiceFailure):
    """SIGTERM reached the launcher outside Slurm; what was saved, and how to continue. One line."""


class PreemptionWatch(SavesOnSignal):
    """A preemption is a time limit: SIGTERM to the launcher outside Slurm (what a preempting scheduler sends
    a job's main process, or `kill <pid>`) has the trainer save the step in progress through the time
    limit's flag (src/trainer/time_limit.py), then the run ends with one line, resumable by running the same
    command again. Training that has not ended `grace_s` after the signal (trainer.preempt_grace_s: within the
    scheduler's own grace before its SIGKILL) is stopped, and the run resumes from its last checkpoint. A
    second SIGTERM, or Ctrl-C, stops at once, as before.

    Not under Slurm: there a SIGTERM (scancel, a preemption, the time limit's end) reaches every process of
    the job step, verl's and vLLM's too, so no step can be saved after it; SigtermAsInterrupt stops the run
    and the time limit's own signal, sent before, is the one that saves (TimeLimitWatch)."""

    word = "preempted"

    def __init__(self, checkpoint_dir: str, grace_s: float, log: Callable[[str], None] = print):
        super().__init__(checkpoint_dir, log)
        self.grace_s = grace_s

    def __enter__(self):
        self._start_watching(self._wait, "preemption-signal")
        self._old = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop_watching()
        signal.signal(signal.SIGTERM, self._old)
        return False

    def _on_sigterm(self, signum, frame):
        # in the main thread; only an event, the watcher thread does the work (see TimeLimitWatch)
        if self._signalled.is_set():
            raise KeyboardInterrupt(f"signal {signum}")
        self._signalled.set()

    def _wait(self) -> None:
        while not self._done.is_set():
            if self._signalled.wait(0.2):
                if self._first_signal():
                    self._ask_to_save("SIGTERM", self.grace_s, "; a second SIGTERM stops it now")
                return

    def after_training(self) -> None:
        """After training ended, before the services stop: raise Preempted if the signal came."""
        if self.received_at is None:
            return
        line = self._outcome("raise trainer.preempt_grace_s to one step + one save, within the scheduler's grace")
        if line is None:
            self.log(self._finished_line())
            return
        raise Preempted(line + "; run the same command again to continue from it")


def _slurm_end_time() -> Optional[float]:
    """The job's end (epoch seconds) as Slurm has it now, or None outside Slurm."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%e"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        return dt.datetime.fromisoformat(out.splitlines()[0]).timestamp()
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


class TrainingStop:
    """Called (from any thread) with a reason by a service that can no longer serve training: the
    reason is kept and the training process group gets SIGTERM (at once, or as soon as it starts)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self.reason: str | None = None

    def __call__(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            self._terminate()

    def attach(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._proc = proc
            if self.reason is not None:
                self._terminate()

    def _terminate(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)


def _stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    # verl starts Ray and its workers in the child's process group
    stop_group(proc, grace_s)


def run(command: list[str], env: dict, log_path: Path,
        services: Iterable[Callable[[dict], ContextManager[dict]]] = (), stop: TrainingStop | None = None,
        watch: TimeLimitWatch | None = None, clock: StartupClock | None = None,
        console: Console | None = None, preempt: PreemptionWatch | None = None,
        stall: StallWatch | None = None, death: DeathWatch | None = None) -> int:
    """Start services, run `command` streaming to `log_path` (every line) and `console` (the terminal;
    None: every line too), stop everything. Raises
    ServiceFailure when a service called `stop` (training was terminated for it). With `watch`, a
    time-limit signal makes training save and end, then the job is requeued (may not return); with `preempt`,
    a SIGTERM does the same and `run` raises Preempted (else SIGTERM stops training at once); with `stall`, a run
    whose steps stop ending is stopped with its stacks dumped and `run` raises Stalled (src/node/stall.py); with
    `death`, a training process that dies stops the run within seconds and `run` raises Died (src/node/deaths.py). `clock`
    marks the training command's start and the start-up phases its output shows (src/node/startup.py)."""
    stop = stop or TrainingStop()
    clock = clock or StartupClock()
    console = console or Console()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # beside the log, per launch: a requeued job must not read the last attempt's reason
    stop_file = log_path.parent / "training_stop.txt"
    with contextlib.suppress(FileNotFoundError):
        stop_file.unlink()
    env[stop_reason.STOP_FILE_ENV] = str(stop_file)
    with open(log_path, "a", encoding="utf-8") as log:
        def say(line: str) -> None:
            print(line, flush=True)
            log.write(line + "\n")
            log.flush()

        # the stall guard first: a run it stopped is reported as stalled, whatever signal came meanwhile
        watches = [w for w in (stall, death, watch, preempt) if w is not None]
        for w in watches:
            w.log = say
        if death is not None:
            # processes end by design once the launcher or another watch stops training, or once the trainer
            # stopped for a reason no death made (verl's unwinding then ends its workers: src/trainer/stop_reason.py)
            death.quiet = lambda: (stop.reason is not None or any(w.acting for w in watches if w is not death)
                                   or stop_reason.rules_out_a_death(stop_file))
        # the watch first: the services' processes (scorer, Ray head) inherit its signal block
        with (preempt or SigtermAsInterrupt()), (watch or contextlib.nullcontext()), \
                (stall or contextlib.nullcontext()), (death or contextlib.nullcontext()), contextlib.ExitStack() as stack:
            for service in services:
                env.update(stack.enter_context(service(env)))
            leftovers = Leftovers()
            proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            clock.mark("training_started")
            console.begin(log_path, env)
            stop.attach(proc)
            for w in watches:
                w.attach(proc)
            code = None
            try:
                for line in output_lines(proc.stdout):
                    seen = len(clock.phases)
                    clock.observe(line)
                    for w in (stall, death):
                        if w is not None:
                            w.observe(line)
                    for phase in list(clock.phases)[seen:]:
                        console.phase(phase, clock.phases[phase])
                    line = scrub(line, env)
                    log.write(line)
                    log.flush()
                    console.line(line)
                code = proc.wait()
            finally:
                # training ended (or the launcher is stopping it: Ctrl-C): what happens to its processes from
                # now on is by design
                for w in watches:
                    w.training_ended()
                # a run stopped at the time-limit (or preemption) deadline has little time left before the kill
                _stop(proc, 5.0 if any(w.stopped_at_deadline for w in watches) else 30.0)
                removed = leftovers.remove()
                if removed:
                    log.write(f"removed {len(removed)} files verl/vLLM left behind (src/node/leftovers.py): "
                              f"{', '.join(removed)}\n")
                console.end(code)
            stopped_itself = stop_reason.read(stop_file) if code != 0 else None
            if stopped_itself is not None and stall is not None and stall.stopped_before(stop_file):
                # the trainer stopped in the unwinding of the stall's stop (its cut requests counted as lost groups):
                # the run is reported as stalled (its exit code, a Slurm job's requeue), the trainer's line logged
                log.write(f"after the stall guard's stop, the trainer stopped too: {stopped_itself}\n")
                stopped_itself = None
            if stop.reason is None and stopped_itself is not None and death is not None:
                # the trainer's guard stops on a step's failed rollouts, which a dead process makes (vLLM's engine:
                # requests sent after its death fail at once): then the death is the fault, named as such, and a
                # Slurm job is requeued for it
                death.after_training(then=stopped_itself)
            reason = stop.reason or stopped_itself
            if reason is not None:
                log.write(f"training stopped: {reason}\n")
                raise ServiceFailure(reason)
            for w in watches:
                # before the services stop: the requeue must reach Slurm before its kill at the
                # limit; stopping them is then cut short at worst
                w.after_training()
        return code


def output_lines(stream: BinaryIO, poll_s: float = OUTPUT_POLL_S) -> Iterator[str]:
    """A child's output as text lines, as `for line in` a text-mode pipe gives them (UTF-8, undecodable
    bytes replaced, \\r\\n and \\r read as \\n), without ever waiting in a read for longer than `poll_s`.

    Why: Python runs a signal's handler (Ctrl-C's KeyboardInterrupt, SIGTERM's) in the main thread,
    and only once that thread runs Python code again. The kernel may hand a process-directed signal
    to any thread that does not block it, here the scorer's watcher or the time-limit thread; the
    main thread, blocked reading a trainer that prints nothing for minutes (a long rollout, a hung
    worker), would then not see the signal until the trainer's next line: Ctrl-C would seem ignored.
    Waiting in select() with a timeout returns to Python code every `poll_s` at the latest.
    """
    fd = stream.fileno()
    decoder = io.IncrementalNewlineDecoder(codecs.getincrementaldecoder("utf-8")(errors="replace"), translate=True)
    pending = ""
    while True:
        if not select.select([fd], [], [], poll_s)[0]:
            continue  # back in Python code: a signal handler that is due runs here
        chunk = os.read(fd, 65536)
        pending += decoder.decode(chunk, final=not chunk)
        *lines, pending = pending.split("\n")
        for line in lines:
            yield line + "\n"
        if not chunk:
            break
    if pending:
        yield pending


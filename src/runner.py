"""Runs verl for a planned run: a subprocess whose output goes to the console and a log file.

`services` is the seam for processes that must live exactly as long as training (the QE
scoring service): each is a context manager entered before verl starts and exited on every
path out (normal end, error, Ctrl-C, SIGTERM), and may add environment variables for verl.
A service that fails for good while training runs (the scorer died again after its restart)
calls a `TrainingStop`: training is terminated and `run` raises `ServiceFailure` with its reason.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, ContextManager, Iterable

from src.process_group import stop_group
from src.redact import scrub

VERL_ENTRY = ["-m", "verl.trainer.main_ppo"]


def verl_command(python: str, snapshot_dir: Path, run_dir: Path) -> list[str]:
    """The exact command: verl's own entry point on the snapshot's verl config."""
    return [python, *VERL_ENTRY, f"--config-path={snapshot_dir}", "--config-name=verl_config",
            f"hydra.run.dir={run_dir}/verl", "hydra.output_subdir=null"]


def run_environment(base: dict, plan_env: dict) -> dict:
    env = dict(base)
    env.update(plan_env)
    return env


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
        services: Iterable[Callable[[dict], ContextManager[dict]]] = (), stop: TrainingStop | None = None) -> int:
    """Start services, run `command` streaming to stdout and `log_path`, stop everything. Raises
    ServiceFailure when a service called `stop` (training was terminated for it)."""
    stop = stop or TrainingStop()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with SigtermAsInterrupt(), contextlib.ExitStack() as stack:
        for service in services:
            env.update(stack.enter_context(service(env)))
        with open(log_path, "a", encoding="utf-8") as log:
            proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace", bufsize=1, start_new_session=True)
            stop.attach(proc)
            try:
                for line in proc.stdout:
                    line = scrub(line, env)
                    sys.stdout.write(line)
                    log.write(line)
                    log.flush()
                code = proc.wait()
            finally:
                _stop(proc)
            if stop.reason is not None:
                log.write(f"training stopped: {stop.reason}\n")
                raise ServiceFailure(stop.reason)
            return code

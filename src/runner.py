"""Runs verl for a planned run: a subprocess whose output goes to the console and a log file.

`services` is the seam for processes that must live exactly as long as training (the QE
scoring service): each is a context manager entered before verl starts and exited on every
path out (normal end, error, Ctrl-C, SIGTERM), and may add environment variables for verl.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, ContextManager, Iterable

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


def _stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    # verl starts Ray and its workers in the child's process group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run(command: list[str], env: dict, log_path: Path,
        services: Iterable[Callable[[dict], ContextManager[dict]]] = ()) -> int:
    """Start services, run `command` streaming to stdout and `log_path`, stop everything."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with SigtermAsInterrupt(), contextlib.ExitStack() as stack:
        for service in services:
            env.update(stack.enter_context(service(env)))
        with open(log_path, "a", encoding="utf-8") as log:
            proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace", bufsize=1, start_new_session=True)
            try:
                for line in proc.stdout:
                    line = scrub(line, env)
                    sys.stdout.write(line)
                    log.write(line)
                    log.flush()
                return proc.wait()
            finally:
                _stop(proc)

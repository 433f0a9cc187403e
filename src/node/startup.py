"""Where a launch's start-up goes: the seconds from the command to each phase, in `<run dir>/timings.json`.

A short run spends most of its time before its first step (Ray, verl's worker groups, vLLM), and a
researcher pays it on every job, requeue and smoke. Each launch of the training command appends one entry
with its phases; `benches/startup.py` takes their medians and the GPU checks read the same file.

The launcher marks its own phases (plan, scorer, training command). verl's are read from the training
output as it streams past: verl 0.9.1's TaskRunner and trainer log one line at each step of its set-up
(verl/trainer/ppo/v1/trainer_base.py PPOTrainer._setup, logger.info) with the time of the process that
logged it (`INFO:YYYY-MM-DD HH:MM:SS,mmm:`, verl/utils/logger configure_verl_logging; Ray's lines too); that time is
used where the line carries one, the time the line arrived otherwise. The first step's end is the
trainer's own line (src/trainer/progress.py), printed whatever loggers the run has.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from pathlib import Path
from typing import Optional

from src.trainer.progress import parse_step_end

TIMINGS = "timings.json"  # in the run dir: {"launches": [{"started": ..., "phases": {phase: seconds}}, ...]}

# (phase, a fragment of the line that marks it), in the order a launch meets them. The launcher's own
# phases (LAUNCHER_PHASES) are marked by its code, not read from lines.
VERL_MARKERS = (
    ("ray_up", "Started a local Ray instance"),
    ("ray_up", "Connected to Ray cluster"),
    ("dataloader_ready", "train and validate dataloader initialized"),
    ("worker_group_created", "create worker group"),
    ("critic_ready", "critic model engine initialized"),
    ("actor_ready", "actor and ref model engine initialized"),
    ("reward_workers_ready", "reward loop manager initialized"),
    # LLMServerManager.create returns once every vLLM server answers; the checkpoint engine comes right after
    ("vllm_serving", "checkpoint engine manager initialized"),
    ("ready_to_fit", "all initialize finished, ready to fit"),
)
# the QE scorer loads beside training (src/node/scorer_service.py): its health comes anywhere after the start
LAUNCHER_PHASES = ("plan", "training_started", "scorer_healthy")
# every phase, in the order a single-node launch meets them (critic_ready only with a critic; the scorer's
# health anywhere after training_started)
PHASES = LAUNCHER_PHASES + tuple(dict.fromkeys(p for p, _ in VERL_MARKERS)) + ("first_step_end",)
# verl's `INFO:2026-11-28 01:07:14,759:...`, Ray's `2026-11-28 01:07:00,322\tINFO worker.py...`
_LOG_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})[:\s]")


def process_start(pid: int | str = "self") -> float:
    """Epoch seconds at which process `pid` started (its /proc stat start time after boot), so the
    Python interpreter's own start-up counts; the time now where /proc cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of proc(5); fields[0] is field 3
        # the seconds since boot now (/proc/uptime, 10 ms), not /proc/stat's btime, which is whole seconds
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - started_after_boot)
    except (OSError, ValueError, IndexError):
        return time.time()


class StartupClock:
    """One launch's phases, in seconds since `t0` (the launcher process's start); each phase once, the first
    time it is seen. `write_to` a run dir appends the launch there and rewrites it as phases arrive, so a launch
    that dies half-way still shows how far it came."""

    def __init__(self, t0: Optional[float] = None):
        self.t0 = process_start() if t0 is None else t0
        self.phases: dict[str, float] = {}
        self._path: Optional[Path] = None
        self._index: Optional[int] = None

    def mark(self, phase: str, at: Optional[float] = None) -> None:
        if phase in self.phases:
            return
        self.phases[phase] = round((time.time() if at is None else at) - self.t0, 2)
        self._flush()

    def observe(self, line: str) -> None:
        """Mark the phase a line of the training output shows, if any."""
        ended = parse_step_end(line)
        if ended is not None:
            self.mark("first_step_end", ended[1])
            return
        for phase, fragment in VERL_MARKERS:
            if fragment in line and phase not in self.phases:
                self.mark(phase, _line_time(line))
                return

    def write_to(self, run_dir: Path) -> None:
        """From now on, keep this launch's entry in <run_dir>/timings.json (after the earlier launches')."""
        self._path = Path(run_dir) / TIMINGS
        self._index = len(read(run_dir))
        self._flush()

    def _flush(self) -> None:
        if self._path is None:
            return
        launches = read(self._path.parent)
        entry = {"started": dt.datetime.fromtimestamp(self.t0).isoformat(timespec="seconds"),
                 "phases": dict(self.phases)}
        # this launch's entry in place: a later launch's (the smoke's resume) stays after it
        launches[self._index:self._index + 1] = [entry]
        tmp = self._path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"launches": launches}, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self._path)


def read(run_dir: Path) -> list[dict]:
    """The launches recorded in <run_dir>/timings.json ([] when there is none)."""
    try:
        return json.loads((Path(run_dir) / TIMINGS).read_text(encoding="utf-8"))["launches"]
    except (OSError, ValueError, KeyError):
        return []


def _line_time(line: str) -> Optional[float]:
    """The epoch time verl's or Ray's logger wrote into a line (local time), None if it wrote none."""
    m = _LOG_TIME.search(line)
    if not m:
        return None
    return dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def relaunch(run_dir: Path) -> StartupClock:
    """The clock of a second launch within the same launcher process (the smoke's resume): from now."""
    clock = StartupClock(t0=time.time())
    clock.write_to(run_dir)
    return clock


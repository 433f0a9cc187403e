"""What the terminal shows of a training run; train.log (src/node/training.py) keeps every line.

verl's output is mostly its Ray workers' and vLLM's logs: a two-run local sweep of 8-step learn_tiny runs
printed 4,229 lines, 180 of them one vLLM warning (`Attempted to load weight ... float32 into parameter
with dtype bfloat16`, once per weight) and none saying which step of how many a run was on. The terminal
gets instead:
- where the full log is, at the start and at the end;
- start-up phases as the clock (src/node/startup.py) reads them from the output;
- one progress line per step, from the trainer's step-end line (src/trainer/progress.py): the run, step
  N/M, the trained reward (`critic/score/mean` of that step's row in verl's metrics file, the file logger
  every run has: $VERL_FILE_LOGGER_PATH), the step's time and an ETA; on a tty one line redrawn with \\r;
- each distinct warning once (keyed by its message with names, numbers, paths and Ray's prefix taken out);
- errors and tracebacks in full, and lines of the time-limit protocol;
- when training fails, the last lines of the log it did not show.
`verbose=true` (src/config/schema.py) echoes every line as before.
"""
from __future__ import annotations

import collections
import json
import re
import sys
import time
from pathlib import Path
from typing import Optional, TextIO

from src.trainer.progress import parse_progress

TRAINED_METRIC = "critic/score/mean"  # verl/trainer/ppo/metric_utils.py compute_data_metrics
TAIL_LINES = 20  # of a failed run, the log's last lines the terminal did not show

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Ray's prefix on a worker's line: `(TaskRunner pid=12)`, `(WorkerDict pid=3, ip=10.0.0.1)`
# (vLLM's own process prefix may follow: `(vLLMHttpServer pid=5) (MainProcess pid=5) WARNING ...`)
_RAY_PREFIX = re.compile(r"^(?:\s*\([^()]*pid=\d+[^()]*\)\s?)+")
# Ray's dedup suffix, with its advice: `[repeated 2x across cluster] (Ray deduplicates logs by default. ...)`
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
# a log level (`WARNING 11-28 ...`, `WARNING:name:`, `\tWARN x.py`), not the word in a value ('NCCL_DEBUG': 'WARN')
_WARNING = re.compile(r"(?:^|[\s:\]\[])WARN(?:ING)?(?=[\s:\]\[]|$)|\b\w*Warning:")
_ERROR = re.compile(r"\b(?:ERROR|CRITICAL|FATAL)\b|^error:|\b\w+(?:Error|Exception):")
# lines that are never noise: the time-limit protocol (src/trainer/entry.py, src/node/training.py) and what
# happened to a checkpoint (src/trainer/checkpoints.py)
_ALWAYS = ("time limit:", "checkpoint:")
# what makes two warnings differ only in their details: timestamps, quoted values, bracketed ids, paths,
# dotted names (a weight's, a module's, torch.float32), hex and other numbers
_DETAILS = [re.compile(p) for p in (
    r"\d{2,4}[-/]\d\d[-/]\d\d[ T]\d\d:\d\d:\d\d[,.\d]*", r"\d\d-\d\d \d\d:\d\d:\d\d",
    r"'[^']*'", r'"[^"]*"', r"\[[^\]]*\]", r"(?:/[\w.@+-]+)+/?", r"\b\w+(?:\.\w+)+\b", r"0x[0-9a-fA-F]+",
    r"\d+(?:\.\d+)?")]


def body(line: str) -> str:
    """A line without colours, Ray's worker prefix and its `[repeated Nx]` suffix."""
    return _RAY_REPEATED.sub("", _RAY_PREFIX.sub("", _ANSI.sub("", line.rstrip("\n"))))


def warning_key(line: str) -> str:
    """Two warnings with one key are shown once: the message with its details taken out."""
    text = body(line)
    for pattern in _DETAILS:
        text = pattern.sub("*", text)
    return " ".join(text.split()).lower()


def _duration(seconds: float) -> str:
    seconds = max(int(round(seconds)), 0)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Console:
    """Every line of the training output passes through `line`; `begin` and `end` frame a launch.
    This one echoes everything (verbose=true, and the old behaviour for callers that pass none)."""

    def __init__(self, stream: Optional[TextIO] = None):
        self.stream = stream or sys.stdout

    def begin(self, log_path: Path, env: dict) -> None:
        pass

    def line(self, line: str) -> None:
        self.stream.write(line)
        self.stream.flush()

    def phase(self, name: str, seconds: float) -> None:
        pass

    def end(self, code: Optional[int]) -> None:
        pass


class ProgressConsole(Console):
    """The terminal of a run (module docstring): progress, start-up phases, warnings once, errors."""

    def __init__(self, run_name: str, stream: Optional[TextIO] = None, tty: Optional[bool] = None):
        super().__init__(stream)
        self.run_name = run_name
        self.tty = self.stream.isatty() if tty is None else tty
        self.log_path: Optional[Path] = None
        self.metrics_path: Optional[Path] = None
        self._metrics_read = 0       # bytes of the metrics file already read
        self._partial = ""           # a row the file logger has not finished writing
        self._rewards: dict[int, float] = {}
        self._seen_warnings: set[str] = set()
        self._hidden = 0             # warnings not shown again
        self._in_traceback = False
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._pending = None         # a step ended whose reward row may not be written yet: (StepEnd, seconds)
        self._last_end: Optional[float] = None
        self._step_seconds: list[float] = []
        self._bar_open = False       # a tty's progress line not yet ended by a newline

    # -- framing -------------------------------------------------------------------------------------
    def begin(self, log_path: Path, env: dict) -> None:
        self.log_path = Path(log_path)
        metrics = env.get("VERL_FILE_LOGGER_PATH")
        self.metrics_path = Path(metrics) if metrics else None
        self._last_end = time.time()
        self._say(f"[{self.run_name}] training started; full log (every worker's output): {self.log_path}")

    def end(self, code: Optional[int]) -> None:
        self._flush_pending()
        self._close_bar()
        if code not in (0, None) and self._tail:
            self._say(f"[{self.run_name}] the log's last {len(self._tail)} lines not shown above:")
            for line in self._tail:
                self.stream.write("  " + line if line.endswith("\n") else "  " + line + "\n")
        hidden = f"; {self._hidden} repeated warning(s) not shown again" if self._hidden else ""
        how = "ended" if code == 0 else f"exited with code {code}" if code is not None else "stopped"
        self._say(f"[{self.run_name}] training {how}{hidden}; full log: {self.log_path}")

    def phase(self, name: str, seconds: float) -> None:
        if name == "first_step_end":  # the progress line says it
            return
        if name == "ready_to_fit":
            self._last_end = time.time()  # the first step's time starts here, not with Ray's start
        self._say(f"[{self.run_name}] start-up: {name.replace('_', ' ')} ({seconds:.0f}s since the launch)")

    # -- each line of the output ---------------------------------------------------------------------
    def line(self, line: str) -> None:
        text = body(line)
        ended = parse_progress(text)
        if ended is not None:
            self._flush_pending()
            seconds = max(ended.epoch - self._last_end, 0.0) if self._last_end is not None else None
            self._last_end = ended.epoch
            if seconds is not None:
                self._step_seconds.append(seconds)
            self._pending = (ended, seconds)
            self._try_pending()
            return
        if self._pending is not None:
            self._try_pending()
        stripped = text.strip()
        if self._in_traceback or stripped.endswith("Traceback (most recent call last):"):
            self._traceback(line, text)
        elif _ERROR.search(text) or stripped.startswith(_ALWAYS):
            self._show(line)
        elif _WARNING.search(text):
            key = warning_key(line)
            if key in self._seen_warnings:
                self._hidden += 1
            else:
                self._seen_warnings.add(key)
                self._show(line)
        elif stripped:
            self._tail.append(line)

    def _traceback(self, line: str, text: str) -> None:
        """A traceback in full: from its first line to the exception's (the first unindented line after)."""
        if not self._in_traceback:
            self._in_traceback = True
            self._show(line)
            return
        self._show(line)
        stripped = text.strip()
        if text[:1] not in (" ", "\t") and stripped and not stripped.startswith(
                ("Traceback", "During handling", "The above exception")):
            self._in_traceback = False

    # -- the progress line ---------------------------------------------------------------------------
    def _reward(self, step: int) -> Optional[float]:
        """The trained reward of `step`, from the new rows of the metrics file (verl writes each step's row
        after the step-end line, once validation and the metrics are done)."""
        if step in self._rewards or self.metrics_path is None:
            return self._rewards.get(step)
        try:
            with open(self.metrics_path, "rb") as f:
                f.seek(self._metrics_read)
                chunk = f.read()
        except OSError:
            return None
        self._metrics_read += len(chunk)
        *rows, self._partial = (self._partial + chunk.decode("utf-8", errors="replace")).split("\n")
        for raw in rows:
            try:
                row = json.loads(raw)
            except ValueError:
                continue
            value = (row.get("data") or {}).get(TRAINED_METRIC) if isinstance(row, dict) else None
            if isinstance(row, dict) and isinstance(row.get("step"), int) and isinstance(value, (int, float)):
                self._rewards[row["step"]] = float(value)
        return self._rewards.get(step)

    def _try_pending(self) -> None:
        if self._pending is not None and self._reward(self._pending[0].step) is not None:
            self._flush_pending()

    def _flush_pending(self) -> None:
        """Print the pending step's line (with its reward where its row is there by now)."""
        if self._pending is None:
            return
        ended, seconds = self._pending
        self._pending = None
        reward = self._reward(ended.step)
        of = f"/{ended.total}" if ended.total else ""
        parts = [f"[{self.run_name}] step {ended.step}{of}",
                 f"trained reward {reward:.4g}" if reward is not None else "trained reward -",
                 f"step {seconds:.1f}s" if seconds is not None else "step -"]
        if ended.total and self._step_seconds:
            # the first step carries the compile and cache warm-up: left out of the average once others exist
            recent = self._step_seconds[1:] or self._step_seconds
            parts.append(f"ETA {_duration(sum(recent) / len(recent) * max(ended.total - ended.step, 0))}")
        text = "  ".join(parts)
        if self.tty and ended.total:
            width = 20
            done = min(width, width * ended.step // ended.total)
            self.stream.write(f"\r\x1b[2K[{'#' * done}{'.' * (width - done)}] {text}")
            self.stream.flush()
            self._bar_open = True
        else:
            self._say(text)

    # -- writing -------------------------------------------------------------------------------------
    def _close_bar(self) -> None:
        if self._bar_open:
            self.stream.write("\n")
            self._bar_open = False

    def _say(self, text: str) -> None:
        self._close_bar()
        self.stream.write(text + "\n")
        self.stream.flush()

    def _show(self, line: str) -> None:
        self._close_bar()
        self.stream.write(line if line.endswith("\n") else line + "\n")
        self.stream.flush()


def for_run(run_name: str, verbose: bool, stream: Optional[TextIO] = None) -> Console:
    """The terminal of one launch of training: everything (verbose=true) or the progress view."""
    return Console(stream) if verbose else ProgressConsole(run_name, stream)

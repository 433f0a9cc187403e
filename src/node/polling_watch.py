"""What the launcher's polling watches of a running training command share (the stall guard, src/node/stall.py;
the death watch, src/node/deaths.py): a thread that looks every `poll_s` while the runner (src/node/training.py
run) is in the watch's `with`, the training command it is attached to, and the one line it keeps when it stopped
training, which `after_training` raises."""
from __future__ import annotations

import subprocess
import threading
from typing import Callable, Optional


class PollingWatch:
    thread_name = "watch"

    def __init__(self, log: Callable[[str], None] = print, poll_s: float = 5.0):
        self.log, self.poll_s = log, poll_s
        self.line: Optional[str] = None
        self.stopped_at_deadline = False  # never: these watches stop training themselves, in full
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._proc: Optional[subprocess.Popen] = None

    def __enter__(self):
        self._thread = threading.Thread(target=self._watch, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        return False

    def attach(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._proc = proc

    def training_ended(self) -> None:
        self._done.set()

    @property
    def acting(self) -> bool:
        """The watch stopped training (another watch then takes its processes' ends as by design)."""
        return self.line is not None

    def _watch(self) -> None:
        raise NotImplementedError

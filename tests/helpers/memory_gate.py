"""No more real training loops at once than this machine's memory holds, across pytest-xdist workers.

A launch of the CPU loop (Ray, verl's workers, vLLM's CPU engine, the scorer: a dozen processes that each
import torch) holds about 6.5 GB; the two-node test about 10 GB. `make test` runs three workers on two cores
and 24 GB, and the loop group, the Slurm group and the rest run side by side: a Slurm sweep's job beside a
loop launch beside the Ray tests fits, two sweep jobs beside them did not (Ray's memory monitor killed a
sweep job's workers at 95% of the node, and the killed workers' shared memory was then counted against the
loop test running beside them). So every test that starts real training holds its share of a memory
budget for as long as that training runs, and waits, first come first served, while the budget is spent.

The ledger is one JSON file beside the workers' temp dirs (all workers of one pytest run share it), locked
with flock; a holder whose process died is dropped, so a crashed worker never blocks the others. A test
alone always runs, even past the budget (there is nothing to wait for).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from pathlib import Path

from src.tiny_models.atomic import pid_alive
from tests.helpers.run_temp import run_temp_dir

# one launch's peak above the machine's idle use (GB): measured with /proc/meminfo (MemTotal - MemAvailable)
# every 2 s through a whole launch, docs/testing.md "Memory"
CPU_LOOP_GB = 6.5
TWO_NODE_LOOP_GB = 10.0
# what the rest of the suite (the other workers' tests, the Slurm daemons) holds beside the gated launches,
# and Ray's own limit: its memory monitor kills workers above 95% of the node
REST_OF_SUITE_GB = 5.0
RAY_KILL_FRACTION = 0.95
POLL_S = 2.0


def budget_gb() -> float:
    total_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                    if line.startswith("MemTotal:"))
    return total_kb / 2**20 * RAY_KILL_FRACTION - REST_OF_SUITE_GB


class MemoryGate:
    """`with gate.hold(gb, what):` runs its body once `gb` fits the budget beside what others hold."""

    def __init__(self, ledger: Path, budget: float | None = None):
        self.ledger = ledger
        self.budget = budget_gb() if budget is None else budget

    @contextlib.contextmanager
    def _locked(self):
        self.ledger.parent.mkdir(parents=True, exist_ok=True)
        with open(self.ledger.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                entries = json.loads(self.ledger.read_text()) if self.ledger.is_file() else []
                entries = [e for e in entries if pid_alive(e["pid"])]
                yield entries
                tmp = self.ledger.with_suffix(".tmp")
                tmp.write_text(json.dumps(entries))
                tmp.replace(self.ledger)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _try(self, me: str) -> bool:
        with self._locked() as entries:
            mine = next(e for e in entries if e["id"] == me)
            held = sum(e["gb"] for e in entries if e["holding"])
            first_waiting = next(e for e in entries if not e["holding"])
            if first_waiting is mine and (held == 0 or held + mine["gb"] <= self.budget):
                mine["holding"] = True
                return True
            return False

    def holders(self) -> list[dict]:
        with self._locked() as entries:
            return [dict(e) for e in entries]

    @contextlib.contextmanager
    def hold(self, gb: float, what: str, on_wait=None):
        """Wait in line until `gb` fits, hold it for the body, give it back after (also on failure).
        `on_wait(seconds, holders)` is called once, when the wait is over, if there was one."""
        me = uuid.uuid4().hex
        with self._locked() as entries:
            entries.append({"id": me, "pid": os.getpid(), "gb": gb, "what": what, "holding": False})
        t0 = time.monotonic()
        try:
            waited_for = None
            while not self._try(me):
                if waited_for is None:
                    waited_for = [e["what"] for e in self.holders() if e["holding"]]
                time.sleep(POLL_S)
            if waited_for is not None and on_wait is not None:
                on_wait(time.monotonic() - t0, waited_for)
            yield
        finally:
            with self._locked() as entries:
                entries[:] = [e for e in entries if e["id"] != me]


def said_wait(seconds: float, holders: list[str]) -> None:
    """An `on_wait` for tests: the wait goes into the test's captured output (and CI's log on a failure)."""
    print(f"waited {seconds:.0f} s for the memory held by {holders} (tests/helpers/memory_gate.py)", flush=True)


def ledger_for(tmp_path_factory) -> Path:
    """One ledger for all workers of this pytest run: xdist workers' temp dirs share a parent."""
    return run_temp_dir(tmp_path_factory) / "memory-gate.json"

"""Dynamic batching: one bounded queue for all clients, batches by token budget.

Every item becomes a Job with its own future; requests await their jobs' futures, so each
result goes back to exactly the request that asked for it. Jobs wait in lanes keyed by
(model, uses reference) because comet builds one input layout per batch. One scheduler task
picks the lane whose head has waited longest and sends a batch to the single inference thread
when that head has waited `max_wait_ms`, or the lane already fills the budget, or the lane holds
as many jobs as the largest of its recent batches: with C synchronous clients (verl's reward
workers) the C answered clients come back, and waiting out `max_wait_ms` for a C+1st that is
not coming would leave the model idle every cycle. While a batch runs, new jobs accumulate, so
under load batches form back to back without waiting.

Batch choice: the lane's jobs sorted by cost; the window around the oldest job grows towards
the neighbour closest in cost (less padding) while `n * max_cost <= batch_tokens` and
`n <= max_batch_items`. The oldest job is always in the batch, so nothing starves.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .metrics import Metrics
from .runner import ModelRunner
from .schema import Item, ItemOptions, Measure

log = logging.getLogger("scorer")

Lane = Tuple[str, bool]


class QueueFull(Exception):
    pass


class ShuttingDown(Exception):
    pass


class BatchFailed(Exception):
    pass


@dataclass(eq=False)
class Job:
    item: Item
    options: ItemOptions
    measure: Measure
    future: asyncio.Future
    enqueued: float = field(default_factory=time.monotonic)


def pick_window(costs: Sequence[int], oldest: int, budget: int, max_items: int) -> List[int]:
    """Indices (into `costs`) of the batch around job `oldest`; see the module docstring."""
    order = sorted(range(len(costs)), key=lambda i: (costs[i], i))
    pos = order.index(oldest)
    lo = hi = pos
    top = costs[oldest]
    while hi - lo + 1 < max_items:
        n = hi - lo + 2
        left = order[lo - 1] if lo > 0 else None
        right = order[hi + 1] if hi + 1 < len(order) else None
        fits_left = left is not None and n * top <= budget
        fits_right = right is not None and n * costs[right] <= budget
        if fits_left and fits_right:
            take_left = top - costs[left] <= costs[right] - top
        elif fits_left or fits_right:
            take_left = fits_left
        else:
            break
        if take_left:
            lo -= 1
        else:
            hi += 1
            top = costs[right]
    return [order[k] for k in range(lo, hi + 1)]


class Batcher:
    def __init__(self, runners: Dict[str, ModelRunner], executor: Executor, metrics: Metrics,
                 batch_tokens: int, max_batch_items: int, max_wait_ms: float,
                 max_queue: int) -> None:
        self.runners = runners
        self.executor = executor
        self.metrics = metrics
        self.batch_tokens = batch_tokens
        self.max_batch_items = max_batch_items
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.lanes: Dict[Lane, List[Job]] = {}
        self.lane_cost: Dict[Lane, int] = {}
        self.recent_sizes: Dict[Lane, deque] = {}
        self.queued = 0
        self.closing = False
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: Optional[asyncio.Task] = None
        self._current: List[Job] = []

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="scorer-batcher")

    @property
    def depth(self) -> int:
        return self.queued

    def submit(self, model: str, items: Sequence[Item], options: Sequence[ItemOptions],
               measures: Sequence[Measure]) -> List[asyncio.Future]:
        """All-or-nothing: either every item is queued or QueueFull/ShuttingDown is raised."""
        if self.closing:
            raise ShuttingDown()
        if self.queued + len(items) > self.max_queue:
            raise QueueFull()
        loop = asyncio.get_running_loop()
        runner = self.runners[model]
        futures = []
        now = time.monotonic()
        for it, opt, ms in zip(items, options, measures):
            lane = (model, runner.accepts_ref and it.ref is not None)
            fut = loop.create_future()
            fut.add_done_callback(self._on_cancel)
            self.lanes.setdefault(lane, []).append(Job(it, opt, ms, fut, now))
            self.lane_cost[lane] = self.lane_cost.get(lane, 0) + ms.cost
            futures.append(fut)
        self.queued += len(items)
        self._idle.clear()
        self._wakeup.set()
        return futures

    def _on_cancel(self, fut: asyncio.Future) -> None:
        if fut.cancelled():
            self._wakeup.set()  # let the scheduler drop it now, not after its current wait

    def _drop_cancelled(self) -> None:
        """Requests whose client went away cancel their futures; their jobs are not run."""
        for lane, jobs in self.lanes.items():
            if any(j.future.done() for j in jobs):
                keep = [j for j in jobs if not j.future.done()]
                self.queued -= len(jobs) - len(keep)
                self.lane_cost[lane] = sum(j.measure.cost for j in keep)
                jobs[:] = keep

    def _oldest_lane(self) -> Optional[Lane]:
        best, best_t = None, None
        for lane, jobs in self.lanes.items():
            if jobs and (best_t is None or jobs[0].enqueued < best_t):
                best, best_t = lane, jobs[0].enqueued
        return best

    def _take(self, lane: Lane) -> List[Job]:
        jobs = self.lanes[lane]
        picked = set(pick_window([j.measure.cost for j in jobs], 0, self.batch_tokens,
                                 self.max_batch_items))
        batch = [j for k, j in enumerate(jobs) if k in picked]
        jobs[:] = [j for k, j in enumerate(jobs) if k not in picked]
        self.lane_cost[lane] -= sum(j.measure.cost for j in batch)
        self.queued -= len(batch)
        return batch

    async def _loop(self) -> None:
        while True:
            self._drop_cancelled()
            lane = self._oldest_lane()
            if lane is None:
                self._idle.set()
                if self.closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            jobs = self.lanes[lane]
            waited = time.monotonic() - jobs[0].enqueued
            full = (len(jobs) >= self.max_batch_items or self.lane_cost[lane] >= self.batch_tokens)
            recent = self.recent_sizes.get(lane)
            expected_all = bool(recent) and len(jobs) >= max(recent)
            if not (self.closing or full or expected_all or waited >= self.max_wait):
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), self.max_wait - waited)
                except asyncio.TimeoutError:
                    pass
                continue
            batch = self._take(lane)
            self.recent_sizes.setdefault(lane, deque(maxlen=16)).append(len(batch))
            await self._run(lane, batch)

    async def _run(self, lane: Lane, batch: List[Job]) -> None:
        runner = self.runners[lane[0]]
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        self._current = batch
        try:
            results = await loop.run_in_executor(
                self.executor, runner.run, [j.item for j in batch], [j.options for j in batch],
                [j.measure for j in batch])
        except Exception as e:  # one bad batch must not stop the service
            log.exception("batch of %d items for model %s failed", len(batch), lane[0])
            for j in batch:
                if not j.future.done():
                    j.future.set_exception(BatchFailed(f"{type(e).__name__}: {e}"))
            self.metrics.record_batch_failure(lane[0], len(batch))
            return
        finally:
            self._current = []
        done = time.monotonic()
        for j, r in zip(batch, results):
            if not j.future.done():
                j.future.set_result(r)
        self.metrics.record_batch(lane[0], len(batch), done - started,
                                  [started - j.enqueued for j in batch],
                                  [j.measure.cost for j in batch])

    async def drain(self, timeout: float) -> None:
        """Stops taking work, finishes what is queued (up to `timeout`), fails the rest."""
        self.closing = True
        self._wakeup.set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning("drain timeout: failing %d queued items", self.queued)
        stranded = [j for jobs in self.lanes.values() for j in jobs]
        for jobs in self.lanes.values():
            jobs.clear()
        self.queued = 0
        if self._task is not None:
            stranded += self._current  # a batch still computing when the timeout hit
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        for j in stranded:
            if not j.future.done():
                j.future.set_exception(ShuttingDown())

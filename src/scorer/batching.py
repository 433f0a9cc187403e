"""Dynamic batching: one bounded queue for all clients, batches by token budget.

Every item becomes a Job with its own future; requests await their jobs' futures, so each
result goes back to exactly the request that asked for it. Jobs wait in lanes keyed by
(model, uses reference) because comet builds one input layout per batch. One scheduler task
picks the lane whose head has waited longest and, when a compute slot is free, cuts a batch
when that head has waited `max_wait_ms`, or the lane already fills the budget, or the lane holds
as many jobs as the largest of its recent batches: with C synchronous clients (verl's reward
workers) the C answered clients come back, and waiting out `max_wait_ms` for a C+1st that is
not coming would leave the model idle every cycle. While batches run, new jobs accumulate, so
under load batches form back to back without waiting.

Compute slots: `concurrency` batches compute at once (2 inference threads on a CPU, 1 on a
GPU), and with a preparation thread (GPU) one more batch is tokenised meanwhile, so it is ready
when the slot frees. When several slots are idle, a short queue is split among them.

Batch choice: the lane's jobs sorted by cost; the window around the oldest job grows towards
the neighbour closest in cost (less padding) while `n * max_cost <= batch_tokens` and
`n <= max_batch_items`. The oldest job is always in the batch, so nothing starves. Under
verl's load (hundreds of trajectories queued at the end of a rollout) this is length
bucketing: padding p50 3% in benches/RESULTS.md "Scorer".
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
from .backends.interface import Runner
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
    """The queue, the scheduler and the batch pipeline.

    `executor` runs the forward passes: `concurrency` batches at most compute at once (its
    worker count). With `prep_executor` (one thread), batches are tokenised and collated there
    (`runner.prepare`) while earlier ones compute (`runner.compute`), and one batch more than
    `concurrency` may be in flight, so the next batch is ready when a compute slot frees.
    Without it, `runner.run` does both on the compute thread."""

    def __init__(self, runners: Dict[str, Runner], executor: Executor, metrics: Metrics,
                 batch_tokens: int, max_batch_items: int, max_wait_ms: float,
                 max_queue: int, concurrency: int = 1,
                 prep_executor: Optional[Executor] = None) -> None:
        self.runners = runners
        self.executor = executor
        self.prep_executor = prep_executor
        self.metrics = metrics
        self.batch_tokens = batch_tokens
        self.max_batch_items = max_batch_items
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.concurrency = max(1, concurrency)
        self.capacity = self.concurrency + (1 if prep_executor is not None else 0)
        self.lanes: Dict[Lane, List[Job]] = {}
        self.lane_cost: Dict[Lane, int] = {}
        self.recent_sizes: Dict[Lane, deque] = {}
        self.queued = 0
        self.closing = False
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: Optional[asyncio.Task] = None
        self._inflight: Dict[asyncio.Task, List[Job]] = {}

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

    def _item_cap(self, lane: Lane) -> int:
        """With several compute slots idle, a short queue is split among them (8 synchronous
        clients on a 2-thread CPU service: two batches of 4 on one core each, not one batch of
        8 while the other thread idles); under load the token budget decides."""
        idle = self.concurrency - len(self._inflight)
        if idle <= 1:
            return self.max_batch_items
        return max(1, min(self.max_batch_items, -(-len(self.lanes[lane]) // idle)))

    def _take(self, lane: Lane) -> List[Job]:
        jobs = self.lanes[lane]
        picked = set(pick_window([j.measure.cost for j in jobs], 0, self.batch_tokens,
                                 self._item_cap(lane)))
        batch = [j for k, j in enumerate(jobs) if k in picked]
        jobs[:] = [j for k, j in enumerate(jobs) if k not in picked]
        self.lane_cost[lane] -= sum(j.measure.cost for j in batch)
        self.queued -= len(batch)
        return batch

    async def _sleep(self, timeout: Optional[float] = None) -> None:
        """Until something changes (jobs arrive or are cancelled, a batch finishes) or timeout."""
        self._wakeup.clear()
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._drop_cancelled()
            lane = self._oldest_lane()
            if lane is None or len(self._inflight) >= self.capacity:
                if lane is None and not self._inflight:
                    self._idle.set()
                    if self.closing:
                        return
                await self._sleep()
                continue
            jobs = self.lanes[lane]
            waited = time.monotonic() - jobs[0].enqueued
            full = (len(jobs) >= self.max_batch_items or self.lane_cost[lane] >= self.batch_tokens)
            recent = self.recent_sizes.get(lane)
            expected_all = bool(recent) and len(jobs) >= max(recent)
            if not (self.closing or full or expected_all or waited >= self.max_wait):
                await self._sleep(self.max_wait - waited)
                continue
            batch = self._take(lane)
            self.recent_sizes.setdefault(lane, deque(maxlen=16)).append(len(batch))
            task = loop.create_task(self._run(lane, batch))
            self._inflight[task] = batch

    async def _run(self, lane: Lane, batch: List[Job]) -> None:
        runner = self.runners[lane[0]]
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        items, options, measures = ([j.item for j in batch], [j.options for j in batch],
                                    [j.measure for j in batch])
        try:
            if self.prep_executor is None:
                results = await loop.run_in_executor(self.executor, runner.run, items, options,
                                                     measures)
            else:
                prepared = await loop.run_in_executor(self.prep_executor, runner.prepare, items,
                                                      options, measures)
                results = await loop.run_in_executor(self.executor, runner.compute, prepared)
        except Exception as e:  # one bad batch must not stop the service
            log.exception("batch of %d items for model %s failed", len(batch), lane[0])
            for j in batch:
                if not j.future.done():
                    j.future.set_exception(BatchFailed(f"{type(e).__name__}: {e}"))
            self.metrics.record_batch_failure(lane[0], len(batch))
            return
        finally:
            self._inflight.pop(asyncio.current_task(), None)
            self._wakeup.set()
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
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        for task, batch in list(self._inflight.items()):  # batches still computing at the timeout
            stranded += batch
            task.cancel()
        for j in stranded:
            if not j.future.done():
                j.future.set_exception(ShuttingDown())

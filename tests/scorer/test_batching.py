"""Batch formation and the scheduler, with a plain echo runner standing in for a model (the
real-model behaviour is covered by test_service and test_concurrency)."""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from src.scorer.batching import Batcher, BatchFailed, QueueFull, ShuttingDown, pick_window
from src.scorer.metrics import Metrics
from src.scorer.schema import Item, ItemOptions, Measure


def test_window_grows_around_the_oldest_towards_similar_costs():
    costs = [50, 10, 52, 11, 49, 200, 51]
    got = pick_window(costs, oldest=0, budget=4 * 52, max_items=8)
    assert sorted(got) == [0, 2, 4, 6]  # the four ~50-token items, not the short or long ones
    assert 0 in got


def test_window_respects_budget_and_item_cap():
    costs = [10] * 20
    assert len(pick_window(costs, 0, budget=75, max_items=100)) == 7
    assert len(pick_window(costs, 0, budget=10_000, max_items=5)) == 5


def test_oldest_goes_alone_when_it_exceeds_the_budget():
    assert pick_window([900, 10, 10], 0, budget=100, max_items=8) == [0]


class EchoRunner:
    """Returns each item's mt as its score; records batch sizes; can be told to fail."""
    accepts_ref = False

    def __init__(self):
        self.batches = []
        self.fail_next = False
        self.gate = threading.Event()
        self.gate.set()

    def run(self, items, options, measures):
        self.gate.wait(10)
        self.batches.append(len(items))
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("boom")
        return [{"score": float(it.mt)} for it in items]


def make(runner=None, **kw):
    runner = runner or EchoRunner()
    args = dict(batch_tokens=1000, max_batch_items=16, max_wait_ms=5.0, max_queue=100) | kw
    b = Batcher({"m": runner}, ThreadPoolExecutor(1), Metrics(), **args)
    return b, runner


def submit(b, values, cost=10):
    items = [Item(src="s", mt=str(v)) for v in values]
    return b.submit("m", items, [ItemOptions()] * len(items), [Measure(cost, False)] * len(items))


def test_every_result_goes_back_to_its_own_request():
    async def main():
        b, runner = make()
        b.start()
        reqs = [submit(b, range(i * 10, i * 10 + 1 + i % 3)) for i in range(40)]
        answers = [await asyncio.gather(*f) for f in reqs]
        await b.drain(5)
        return answers, runner

    answers, runner = asyncio.run(main())
    for i, ans in enumerate(answers):
        assert [a["score"] for a in ans] == [float(v) for v in range(i * 10, i * 10 + 1 + i % 3)]
    assert sum(runner.batches) == sum(1 + i % 3 for i in range(40))
    assert max(runner.batches) <= 16 and len(runner.batches) < 40


def test_queue_limit_is_all_or_nothing():
    async def main():
        b, runner = make(max_queue=10)
        runner.gate.clear()  # hold the worker so the queue fills
        b.start()
        first = submit(b, range(8))
        await asyncio.sleep(0.05)  # the scheduler takes them into a batch...
        second = submit(b, range(8))  # ...so these 8 fit the queue again
        with pytest.raises(QueueFull):
            submit(b, range(3))
        assert b.depth == 8
        runner.gate.set()
        await asyncio.gather(*first, *second)
        await b.drain(5)

    asyncio.run(main())


def test_failed_batch_fails_its_requests_only():
    async def main():
        b, runner = make(max_wait_ms=1.0)
        runner.fail_next = True
        b.start()
        with pytest.raises(BatchFailed, match="boom"):
            await asyncio.gather(*submit(b, [1, 2]))
        assert [r["score"] for r in await asyncio.gather(*submit(b, [3]))] == [3.0]
        await b.drain(5)
        return b

    assert asyncio.run(main()).metrics.batch_failures == 1


def test_cancelled_requests_are_not_computed():
    async def main():
        b, runner = make(max_wait_ms=50.0)
        b.start()
        gone = submit(b, [1, 2, 3])
        for f in gone:
            f.cancel()
        kept = submit(b, [4])
        assert [r["score"] for r in await asyncio.gather(*kept)] == [4.0]
        await b.drain(5)
        return runner

    assert asyncio.run(main()).batches == [1]


def test_drain_finishes_queued_work_then_refuses_new():
    async def main():
        b, runner = make(max_wait_ms=10_000.0)  # would wait 10 s without the drain
        b.start()
        futs = submit(b, [5, 6])
        await asyncio.sleep(0.01)
        await asyncio.wait_for(b.drain(5), 2)
        assert [f.result()["score"] for f in futs] == [5.0, 6.0]
        with pytest.raises(ShuttingDown):
            submit(b, [7])

    asyncio.run(main())


def test_returning_clients_do_not_wait_out_max_wait():
    """Once a lane has seen batches of k jobs, k queued jobs go at once: synchronous clients
    that were just answered are all back, so waiting for more would only idle the model."""
    import time

    async def main():
        b, runner = make(max_wait_ms=400.0)
        b.start()
        t0 = time.monotonic()
        await asyncio.gather(*submit(b, [1, 2, 3]))
        first = time.monotonic() - t0  # no history yet: waits max_wait for company
        t0 = time.monotonic()
        await asyncio.gather(*submit(b, [4, 5, 6]))
        second = time.monotonic() - t0
        t0 = time.monotonic()
        await asyncio.gather(*submit(b, [7, 8]))  # fewer than before: waits again
        third = time.monotonic() - t0
        await b.drain(5)
        return first, second, third, runner.batches

    first, second, third, batches = asyncio.run(main())
    assert first >= 0.35 and second < 0.2 and third >= 0.35
    assert batches == [3, 3, 2]


def test_padding_waste_is_the_share_of_padded_slots():
    from src.scorer.metrics import padding_waste

    assert padding_waste([10, 10, 10]) == 0.0
    assert padding_waste([10, 30]) == pytest.approx(1 - 40 / 60)
    assert padding_waste([]) == 0.0


def test_batches_report_their_padding_waste_in_metrics():
    async def go():
        b, runner = make(max_wait_ms=200.0)
        b.start()
        items = [Item(src="s", mt=str(v)) for v in (1, 2)]
        futs = b.submit("m", items, [ItemOptions()] * 2, [Measure(10, False), Measure(30, False)])
        await asyncio.gather(*futs)
        await b.drain(5)
        return b.metrics.snapshot(0, None), runner.batches

    snap, batches = asyncio.run(go())
    assert batches == [2]
    assert snap["padding_waste"]["n"] == 1
    assert snap["padding_waste"]["max"] == pytest.approx(1 - 40 / 60)


# ---------------------------------------------------------------------------------------------
# The batch pipeline: several batches computing at once (CPU), the next batch prepared while
# one computes (GPU). No timings: events and barriers show the overlap.

class SplitRunner(EchoRunner):
    """prepare/compute like ModelRunner; compute can be made to wait for a condition."""

    def __init__(self, compute_waits_for=None):
        super().__init__()
        self.lock = threading.Lock()
        self.prepared = []
        self.running = 0
        self.max_running = 0
        self.compute_waits_for = compute_waits_for  # callable(batch values) -> None, may raise
        self.fail_prepare = False

    def prepare(self, items, options, measures):
        if self.fail_prepare:
            self.fail_prepare = False
            raise ValueError("bad tokens")
        with self.lock:
            self.prepared.append([it.mt for it in items])
        return items

    def run(self, items, options, measures):  # as ModelRunner.run: both steps on one thread
        return self.compute(self.prepare(items, options, measures))

    def compute(self, items):
        with self.lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            if self.compute_waits_for is not None:
                self.compute_waits_for([it.mt for it in items])
            with self.lock:
                self.batches.append(len(items))
            return [{"score": float(it.mt)} for it in items]
        finally:
            with self.lock:
                self.running -= 1


def make_pipeline(runner, concurrency=1, prep=False, **kw):
    args = dict(batch_tokens=1000, max_batch_items=1, max_wait_ms=1.0, max_queue=100) | kw
    return Batcher({"m": runner}, ThreadPoolExecutor(concurrency), Metrics(), **args,
                   concurrency=concurrency, prep_executor=ThreadPoolExecutor(1) if prep else None)


def test_two_batches_compute_at_the_same_time():
    barrier = threading.Barrier(2, timeout=10)  # breaks unless two computes meet inside it
    runner = SplitRunner(compute_waits_for=lambda values: barrier.wait())

    async def main():
        b = make_pipeline(runner, concurrency=2)
        b.start()
        answers = await asyncio.gather(*submit(b, [1, 2]))  # max_batch_items=1: two batches
        await b.drain(5)
        return answers

    assert [a["score"] for a in asyncio.run(main())] == [1.0, 2.0]
    assert runner.max_running == 2 and runner.batches == [1, 1]


def test_next_batch_is_prepared_while_one_computes():
    def first_waits_for_second_prepared(values):
        if values == ["1"]:
            deadline = threading.Event()
            for _ in range(1000):
                with runner.lock:
                    if ["2"] in runner.prepared:
                        return
                deadline.wait(0.01)
            raise AssertionError("batch 2 was not prepared while batch 1 computed")

    runner = SplitRunner(compute_waits_for=first_waits_for_second_prepared)

    async def main():
        b = make_pipeline(runner, concurrency=1, prep=True)
        b.start()
        answers = await asyncio.gather(*submit(b, [1, 2, 3]))
        await b.drain(5)
        return answers

    assert [a["score"] for a in asyncio.run(main())] == [1.0, 2.0, 3.0]
    assert runner.max_running == 1  # one batch computes at a time on a GPU


def test_batches_in_flight_never_exceed_the_threads():
    import time

    runner = SplitRunner(compute_waits_for=lambda values: time.sleep(0.005))

    async def main():
        b = make_pipeline(runner, concurrency=2)
        b.start()
        reqs = [submit(b, [i]) for i in range(30)]
        answers = [await asyncio.gather(*f) for f in reqs]
        await b.drain(5)
        return answers

    answers = asyncio.run(main())
    assert [a[0]["score"] for a in answers] == [float(i) for i in range(30)]
    assert runner.max_running == 2 and sum(runner.batches) == 30


def test_failed_preparation_fails_its_requests_only():
    runner = SplitRunner()
    runner.fail_prepare = True

    async def main():
        b = make_pipeline(runner, concurrency=1, prep=True)
        b.start()
        with pytest.raises(BatchFailed, match="bad tokens"):
            await asyncio.gather(*submit(b, [1]))
        assert [r["score"] for r in await asyncio.gather(*submit(b, [2]))] == [2.0]
        await b.drain(5)
        return b

    assert asyncio.run(main()).metrics.batch_failures == 1


def test_drain_waits_for_batches_still_computing():
    gate = threading.Event()
    runner = SplitRunner(compute_waits_for=lambda values: gate.wait(10))

    async def main():
        b = make_pipeline(runner, concurrency=2)
        b.start()
        futs = submit(b, [1, 2, 3])
        await asyncio.sleep(0.05)  # two batches computing, one queued
        threading.Timer(0.1, gate.set).start()
        await asyncio.wait_for(b.drain(5), 3)
        return [f.result()["score"] for f in futs]

    assert asyncio.run(main()) == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("concurrency, prep, expected", [(2, False, [4, 4]), (1, False, [8]),
                                                         (1, True, [8])])
def test_idle_threads_share_a_short_queue(concurrency, prep, expected):
    """CPU (2 inference threads): 8 queued jobs and both threads idle -> two batches of 4, one
    per core, instead of 8 on one thread while the other idles. GPU (one thread, with or
    without the preparation thread): one batch of 8."""
    runner = SplitRunner()

    async def main():
        b = make_pipeline(runner, concurrency=concurrency, prep=prep, max_batch_items=16,
                          max_wait_ms=50.0)
        b.start()
        answers = await asyncio.gather(*submit(b, range(8)))
        await b.drain(5)
        return answers

    assert [a["score"] for a in asyncio.run(main())] == [float(i) for i in range(8)]
    assert sorted(runner.batches) == expected

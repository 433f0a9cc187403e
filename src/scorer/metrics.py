"""Counters and latency percentiles for GET /metrics (recent-window percentiles, exact counts)."""
from __future__ import annotations

import time
from collections import Counter, deque
from typing import Deque, Dict, Iterable, Optional

WINDOW = 20_000  # samples kept per latency series


def percentiles(values: Iterable[float]) -> Dict[str, Optional[float]]:
    v = sorted(values)
    if not v:
        return {"p50": None, "p90": None, "p99": None, "max": None, "n": 0}

    def q(p: float) -> float:
        return v[min(len(v) - 1, int(round(p * (len(v) - 1))))]

    return {"p50": q(0.50), "p90": q(0.90), "p99": q(0.99), "max": v[-1], "n": len(v)}


def padding_waste(costs) -> float:
    """Share of a batch's padded token slots that hold padding: comet pads every item of a
    batch to its longest, so a batch costs len(costs) * max(costs) slots for sum(costs) tokens."""
    return 1.0 - sum(costs) / (len(costs) * max(costs)) if costs and max(costs) > 0 else 0.0


class Metrics:
    def __init__(self) -> None:
        self.started = time.time()
        self.requests_by_status: Counter = Counter()
        self.items = 0
        self.items_empty_mt = 0
        self.items_truncated = 0
        self.items_by_model: Counter = Counter()
        self.batches = 0
        self.batch_items = 0
        self.batch_failures = 0
        self.rejected_queue_full = 0
        self.request_latency: Deque[float] = deque(maxlen=WINDOW)
        self.batch_latency: Deque[float] = deque(maxlen=WINDOW)
        self.queue_wait: Deque[float] = deque(maxlen=WINDOW)
        self.batch_sizes: Deque[int] = deque(maxlen=WINDOW)
        self.padding_waste: Deque[float] = deque(maxlen=WINDOW)

    def record_request(self, status: int, seconds: float) -> None:
        self.requests_by_status[status] += 1
        if status == 200:
            self.request_latency.append(seconds)

    def record_items(self, model: str, n: int, empty: int, truncated: int) -> None:
        self.items += n
        self.items_by_model[model] += n
        self.items_empty_mt += empty
        self.items_truncated += truncated

    def record_batch(self, model: str, n: int, seconds: float, waits, costs=()) -> None:
        self.batches += 1
        self.batch_items += n
        self.batch_sizes.append(n)
        if costs:
            self.padding_waste.append(padding_waste(costs))
        self.batch_latency.append(seconds)
        self.queue_wait.extend(waits)

    def record_batch_failure(self, model: str, n: int) -> None:
        self.batch_failures += 1

    def snapshot(self, queue_depth: int, peak_gpu_bytes: Optional[int]) -> Dict:
        ms = lambda d: {k: (round(v * 1000, 3) if isinstance(v, float) else v)  # noqa: E731
                        for k, v in percentiles(d).items()}
        return {
            "uptime_s": round(time.time() - self.started, 3),
            "requests": {str(k): v for k, v in sorted(self.requests_by_status.items())},
            "items": self.items,
            "items_by_model": dict(self.items_by_model),
            "items_empty_mt": self.items_empty_mt,
            "items_truncated": self.items_truncated,
            "batches": self.batches,
            "batch_failures": self.batch_failures,
            "mean_batch_size": (self.batch_items / self.batches) if self.batches else None,
            "rejected_queue_full": self.rejected_queue_full,
            "queue_depth": queue_depth,
            "request_latency_ms": ms(self.request_latency),
            "batch_latency_ms": ms(self.batch_latency),
            "queue_wait_ms": ms(self.queue_wait),
            "batch_size": percentiles(float(x) for x in self.batch_sizes),
            "padding_waste": percentiles(self.padding_waste),
            "peak_gpu_memory_bytes": peak_gpu_bytes,
        }

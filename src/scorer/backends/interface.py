"""The interface the service drives a backend through, whatever the model library.

A backend's entry module (its descriptor's `entry`, src/scorer/backends/<name>/backend.py) provides
two functions:

    resolve(name, spec) -> files       where the model's files are; StartupError (one line) when they
                                       are not there. Runs before torch is imported, so a wrong path
                                       fails in well under a second.
    load(name, spec, files, device, dtype) -> Runner
                                       the model on its device, ready to score (warm-up is the
                                       service's: Runner.warm_up).

and a Runner is what the batcher and the HTTP layer call, on any thread (BaseRunner below):

    info                               ModelInfo: what a request may ask of this model
    accepts_ref                        whether an item's `ref` is used (the batcher's lanes)
    measure(items, off_loop)           per item: padded-token cost, truncated?, where a long text may be
                                       cut; cheap, on the event loop (off_loop: the measuring thread)
    prepare(items, options, measures)  tokenise + pad one batch on the CPU -> PreparedBatch
    forward(prepared)                  the model's forward pass on its device -> raw outputs
    decode(prepared, raw)              raw outputs -> one result dict per item ({score, truncated, ...})
    compute(prepared)                  forward + decode (BaseRunner)
    run(items, options, measures)      prepare + compute (BaseRunner)
    warm_up()                          one batch through every step, so the first request is not slow

This module imports no torch (stdlib, and PyYAML through config.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Protocol, Sequence

from src.scorer.config import ModelSpec
from src.scorer.schema import Item, ItemOptions, Measure, ModelInfo


class StartupError(RuntimeError):
    """Why the service cannot start, in one line."""


@dataclass
class PreparedBatch:
    """A batch after `prepare`: the items and the backend's collated CPU tensors."""
    items: Sequence[Item]
    options: Sequence[ItemOptions]
    measures: Sequence[Measure]
    cpu_batch: object


class Runner(Protocol):
    accepts_ref: bool

    @property
    def info(self) -> ModelInfo: ...

    def measure(self, items: Sequence[Item], off_loop: bool = False) -> List[Measure]: ...

    def prepare(self, items: Sequence[Item], options: Sequence[ItemOptions],
                measures: Sequence[Measure]) -> PreparedBatch: ...

    def forward(self, prepared: PreparedBatch) -> Any: ...

    def decode(self, prepared: PreparedBatch, raw: Any) -> List[Dict]: ...

    def compute(self, prepared: PreparedBatch) -> List[Dict]: ...

    def run(self, items: Sequence[Item], options: Sequence[ItemOptions],
            measures: Sequence[Measure]) -> List[Dict]: ...

    def warm_up(self) -> None: ...


class Backend(Protocol):
    """What a backend module provides (module-level functions)."""

    def resolve(self, name: str, spec: ModelSpec) -> Any: ...

    def load(self, name: str, spec: ModelSpec, files: Any, device: str, dtype: str) -> Runner: ...


class BaseRunner:
    """compute = forward + decode, run = prepare + compute: the order every backend keeps."""

    def compute(self, prepared: PreparedBatch) -> List[Dict]:
        """Safe to call from several threads at once (CPU): the model's weights are only read."""
        return self.decode(prepared, self.forward(prepared))

    def run(self, items: Sequence[Item], options: Sequence[ItemOptions],
            measures: Sequence[Measure]) -> List[Dict]:
        """Scores one batch: `prepare` then `compute`."""
        return self.compute(self.prepare(items, options, measures))

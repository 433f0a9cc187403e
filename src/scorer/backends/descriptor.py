"""What a QE backend declares about itself, known without loading a model: its kinds, its metric and
scale, the model keys and files it reads, its memory formula for the plan, and where its loader lives.

Stdlib only, and of src only the stdlib vocabulary: the train env reads descriptors (the plan sizes
the service by them, the reward and the evaluation name metrics by them) and cannot import torch.
Each backend package (src/scorer/backends/<name>/__init__.py) builds one `Descriptor` as DESCRIPTOR;
the registry (src/scorer/backends/__init__.py) collects them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Protocol

from src.scorer.vocabulary import Scale, metric_of


@dataclass(frozen=True)
class KindInfo:
    """What one `kind:` of checkpoint can do."""
    class_identifier: str  # comet's hparams.yaml `class_identifier`; the model class otherwise
    ref: str  # "required" | "optional" | "ignored"
    word_level: bool  # has a tag head: spans, mqm and word tags are available
    empty_mt_score: float = 0.0  # the score of an empty MT unless the model's config says one: the worst
    # filled in by the registry from the descriptor that declares the kind:
    kind: str = ""  # its key in KINDS
    backend: str = ""  # the package of src/scorer/backends that serves it
    own_metric: Optional[str] = None  # the backend's own metric (Descriptor.metric), if it has one

    @property
    def metric(self) -> str:
        """The metric the reward and the evaluation read it as: the backend's own when it has one
        (whatever the model reads); else by what it reads (vocabulary.metric_of)."""
        return self.own_metric or metric_of(self.ref == "required", self.word_level)


@dataclass(frozen=True)
class OwnMetric:
    """A metric a backend gives whatever its models read, on a scale of its own: it is a reward
    component of that name (src/rewards/components.py), a metric `python -m src.evaluate` can compute,
    and reads the reference only when asked (reward.<name>.reference, the evaluation's own switch)."""
    name: str  # the metric, the reward component and its kwargs key
    label: str  # how tables and plots name it
    scale: Scale
    example_model: str  # a conf/scorer model giving it, for error lines
    # in `python -m src.evaluate`'s metrics unless asked: False when its checkpoints are optional downloads
    evaluated_by_default: bool = True


class ModelShape(Protocol):
    """The scorer model's shape the plan knows (src/plan/memory.py ScorerModel)."""
    params_b: float
    layers: int
    hidden: int
    ffn: int
    heads: int


@dataclass(frozen=True)
class ScorerMemory:
    """The plan's memory formula for a model of this backend, from measured figures (benches/memory.py)."""
    weights_extra_gb: float  # above params x dtype bytes: heads kept in fp32, allocator rounding
    # (shape, "bf16" | "fp32", scorer.batch_tokens) -> bytes one batch at that budget holds
    activation_bytes: Callable[[ModelShape, str, int], float]


@dataclass(frozen=True)
class Descriptor:
    name: str  # its package under src/scorer/backends
    kinds: Mapping[str, KindInfo]
    memory: ScorerMemory
    # models.<name> keys only this backend reads (comet: encoder); refused for other kinds
    spec_keys: tuple[str, ...] = ()
    # the files a model directory (a models.<name>.path that is a dir) holds, relative to it: the
    # pre-launch check (src/node/preflight.py) refuses a dir without them before the run starts
    model_files: tuple[str, ...] = ()
    metric: Optional[OwnMetric] = None  # None: its kinds give the comet-family metrics (metric_of)
    # the module of its package with resolve(name, spec) and load(name, spec, files, device, dtype)
    # (src/scorer/backends/interface.py says what they do); imported only when a model is loaded
    entry: str = "backend"

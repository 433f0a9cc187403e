"""QE model backends, one package each, and the registry of what they declare (their descriptors).

A backend is a package of this one whose __init__.py builds DESCRIPTOR (descriptor.py): its kinds,
its own metric and scale if it has one, the model keys it reads, the plan's memory formula, and the
module (Descriptor.entry) with its resolve/load (interface.py). The registry below imports every
package here at import time, so a new backend is its package plus its models in conf/scorer
(docs/scorer-api.md). Stdlib only: a package's __init__.py must not import torch or its model
library (the train env reads descriptors); its entry module imports them when a model is loaded.
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Dict, Tuple

from src.scorer.backends.descriptor import Descriptor, KindInfo, OwnMetric
from src.scorer.vocabulary import COMET_SCALE, QE_METRIC, REFERENCE_METRIC, SPAN_METRIC, Scale, metric_of


def _descriptors() -> Dict[str, Descriptor]:
    found = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.ispkg:
            descriptor = importlib.import_module(f"{__name__}.{module.name}").DESCRIPTOR
            if descriptor.name != module.name:
                raise ImportError(f"src/scorer/backends/{module.name}: DESCRIPTOR.name is {descriptor.name!r}; "
                                  f"name it after its package")
            found[module.name] = descriptor
    return found


BACKENDS: Dict[str, Descriptor] = _descriptors()


def _kinds() -> Dict[str, KindInfo]:
    kinds: Dict[str, KindInfo] = {}
    for d in BACKENDS.values():
        for kind, info in d.kinds.items():
            if kind in kinds:
                raise ImportError(f"kind {kind!r} is declared by backends {kinds[kind].backend} and {d.name}")
            kinds[kind] = KindInfo(info.class_identifier, info.ref, info.word_level, info.empty_mt_score,
                                   kind=kind, backend=d.name, own_metric=d.metric.name if d.metric else None)
    return kinds


# What each kind of checkpoint can do, known without loading it (conf/scorer `kind:`; the train env plans with it)
KINDS: Dict[str, KindInfo] = _kinds()
# metric name -> the backend metric of that name (a metric of its own, on its own scale)
OWN_METRICS: Dict[str, OwnMetric] = {d.metric.name: d.metric for d in BACKENDS.values() if d.metric}
# The QE metrics a model can give, named as reward roles and evaluation metrics both use them: the
# comet family's three (vocabulary.py), then each backend's own
METRICS: Tuple[str, ...] = (REFERENCE_METRIC, QE_METRIC, SPAN_METRIC, *OWN_METRICS)
# the metrics on a scale of their own; every other one is on COMET_SCALE
SCALES: Dict[str, Scale] = {name: m.scale for name, m in OWN_METRICS.items()}


def scale_of(metric: str) -> Scale:
    return SCALES.get(metric, COMET_SCALE)


def unit_score(metric: str, value: float) -> float:
    """`value` of `metric` on 0..1 where 1 is best: as it is for a higher-is-better metric on 0..1,
    (hi - value) / (hi - lo) for a lower-is-better one (an error score on 0..25: 1 - score/25)."""
    lo, hi, higher = scale_of(metric)
    return (value - lo) / (hi - lo) if higher else (hi - value) / (hi - lo)


def metric_label(metric: str) -> str:
    """A metric as a table or plot names it: a backend's own by its label and scale, others as they are."""
    own = OWN_METRICS.get(metric)
    return f"{own.label} ({own.scale.describe()})" if own else metric


def model_metric(kind: str | None, needs_ref: bool) -> str:
    """The metric of a conf/scorer model read without the scorer (its `kind` and `needs_ref`): the
    backend's own when its kind has one, else by whether it needs the reference."""
    own = KINDS[kind].own_metric if kind in KINDS else None
    return own or metric_of(needs_ref)


def backend_for(kind: str) -> ModuleType:
    """The entry module serving `kind` (its descriptor's `entry`: resolve and load), imported now."""
    d = BACKENDS[KINDS[kind].backend]
    return importlib.import_module(f"{__name__}.{d.name}.{d.entry}")

"""verl's validation metrics, the same numbers for a fraction of the CPU: best@n/worst@n resampled in one call.

At each validation with more than one answer per prompt (`rollout.val_kwargs.n` > 1, as experiment=learn_tiny
validates), verl 0.9.1 resamples, for every data source x prompt x reward key x n in (2, 4, ..., N), 1,000
subsets and takes `np.max` and `np.min` of each in a Python loop (verl/trainer/ppo/metric_utils.py
bootstrap_metric, called by process_validation_metrics in the TaskRunner's process, between two steps). With
the 11 keys our reward logs, learn_tiny's 48 held-out prompts and N=4, that is 2.1 million numpy calls: 5.7
CPU-s a validation on a 2-core machine, about half of learn_tiny's validation time; a WMT-sized validation set
(2,000 prompts) costs minutes of the TaskRunner's CPU while the step waits.

`bootstrap_metric` here draws the same indices from the same generator (`np.random.seed(seed)`, then
`np.random.choice` with verl's arguments, so numpy's global state after the call is also the same) and takes
the max and min along the subset axis at once: the same float64 array of results as verl's loop, so the same
mean and std, bit for bit (tests/launcher/test_val_bootstrap.py). Anything else (maj@n's vote function, data
that is not plain numbers, a NaN, whose max depends on its position in verl's object array) goes to verl's
own function unchanged.
"""
from __future__ import annotations

import contextlib
import numbers

import numpy as np

# the reduce functions verl's process_validation_metrics passes for best@n/worst@n: each takes an axis
_AT_ONCE = (np.max, np.min)


def _numbers(data) -> np.ndarray | None:
    """`data` as float64 when every item is a real number (bool and numpy scalars included) and none is NaN."""
    if not all(isinstance(v, numbers.Real) for v in data):
        return None
    values = np.asarray(data, dtype=np.float64)
    if values.ndim != 1 or np.isnan(values).any():
        return None
    return values


def bootstrap_metric(data, subset_size, reduce_fns, n_bootstrap=1000, seed=42, *, _verl=None):
    """verl's `bootstrap_metric(data, subset_size, reduce_fns, n_bootstrap, seed)`, same signature and results."""
    values = _numbers(data) if len(data) else None
    if values is None or not all(any(fn is f for f in _AT_ONCE) for fn in reduce_fns):
        return _verl(data, subset_size, reduce_fns, n_bootstrap=n_bootstrap, seed=seed)
    # verl: np.random.seed(seed); np.random.choice(n_data, size=(n_bootstrap, subset_size), replace=True)
    np.random.seed(seed)
    idxs = np.random.choice(len(values), size=(n_bootstrap, subset_size), replace=True)
    samples = values[idxs]
    out = []
    for fn in reduce_fns:
        results = fn(samples, axis=1)  # row b: fn of bootstrap subset b, as verl's loop computes it
        out.append((float(np.mean(results)), float(np.std(results))))
    return out


@contextlib.contextmanager
def resampled_at_once():
    """verl's metric_utils.bootstrap_metric is ours while inside (process_validation_metrics looks the name up in
    its module at each call); verl's own is restored after."""
    from verl.trainer.ppo import metric_utils

    original = metric_utils.bootstrap_metric

    def fast(data, subset_size, reduce_fns, n_bootstrap=1000, seed=42):
        return bootstrap_metric(data, subset_size, reduce_fns, n_bootstrap, seed, _verl=original)

    metric_utils.bootstrap_metric = fast
    try:
        yield
    finally:
        metric_utils.bootstrap_metric = original


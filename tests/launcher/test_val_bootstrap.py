"""src/trainer/val_bootstrap.py against verl 0.9.1's own validation metrics: the same numbers, bit for bit.

verl's process_validation_metrics (verl/trainer/ppo/metric_utils.py) is run twice on the same answers, with its
own bootstrap_metric and inside `resampled_at_once()`, and every metric it returns must be equal (==, not
approx). The answers are what our reward logs at a validation with several answers a prompt: numbers, bools,
None where a component was not computed, strings, a NaN, and the `pred` key whose maj@n vote goes to verl's own
function. What it saves: benches/val_metrics.py (benches/RESULTS.md).
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from src.trainer.val_bootstrap import bootstrap_metric, resampled_at_once


def _answers(prompts: int, n: int, seed: int = 0) -> tuple[list[str], list[str], dict[str, list]]:
    rng = np.random.default_rng(seed)
    rows = prompts * n
    infos = {
        "score": list(rng.normal(size=rows)),
        "bleu": [float(v) for v in rng.uniform(0, 100, size=rows)],
        "format_ok": [bool(v) for v in rng.integers(0, 2, size=rows)],  # a flag, as bools
        "n_major": [int(v) for v in rng.integers(0, 4, size=rows)],    # counts, as ints
        "kiwi": [None if i % 5 == 0 else float(v) for i, v in enumerate(rng.uniform(size=rows))],  # not computed
        "ties": [1.0] * rows,
        "translation": ["text"] * rows,  # strings: verl skips them
        "with_nan": [float("nan") if i == 3 else 0.5 for i in range(rows)],
        "pred": [str(v) for v in rng.integers(0, 3, size=rows)],  # an answer to vote on: maj@n, verl's own function
    }
    sources = ["synth/zh-en" if (i // n) % 2 else "synth/en-zh" for i in range(rows)]
    uids = [f"u{i // n}" for i in range(rows)]
    return sources, uids, infos


def _both(sources, uids, infos) -> tuple[dict, dict]:
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    def plain(found):
        return {(ds, var, m): v for ds, a in found.items() for var, b in a.items() for m, v in b.items()}

    verls = plain(process_validation_metrics(sources, uids, infos, seed=7))
    with resampled_at_once():
        ours = plain(process_validation_metrics(sources, uids, infos, seed=7))
    return verls, ours


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_process_validation_metrics_gives_verls_numbers_exactly(n):
    verls, ours = _both(*_answers(prompts=12, n=n))
    assert ours.keys() == verls.keys()
    assert any(key[2] == f"best@{n}/mean" for key in verls) and any(key[2] == f"maj@{n}/mean" for key in verls)
    differ = {k: (verls[k], ours[k]) for k in verls if not (verls[k] == ours[k] or (np.isnan(verls[k]) and np.isnan(ours[k])))}
    assert not differ, differ


def test_the_vote_and_what_is_not_plain_numbers_go_to_verls_own_function():
    from verl.trainer.ppo import metric_utils

    calls = []

    def verls(data, subset_size, reduce_fns, n_bootstrap=1000, seed=42):
        calls.append(len(data))
        return metric_utils.bootstrap_metric(data, subset_size, reduce_fns, n_bootstrap=n_bootstrap, seed=seed)

    votes = [{"val": 1.0, "pred": "a"}, {"val": 0.0, "pred": "b"}]
    vote = [lambda d: float(d[0]["val"])]
    assert bootstrap_metric(votes, 2, vote, 10, 1, _verl=verls) == metric_utils.bootstrap_metric(votes, 2, vote, 10, 1)
    with_nan = [1.0, float("nan"), 0.5]
    assert repr(bootstrap_metric(with_nan, 2, [np.max], 10, 1, _verl=verls)) == \
        repr(metric_utils.bootstrap_metric(with_nan, 2, [np.max], 10, 1))
    assert bootstrap_metric([1.0, 2.0], 2, [np.mean], 10, 1, _verl=verls) == \
        metric_utils.bootstrap_metric([1.0, 2.0], 2, [np.mean], 10, 1)
    assert calls == [2, 3, 2]
    # plain numbers with max/min: never verl's loop
    assert bootstrap_metric([1.0, 2.0, True], 2, [np.max, np.min], 10, 1, _verl=verls) == \
        metric_utils.bootstrap_metric([1.0, 2.0, True], 2, [np.max, np.min], 10, 1)
    assert calls == [2, 3, 2]


def test_numpys_global_generator_is_left_as_verls_leaves_it():
    from verl.trainer.ppo import metric_utils

    data = [0.1, 0.7, 0.3, 0.9]
    metric_utils.bootstrap_metric(data, 2, [np.max, np.min], 50, 3)
    after_verl = np.random.random()
    bootstrap_metric(data, 2, [np.max, np.min], 50, 3, _verl=metric_utils.bootstrap_metric)
    assert np.random.random() == after_verl


def test_verls_own_function_is_back_after_the_block():
    from verl.trainer.ppo import metric_utils

    original = metric_utils.bootstrap_metric
    with resampled_at_once():
        assert metric_utils.bootstrap_metric is not original
    assert metric_utils.bootstrap_metric is original


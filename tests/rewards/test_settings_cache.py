"""src/rewards/compute.py settings_from: the reward settings of the kwargs verl hands to every call, read once.

verl's own loader (verl/trainer/ppo/reward.py get_custom_reward_fn) builds the function from the verl config the
launcher writes; the kwargs it merges into each call are the same config nodes every time, so the second call
finds the settings by the nodes' identity and converts nothing. Plain dicts (a caller's own, which it may change
between calls) are read again on each call, as before.
"""
from __future__ import annotations

import asyncio

from src.rewards import compute
from tests.helpers.reward_config import extra_info
from tests.helpers.reward_example import DATA_SOURCE, REF, RESPONSE, SRC
from tests.helpers.verl_reward_harness import verl_config_for


def _verls_function():
    """verl's reward function for the launcher's learn_tiny config: partial(_call_with_kwargs_async, raw_fn,
    reward_kwargs), the kwargs verl merges into every call (verl/trainer/ppo/reward.py get_custom_reward_fn)."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    return get_custom_reward_fn(verl_config_for("experiment=learn_tiny", "accelerator=cpu"))


def _counting_plain(monkeypatch) -> list:
    calls = []
    plain = compute._plain

    def counted(obj):
        calls.append(1)
        return plain(obj)
    monkeypatch.setattr(compute, "_plain", counted)
    return calls


def test_verls_kwargs_are_read_once_per_process_and_give_the_same_settings(monkeypatch):
    fn = _verls_function()
    kwargs = fn.args[1]
    first = compute.settings_from(kwargs)
    calls = _counting_plain(monkeypatch)
    # verl's call as its reward manager makes it: the same kwargs, merged into each call's
    out = asyncio.run(fn(data_source=DATA_SOURCE, solution_str=RESPONSE, ground_truth=REF, extra_info=extra_info(SRC)))
    assert compute.settings_from(dict(kwargs)) is first and out["score"] is not None
    assert calls == []  # found by the nodes' identity: nothing converted again
    # the same contents as plain values: the same settings, read the slow way
    assert compute.settings_from(compute._plain(dict(kwargs))) is first and calls


def test_a_plain_dict_changed_between_calls_gives_its_new_settings():
    kwargs = compute._plain(dict(_verls_function().args[1]))
    before = compute.settings_from(kwargs)
    kwargs["round_decimals"] = before.round_decimals + 1
    after = compute.settings_from(kwargs)
    assert after.round_decimals == before.round_decimals + 1

"""The trainer's replay buffer looks for a step's finished rollouts soon, then less often (src/trainer/poll.py).

verl's sync buffer sleeps a fixed 2 s between its looks at TransferQueue (verl/trainer/ppo/v1/replay_buffer.py,
ReplayBuffer.sample -> _wait_for_next_poll), so a generation of 50 ms took 2 s a step. The guarded buffer, built
the way verl's trainer builds it, waits a tenth of the time waited so far, at least 50 ms, at most verl's interval.
"""
from __future__ import annotations

import inspect
import time

import pytest

from src.trainer.poll import FIRST_POLL_S, PollBackoff
from tests.helpers.verl_reward_harness import verl_config_for


def test_each_wait_is_a_tenth_of_the_time_waited_within_the_first_and_the_cap():
    polls = PollBackoff(cap_s=2.0)
    assert [polls.wait_after(t) for t in (0.0, 0.3, 0.5, 1.0, 4.0, 19.0, 20.0, 600.0)] == \
        pytest.approx([FIRST_POLL_S, FIRST_POLL_S, FIRST_POLL_S, 0.1, 0.4, 1.9, 2.0, 2.0])
    # next() is wait_after(the time since the PollBackoff was built or reset), whatever the machine's load
    built = time.monotonic()
    polls = PollBackoff(cap_s=2.0)
    time.sleep(0.6)
    assert 0.06 <= polls.next() <= max(FIRST_POLL_S, 0.1 * (time.monotonic() - built))
    reset = time.monotonic()
    polls.reset()
    assert FIRST_POLL_S <= polls.next() <= max(FIRST_POLL_S, 0.1 * (time.monotonic() - reset))
    assert PollBackoff(cap_s=0.05).wait_after(10.0) == 0.05
    with pytest.raises(ValueError, match="poll waits need"):
        PollBackoff(cap_s=0.01)


def _guarded_buffer():
    from verl.utils.import_utils import load_extern_type

    sampler = verl_config_for("reward=comet", "algo=grpo").trainer.v1.sampler
    cls = load_extern_type(sampler.custom_sampler.path, sampler.custom_sampler.name)
    # the keyword arguments verl's trainer gives a custom sampler (trainer_base.py, _build_replay_buffer)
    return cls(trainer_mode="sync", trainer_config={}, max_off_policy_threshold=sampler.max_off_policy_threshold,
               max_off_policy_strategy=sampler.max_off_policy_strategy, sampler_kwargs=sampler.sampler_kwargs,
               refill_fn=lambda n: n)


def test_the_guarded_buffer_sleeps_the_backoff_where_verls_sample_waits():
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    # the pinned verl: sample() waits through _wait_for_next_poll, which sleeps self.poll_interval (2 s by default,
    # and the trainer passes none): the attribute the guarded buffer sets before each wait
    assert "self._wait_for_next_poll(" in inspect.getsource(ReplayBuffer.sample)
    assert "time.sleep(self.poll_interval)" in inspect.getsource(ReplayBuffer._wait_for_next_poll)
    verls_interval = inspect.signature(ReplayBuffer.__init__).parameters["poll_interval"].default
    assert verls_interval == 2.0

    built = time.monotonic()
    buf = _guarded_buffer()
    assert buf.poll_interval == verls_interval  # before any wait: verl's, untouched
    started = time.monotonic()
    waits = []
    for _ in range(3):
        bound = max(FIRST_POLL_S, 0.1 * (time.monotonic() - built))  # its backoff started when it was built
        buf._wait_for_next_poll("train", time.time())
        waits.append(buf.poll_interval)
        # about 0.15 s in, so 50 ms each on a quiet machine; longer only as far as the time waited has grown
        assert FIRST_POLL_S <= waits[-1] <= bound + 1e-9, waits
    assert waits == sorted(waits) and waits[0] < verls_interval
    assert time.monotonic() - started >= sum(waits)  # verl's own sleep slept them

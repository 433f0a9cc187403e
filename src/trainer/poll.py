"""How often the trainer looks whether a step's rollouts are done: soon at first, then less often.

verl's sync replay buffer waits for a step's groups by polling TransferQueue's metadata every `poll_interval`
seconds, 2.0 by default (verl/trainer/ppo/v1/replay_buffer.py, ReplayBuffer.sample -> _wait_for_next_poll, which
sleeps `self.poll_interval`; trainer_base.py _build_replay_buffer passes none, so the default holds). A step's
generation therefore looks like a whole number of 2-s waits: with the tiny models of the CPU loop `timing_s/gen`
read 2.03 or 4.04 s every step, and validation waited the same way (benches/RESULTS.md "bf16 on a CPU, and the
replay buffer's poll"). On a GPU a step's generation takes tens of seconds, and the wait past its end is a second on average.

`PollBackoff` makes each wait a tenth of the time the sample() call has waited so far, at least 50 ms and at most
verl's interval: a generation is seen at most a tenth of its length (or 50 ms) after it ends, and one that takes
minutes is polled about 40 times more than at verl's fixed interval (a metadata read from TransferQueue's controller
each) before the waits reach verl's interval.
"""
from __future__ import annotations

import time

FIRST_POLL_S = 0.05
# each wait, as a share of the time waited so far in one sample() call
SHARE_OF_ELAPSED = 0.1


class PollBackoff:
    """The waits between polls of one sample() call: SHARE_OF_ELAPSED of the time since reset(), clamped to
    [first_s, cap_s]."""

    def __init__(self, cap_s: float, first_s: float = FIRST_POLL_S):
        if not 0 < first_s <= cap_s:
            raise ValueError(f"poll waits need 0 < first ({first_s}) <= cap ({cap_s})")
        self.first_s, self.cap_s = first_s, cap_s
        self._started = time.monotonic()

    def reset(self) -> None:
        """A new sample() call: its waits start short again."""
        self._started = time.monotonic()

    def wait_after(self, elapsed_s: float) -> float:
        """The wait before the next poll, `elapsed_s` into a sample() call."""
        return min(self.cap_s, max(self.first_s, SHARE_OF_ELAPSED * elapsed_s))

    def next(self) -> float:
        return self.wait_after(time.monotonic() - self._started)

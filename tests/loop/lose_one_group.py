"""A reward component for the loop's tests only: the first answer it is asked about in a run raises, so verl's
V1 agent loop tags that answer's whole prompt group `failure` (a lost group, as when the QE scorer fails one
request for good), and the guarded replay buffer drops the group whole (src/trainer/guard.py, point 2).

Every later answer is worth 0.0 (a constant: no advantage comes from it). "First in the run" is a marker file
created exclusively, at the path in $LOSE_ONE_GROUP_MARKER (the test passes it to every Ray worker through
accelerator.env), so exactly one answer raises however many reward workers there are.
    reward.plugins=[tests/loop/lose_one_group.py] +reward.weights.lose_one_group=0.01
"""
import os

from src.rewards.components import ComponentInput, RewardComponent, register_component

MARKER_ENV = "LOSE_ONE_GROUP_MARKER"
MESSAGE = "lose_one_group: this answer's reward fails on purpose (tests/loop/lose_one_group.py)"


@register_component
class LoseOneGroup(RewardComponent):
    name = "lose_one_group"
    in_every_run = False

    def value(self, x: ComponentInput) -> float | None:
        marker = os.environ.get(MARKER_ENV)
        if marker is None:
            raise RuntimeError(f"{MARKER_ENV} is not set in this reward worker: the test passes it through "
                               f"accelerator.env")
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return 0.0
        raise RuntimeError(MESSAGE)

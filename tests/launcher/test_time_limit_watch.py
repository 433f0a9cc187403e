"""src/node/training.py's TimeLimitWatch with a real child process, in-process signals, no Slurm.

The handler that was installed before the watch stands in for submitit's (which calls
`scontrol requeue` and exits the job); tests/slurm/test_time_limit.py runs the real one on the
dev cluster. The child is a small trainer that speaks the flag protocol of src/trainer/entry.py
through src/trainer/time_limit.py, or ignores it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from src.node import training
from src.trainer import time_limit

REPO = Path(__file__).resolve().parents[2]

# steps of 0.1 s; signals itself at step 3 (as Slurm signals every process of the step), which
# would kill it unless the runner blocked the signal in it
CHILD = """
import json, os, signal, sys, time
from src.trainer import time_limit
ckpt, obey = sys.argv[1], sys.argv[2] == "obey"
with open(os.path.join(ckpt, "child.json"), "w") as f:
    json.dump(sorted(s.name for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])), f)
for step in range(1, 600):
    time.sleep(0.1)
    if step == 3:
        os.kill(os.getpid(), signal.SIGUSR2)
    if obey and time_limit.requested(ckpt):
        time_limit.record_saved(ckpt, step, saved_now=True, finished=False)
        print(f"child: saved step {step}", flush=True)
        sys.exit(0)
print("child: ran out of steps", flush=True)
"""


class Requeue(Exception):
    pass


@pytest.fixture
def previous_handler():
    """Stands in for submitit's USR2 handler: records the call, then ends like it (it exits)."""
    calls = []

    def handler(signum, frame):
        calls.append(signum)
        raise Requeue()
    old = signal.signal(signal.SIGUSR2, handler)
    yield calls
    signal.signal(signal.SIGUSR2, old)


def run_child(tmp_path: Path, mode: str, stop_by_s: float, signal_after_s: float | None = 0.8):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PYTHONPATH"] = str(REPO)
    if signal_after_s is not None:
        # from outside, like slurmstepd
        subprocess.Popen(["bash", "-c", f"sleep {signal_after_s}; kill -USR2 {os.getpid()}"])
    watch = training.TimeLimitWatch(str(ckpt), stop_by_s)
    code = training.run([sys.executable, "-c", CHILD, str(ckpt), mode], env, tmp_path / "train.log", watch=watch)
    return code, ckpt, (tmp_path / "train.log").read_text()


def test_on_the_signal_training_saves_its_step_ends_and_the_job_is_handed_to_the_requeue(tmp_path, previous_handler):
    with pytest.raises(Requeue):
        run_child(tmp_path, "obey", stop_by_s=30)
    assert previous_handler == [signal.SIGUSR2]
    ckpt = tmp_path / "ckpt"
    assert "SIGUSR2" in json.loads((ckpt / "child.json").read_text())
    step = time_limit.saved(ckpt)["step"]
    log = (tmp_path / "train.log").read_text()
    assert "time limit: SIGUSR2 received; training saves the step in progress and ends (stopped in 30s" in log
    assert f"child: saved step {step}" in log
    assert f"time limit: step {step} saved now in {ckpt}; requeueing the job" in log
    # the handler is back: after the run the signal goes to what was there before
    assert signal.getsignal(signal.SIGUSR2) is not None and not signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_training_that_does_not_end_in_time_is_stopped_at_the_deadline_and_still_requeued(tmp_path, previous_handler):
    with pytest.raises(Requeue):
        run_child(tmp_path, "ignore", stop_by_s=1)
    log = (tmp_path / "train.log").read_text()
    assert "child: ran out of steps" not in log
    assert ("time limit: training was stopped at its deadline before the end of a step; the run resumes from the "
            "last checkpoint in") in log and "raise slurm.signal_delay_s" in log
    assert previous_handler == [signal.SIGUSR2]


def test_outside_a_submitit_job_the_signal_ends_the_run_with_one_line(tmp_path):
    old = signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    try:
        with pytest.raises(training.TimeLimitReached) as err:
            run_child(tmp_path, "obey", stop_by_s=30)
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert "\n" not in str(err.value)
    assert str(err.value).endswith("saved now in " + str(tmp_path / "ckpt") + "; run the same command again to "
                                   "continue from it")


def test_without_a_signal_nothing_changes(tmp_path, previous_handler):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    time_limit.request(ckpt, "SIGUSR2", 5)   # a stale flag of an earlier attempt
    code = training.run([sys.executable, "-c", "print('done')"], dict(os.environ), tmp_path / "train.log",
                      watch=training.TimeLimitWatch(str(ckpt), 30))
    assert code == 0 and previous_handler == []
    assert not time_limit.requested(ckpt)

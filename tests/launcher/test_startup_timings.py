"""A launch's start-up phases (src/node/startup.py): read from the training output as verl 0.9.1 writes it,
with the time verl's logger stamped into a line, each phase once, kept in <run dir>/timings.json as it goes.
The lines below are copied from a real `experiment=smoke_tiny accelerator=cpu` train.log; the real loop's
own timings.json is checked in tests/loop/test_smoke_on_cpu.py."""
from __future__ import annotations

import datetime as dt
import json
import time

from src.node import startup
from src.trainer.progress import parse_step_end, step_end_line

T0 = dt.datetime(2026, 11, 28, 1, 6, 24).timestamp()
LINES = [
    "INFO:2026-11-28 01:06:55,610:Platform override from VERL_PLATFORM: cpu",
    "2026-11-28 01:07:00,322\tINFO worker.py:2038 -- Started a local Ray instance.",
    "\x1b[36m(TimeLimitTaskRunner pid=6041)\x1b[0m INFO:2026-11-28 01:07:14,759:train and validate dataloader "
    "initialized, train dataset size: 16, val dataset size: 4",
    "\x1b[36m(TimeLimitTaskRunner pid=6041)\x1b[0m INFO:2026-11-28 01:07:15,461:create worker group "
    "dict_keys(['actor_rollout_ref'])",
    "\x1b[36m(TimeLimitTaskRunner pid=6041)\x1b[0m INFO:2026-11-28 01:07:24,932:actor and ref model engine initialized",
    "\x1b[36m(TimeLimitTaskRunner pid=6041)\x1b[0m INFO:2026-11-28 01:07:24,960:reward loop manager initialized",
    "\x1b[36m(TimeLimitTaskRunner pid=6041)\x1b[0m INFO:2026-11-28 01:08:02,024:checkpoint engine manager initialized",
    "\x1b[36m(TimeLimitTaskRunner pid=6041)\x1b[0m INFO:2026-11-28 01:08:02,036:all initialize finished, ready to fit",
    "\x1b[36m(TimeLimitTaskRunner pid=6041)\x1b[0m " + step_end_line(1, T0 + 130.5),
    # a later launch's markers do not move a phase already seen
    "\x1b[36m(TimeLimitTaskRunner pid=6041)\x1b[0m INFO:2026-11-28 01:09:14,751:create worker group dict_keys([])",
    "\x1b[36m(TimeLimitTaskRunner pid=6041)\x1b[0m " + step_end_line(2, T0 + 137.0),
]


def test_phases_read_from_verls_lines_at_the_time_verl_stamped(tmp_path):
    clock = startup.StartupClock(t0=T0)
    clock.mark("plan", T0 + 12.0)
    clock.write_to(tmp_path)
    for line in LINES:
        clock.observe(line)
    assert clock.phases == {"plan": 12.0, "ray_up": 36.32, "dataloader_ready": 50.76, "worker_group_created": 51.46,
                            "actor_ready": 60.93, "reward_workers_ready": 60.96, "vllm_serving": 98.02,
                            "ready_to_fit": 98.04, "first_step_end": 130.5}
    # in the order PHASES lists them, every phase a single-node launch without a critic meets but the launcher's own
    assert [p for p in startup.PHASES if p in clock.phases] == list(clock.phases)
    (launch,) = startup.read(tmp_path)
    assert launch == {"started": "2026-11-28T01:06:24", "phases": clock.phases}


def test_a_line_without_verls_stamp_takes_the_time_it_arrived():
    clock = startup.StartupClock(t0=time.time() - 5)
    before = time.time()
    clock.observe("(driver) Connected to Ray cluster. View the dashboard at ...")
    assert 5 <= clock.phases["ray_up"] <= time.time() - before + 5.5


def test_each_launch_is_kept_and_rewritten_as_its_phases_arrive(tmp_path):
    first = startup.StartupClock(t0=T0)
    first.write_to(tmp_path)
    first.mark("training_started", T0 + 20)
    second = startup.relaunch(tmp_path)  # the smoke's resume, in the same launcher process
    second.mark("training_started")
    # a phase the first launch marks after the second began stays in the first's entry
    first.mark("first_step_end", T0 + 40)
    launches = startup.read(tmp_path)
    assert [sorted(l["phases"]) for l in launches] == [["first_step_end", "training_started"], ["training_started"]]
    assert launches[1]["phases"]["training_started"] < 5
    assert not list(tmp_path.glob("*.tmp"))
    json.loads((tmp_path / startup.TIMINGS).read_text())  # whole after every write


def test_the_launch_starts_when_its_process_did():
    """A fresh process reads its own start: before its first statement (the interpreter's start-up counts), and
    not long before the command that started it."""
    import subprocess
    import sys

    before = time.time()
    out = subprocess.run([sys.executable, "-c", "import time; now = time.time()\n"
                          "from src.node.startup import StartupClock; print(StartupClock().t0, now)"],
                         capture_output=True, text=True, timeout=120, check=True)
    t0, first_statement = map(float, out.stdout.split())
    # /proc's clock ticks are 10 ms: the start may read up to one tick before the parent's clock
    assert before - 0.02 <= t0 <= first_statement, (before, t0, first_statement)
    assert first_statement - t0 < 60


def test_the_trainers_step_line_reads_back():
    assert parse_step_end(step_end_line(7, 1234.5)) == (7, 1234.5)
    assert parse_step_end("step:7 - actor/pg_loss:0.1") is None


"""src/node/stall.py and src/plan/stall.py: a run whose steps stop ending is stopped, its processes' stacks
dumped by py-spy into the run dir, in one line with its own exit code.

Here the runner (src/node/training.py run) watches a small trainer that prints the trainer's real step-end
line (src/trainer/progress.py) three times and then hangs, with a helper process in its group stopped by
SIGSTOP, as a hung vLLM engine or worker would be. tests/loop/test_stall_on_cpu.py stops verl's own vLLM
engine in real steps.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from src.node import stall, training
from src.plan.stall import StallPlan, plan_stall
from src.plan.values import PlanError

REPO = Path(__file__).resolve().parents[2]

HANGING = """
import os, signal, subprocess, sys, time
from src.trainer.progress import step_end_line
helper = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"])
for step in (1, 2, 3):
    time.sleep(0.2)
    print(step_end_line(step, total=10), flush=True)
print("trainer: hangs", flush=True)
time.sleep(120)
print("trainer: woke up", flush=True)
"""


def test_a_run_whose_steps_stop_ending_is_stopped_with_every_process_stacks_in_the_run_dir(tmp_path):
    plan = StallPlan(timeout_s=None, first_step_s=60, multiple=5, min_s=3)
    watch = stall.StallWatch(plan, tmp_path, poll_s=0.2)
    t0 = time.monotonic()
    with pytest.raises(training.Stalled) as err:
        training.run([sys.executable, "-c", HANGING], {**os.environ, "PYTHONPATH": str(REPO)}, tmp_path / "train.log",
                     stall=watch)
    took = time.monotonic() - t0
    line = str(err.value)
    assert "\n" not in line and line.startswith("stalled: no training step ended in ")
    assert "after step 3 (the bound: 3 s, trainer.stall_*)" in line, line
    # the trainer's own stack cannot name a verl phase; the stopped helper is named
    assert "the phase could not be read from the TaskRunner's stack; stopped: " in line, line
    (folder,) = tmp_path.glob("stall-*")
    assert f"stacks of 2 processes in {folder}; training stopped" in line, line
    listing = (folder / "processes.txt").read_text().splitlines()
    assert listing[0] == "pid\tstate\tcommand" and len(listing) == 3
    trainer_pid, helper_pid = (int(row.split("\t")[0]) for row in listing[1:])
    assert listing[2].split("\t")[1] == "T" and f"(pid {helper_pid})" in line
    assert "<module> (<string>:" in (folder / f"{trainer_pid}.txt").read_text()  # py-spy's read of its stack
    log = (tmp_path / "train.log").read_text()
    assert "trainer: hangs" in log and "trainer: woke up" not in log and line in log
    assert took < 60, took  # stopped at the bound, not when the trainer's sleep ended
    # nothing of the run left: the stopped helper too (SIGTERM cannot end a stopped process; the group's SIGKILL does)
    for pid in (trainer_pid, helper_pid):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]


# a trainer whose guard leaves its stop reason (the real writer, src/trainer/stop_reason.py) when the stall's SIGTERM
# cuts its hung rollouts, as verl's agent loops then fail and the guard counts lost groups (the CI of 3109815);
# "before": the guard stopped the run first, and its unwinding hung
STOPS_ON_SIGTERM = """
import signal, sys, time
from src.trainer import stop_reason
from src.trainer.progress import step_end_line
LINE = "training stopped at step 3: 2 training group(s) lost to failed rollout or reward calls"
def lost_groups(*_):
    stop_reason.leave(LINE)
    sys.exit(1)
for step in (1, 2, 3):
    time.sleep(0.2)
    print(step_end_line(step, total=10), flush=True)
if sys.argv[1] == "before":
    stop_reason.leave(LINE)  # then hangs, and SIGTERM ends it
else:
    signal.signal(signal.SIGTERM, lost_groups)
time.sleep(120)
"""


@pytest.mark.parametrize("left", ["after", "before"])
def test_a_stop_reason_left_in_the_stalls_unwinding_is_not_the_runs_fault(tmp_path, left):
    watch = stall.StallWatch(StallPlan(timeout_s=None, first_step_s=60, multiple=5, min_s=3), tmp_path, poll_s=0.2)
    raised = training.Stalled if left == "after" else training.ServiceFailure
    with pytest.raises(raised) as err:
        training.run([sys.executable, "-c", STOPS_ON_SIGTERM, left], {**os.environ, "PYTHONPATH": str(REPO)},
                     tmp_path / "train.log", stall=watch)
    line, log = str(err.value), (tmp_path / "train.log").read_text()
    if left == "after":
        assert line.startswith("stalled: no training step ended in ") and "after step 3" in line, line
        assert "after the stall guard's stop, the trainer stopped too: training stopped at step 3: 2 training" in log
    else:
        assert line.startswith("training stopped at step 3: 2 training group(s) lost"), line


def test_steps_that_keep_ending_are_never_called_stalled(tmp_path):
    steady = ("import time\nfrom src.trainer.progress import step_end_line\n"
              "for step in range(1, 16):\n    time.sleep(0.3)\n    print(step_end_line(step), flush=True)\n")
    watch = stall.StallWatch(StallPlan(timeout_s=None, first_step_s=60, multiple=5, min_s=1), tmp_path, poll_s=0.1)
    code = training.run([sys.executable, "-c", steady], {**os.environ, "PYTHONPATH": str(REPO)},
                        tmp_path / "train.log", stall=watch)
    assert code == 0 and watch.line is None and not list(tmp_path.glob("stall-*"))


def test_the_bound_follows_the_run():
    derived = StallPlan(timeout_s=None, first_step_s=3600, multiple=5, min_s=600)
    assert derived.limit(None) == 3600                  # until the first step ends: start-up included
    assert derived.limit(30) == 600 and derived.limit(400) == 2000
    assert StallPlan(timeout_s=90, first_step_s=3600, multiple=5, min_s=600).limit(400) == 90
    plan = plan_stall({"stall_timeout_s": None, "stall_first_step_s": 3600, "stall_multiple": 5, "stall_min_s": 600})
    assert plan == derived
    with pytest.raises(PlanError, match="trainer.stall_multiple=0.5"):
        plan_stall({"stall_timeout_s": None, "stall_first_step_s": 3600, "stall_multiple": 0.5, "stall_min_s": 600})


def test_the_phase_is_the_innermost_verl_step_function_in_the_task_runners_stack():
    def runner(*functions):
        stack = "\n".join(f"    {fn} (verl/trainer/ppo/v1/trainer_base.py:{i})" for i, fn in enumerate(functions))
        return {7: ("S", "ray::TimeLimitTaskRunner.run", stack)}
    assert stall.phase_of(runner("fit", "step", "_step_once", "sample", "get")) == "the rollout phase hung"
    assert stall.phase_of(runner("fit", "on_step_end", "update_weights")) == "the weight sync phase hung"
    assert stall.phase_of(runner("fit", "_save_checkpoint", "save_checkpoint")) == "the save phase hung"
    assert stall.phase_of(runner("fit", "step", "_step_once", "_compute_reward_colocate")) == "the reward phase hung"
    dumps = {**runner("fit", "step", "_step_once", "_update_actor", "get"), 9: ("T", "VLLM::EngineCore", "")}
    assert stall.phase_of(dumps) == "the update phase hung; stopped: VLLM::EngineCore (pid 9)"


def test_the_launcher_refuses_a_bound_out_of_range_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "src.launch", "experiment=smoke_tiny", "accelerator=cpu",
                           "dry_run=true", f"paths.output_dir={tmp_path}", "trainer.stall_timeout_s=0"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "trainer.stall_timeout_s" in done.stderr

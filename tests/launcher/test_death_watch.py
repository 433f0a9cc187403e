"""src/node/deaths.py: a training process that dies while training runs ends the run within seconds, in one line
naming what died; ends by design (after the last step, once training is being stopped, Ray's pool workers and
function tasks) are not deaths.

Here the runner (src/node/training.py run) watches a small trainer whose helper processes carry the titles verl's
and vLLM's processes have (`ray::WorkerDict`, `VLLM::EngineCore`, set with bash's `exec -a`); the trainer kills one
with SIGKILL after step 2 and then hangs, as verl does when vLLM's engine dies (or exits 1, as it does when an
actor dies). tests/slurm/test_real_loop_faults.py kills verl's own processes in real steps.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from src.node import deaths, training
from src.trainer import checkpoints

REPO = Path(__file__).resolve().parents[2]

TRAINER = """
import os, signal, subprocess, sys, time
from src.trainer.progress import step_end_line
titles = sys.argv[1].split(",")
# each helper lives until 2 s after the trainer has ended (it polls its parent), when the runner has long seen the
# trainer's exit and stopped scanning: a helper the trainer killed on its way out would be a death whenever a scan of
# a loaded machine fell between the kill and the exit (the CI of 81d54f5). Their output goes nowhere, so they hold no
# pipe of the run's open
UNTIL_PARENT_ENDS = f"while os.getppid() == {os.getpid()}:\\n    time.sleep(0.1)\\ntime.sleep(2)"
# "fork:<title>": a process with that title that forks a child (which carries the title) ending after 1.5 s
FORKS = "if os.fork() == 0:\\n    time.sleep(1.5)\\n    os._exit(0)\\n"
helpers = [subprocess.Popen(["bash", "-c", f"exec -a '{t.removeprefix('fork:')}' {sys.executable} -c 'import os, time\\n"
                             f"{FORKS if t.startswith('fork:') else ''}{UNTIL_PARENT_ENDS}'"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for t in titles]
# seen alive by the watch: each helper has its title (bash's exec, slow on a loaded machine: the fast tier of 5e2c074
# once killed one before any scan had seen it), then a few of the watch's scans (0.2 s apart) pass
for helper, title in zip(helpers, titles):
    while not open(f"/proc/{helper.pid}/cmdline", "rb").read().startswith(title.removeprefix("fork:").encode()):
        time.sleep(0.02)
time.sleep(0.8)
for step in (1, 2):
    print(step_end_line(step, total=int(sys.argv[3])), flush=True)
    time.sleep(0.3)
if sys.argv[7:] == ["first"]:   # a stop no death made (a full disk's save, DAPO's bound), before the unwinding
    from src.trainer import stop_reason
    stop_reason.leave(sys.argv[6], rules_out_a_death=True)
if sys.argv[2] != "none":
    killed = [helpers[i] for i in map(int, sys.argv[2].split("+"))]
    for helper in killed:   # "0+1": two at once, within one scan: both signalled before either is waited for (a
        os.kill(helper.pid, signal.SIGKILL)   # scan of a loaded machine fell between kill, wait and kill in a fast tier)
    for helper in killed:
        helper.wait()
    print("trainer: a helper was killed", flush=True)
time.sleep(float(sys.argv[4]))
print("trainer: woke up", flush=True)
if sys.argv[6:7] and not sys.argv[7:]:   # the trainer's guard stops with its reason (src/trainer/guard.py stop)
    open(os.environ["QE_TRAINING_STOP_FILE"], "w").write(sys.argv[6] + "\\n")
sys.exit(int(sys.argv[5]))
"""


def _run(tmp_path, titles, kill, total=10, then_s=60.0, code=0, guard_stop=None, no_death_stop=None):
    """The trainer above under the death watch: (what run returned or raised, seconds, the watch, the helpers' pids
    as the log does not say them)."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    # the trainers that end by themselves do so 0.8 s after the kill: the grace leaves them 2 s more on a loaded
    # machine (CI's three workers on two cores beside the real loop's processes)
    watch = deaths.DeathWatch(str(ckpt), poll_s=0.2, grace_s=3.0)
    command = [sys.executable, "-c", TRAINER, ",".join(titles), str(kill), str(total), str(then_s), str(code)]
    command += [guard_stop] if guard_stop else [no_death_stop, "first"] if no_death_stop else []
    t0 = time.monotonic()
    try:
        result = training.run(command, {**os.environ, "PYTHONPATH": str(REPO)}, tmp_path / "train.log", death=watch)
    except deaths.Died as exc:
        result = exc
    return result, time.monotonic() - t0, watch


def test_a_killed_engine_that_leaves_training_waiting_stops_the_run_in_seconds_named(tmp_path):
    (tmp_path / "ckpt").mkdir()
    checkpoints.write_tracker(tmp_path / "ckpt", 2)
    died, took, _ = _run(tmp_path, ["ray::WorkerDict", "VLLM::EngineCore"], kill=1)
    assert isinstance(died, deaths.Died), died
    line = str(died)
    assert "\n" not in line and line.startswith("died: the vLLM engine (VLLM::EngineCore, pid "), line
    assert "died after step 2 (killed or crashed" in line and "did not end within 3 s of it and was stopped" in line
    assert f"a relaunch resumes from step 2 in {tmp_path / 'ckpt'}" in line, line
    log = (tmp_path / "train.log").read_text()
    assert "trainer: a helper was killed" in log and "trainer: woke up" not in log and line in log
    assert took < 20, took   # the grace and the stop, not the trainer's 60 s wait


def test_training_that_fails_after_a_death_names_what_died(tmp_path):
    died, took, _ = _run(tmp_path, ["ray::WorkerDict.actor_rollout_ref_update_actor"], kill=0, then_s=0.8, code=1)
    assert isinstance(died, deaths.Died), died
    line = str(died)
    assert line.startswith("died: an FSDP worker (ray::WorkerDict.actor_rollout_ref_update_actor, pid "), line
    assert ", last seen in actor_rollout_ref_update_actor) died after step 2" in line, line
    assert "training then exited with code 1; no checkpoint was saved yet: a relaunch starts over" in line, line
    assert "woke up" in (tmp_path / "train.log").read_text()   # it ended by itself, within the grace


def test_a_guard_stop_that_follows_a_death_is_named_as_the_death(tmp_path):
    """vLLM's engine killed before the step's requests reach it: they fail at once, the trainer's guard stops on
    the lost groups (the stop file) and training exits 1 within the grace. The death is the fault (a Slurm job is
    requeued for it), with the guard's reason after it."""
    died, _, _ = _run(tmp_path, ["ray::WorkerDict", "VLLM::EngineCore"], kill=1, then_s=0.8, code=1,
                      guard_stop="training stopped at step 3: 4 training group(s) lost to failed rollout or reward "
                                 "calls (4 in this run, scorer.lost_groups_allowed=0); QE scorer http://x, its log: y")
    assert isinstance(died, deaths.Died), died
    line = str(died)
    assert line.startswith("died: the vLLM engine (VLLM::EngineCore, pid ") and "died after step 2" in line, line
    assert "training then exited with code 1 (training stopped at step 3: 4 training group(s) lost to failed " \
           "rollout or reward calls (4 in this run, scorer.lost_groups_allowed=0)); no checkpoint" in line, line


@pytest.mark.parametrize("line", [
    "checkpoint: saving step 3 failed (the disk is full: 0 KiB free); run the same command again",
    "DAPO stopped at step 3: 11 generation batches drawn (88 prompts) without 8 groups that pass the filter; "
    "bound: algo.filter_groups.max_num_gen_batches=10"])
def test_workers_that_end_after_a_stop_no_death_made_are_not_its_cause(tmp_path, line):
    """A save that failed on a full disk (no actor died: src/trainer/checkpoints.py), or DAPO's bound
    (src/trainer/guard.py before_refill), leaves a reason that rules out a death; verl's unwinding then ends the FSDP
    workers, which a loaded machine's scan sees before the training command exits (the CI of ace55b0: "died: an FSDP
    worker ... died after step 1"), maybe past the grace. The stop's line stays the run's, and training is not
    stopped for it."""
    with pytest.raises(training.ServiceFailure) as stopped:
        _run(tmp_path, ["ray::WorkerDict", "ray::WorkerDict"], kill="0+1", then_s=4.5, code=1, no_death_stop=line)
    assert str(stopped.value) == line
    log = (tmp_path / "train.log").read_text()
    assert "woke up" in log and "death watch:" not in log   # it ended by itself, no death seen


@pytest.mark.parametrize("ended", ["ray::TransferQueueController", "ray::TimeLimitTaskRunner.run"])
def test_a_guard_stop_is_the_guards_when_what_ended_is_verls_own_unwinding(tmp_path, ended):
    """DAPO's bound (or any guard stop, or a save that failed: src/trainer/checkpoints.py) raises in verl's
    TaskRunner, whose `finally: tq.close()` kills the transfer queue's actors while the driver still runs, and which
    then ends itself (tests/loop/test_full_disk_on_cpu.py saw either first): their end follows the stop, the
    trainer's line stays the run's."""
    with pytest.raises(training.ServiceFailure, match="^training stopped at step 1: DAPO's bound$"):
        _run(tmp_path, ["ray::WorkerDict", ended], kill=1, then_s=0.8, code=1,
             guard_stop="training stopped at step 1: DAPO's bound")


def test_a_dead_engine_is_named_before_the_queue_that_ended_with_it(tmp_path):
    """Both gone within one scan (the engine killed, then the guard's stop and verl's tq.close): the engine is what
    died; the transfer queue's end followed."""
    died, _, _ = _run(tmp_path, ["ray::TransferQueueController", "VLLM::EngineCore"], kill="0+1", then_s=0.8, code=1,
                      guard_stop="training stopped at step 3: 8 training group(s) lost")
    assert isinstance(died, deaths.Died) and str(died).startswith("died: the vLLM engine (VLLM::EngineCore, "), died


def test_a_guard_stop_without_a_death_is_the_guards(tmp_path):
    with pytest.raises(training.ServiceFailure, match="^training stopped at step 3: lost$"):
        _run(tmp_path, ["ray::WorkerDict"], kill="none", then_s=0.5, code=1, guard_stop="training stopped at step 3: lost")


RAY_REPORT = """
import os, signal, subprocess, sys, time
from src.trainer.progress import step_end_line
helpers = [subprocess.Popen(["bash", "-c", f"exec -a '{t}' sleep 300"])
           for t in ("ray::TransferQueueController", "ray::WorkerDict")]
time.sleep(0.8)
print(step_end_line(1, total=10), flush=True)
for h in helpers:  # both gone before the next scan: the worker killed, the queue in the teardown after it
    os.kill(h.pid, signal.SIGKILL)
    h.wait()
print("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.", flush=True)
print(f"\\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict\\n\\tactor_id: 65\\n\\tpid: {helpers[1].pid}",
      flush=True)
time.sleep(0.6)
sys.exit(1)
"""


def _died_line(tmp_path, script: str) -> str:
    """The Died line of `script` run as training under the death watch (whose scans are 0.5 s apart)."""
    watch = deaths.DeathWatch(str(tmp_path), poll_s=0.5, grace_s=5)
    with pytest.raises(deaths.Died) as err:
        # the script's argument: the log, where it may wait for the watch's own line
        training.run([sys.executable, "-c", script, str(tmp_path / "train.log")],
                     {**os.environ, "PYTHONPATH": str(REPO)}, tmp_path / "train.log", death=watch)
    return str(err.value)


def test_when_processes_end_together_the_one_ray_reports_dead_is_named(tmp_path):
    line = _died_line(tmp_path, RAY_REPORT)
    assert line.startswith("died: an FSDP worker (ray::WorkerDict, pid "), line
    assert "died after step 1" in line and "training then exited with code 1" in line, line


RAY_REPORT_AFTER_THE_SCAN = """
import os, signal, subprocess, sys, time
from pathlib import Path
from src.trainer.progress import step_end_line
helpers = []
# the TaskRunner seen by an earlier scan than the worker (the scan takes it first), and both seen alive: scans are
# 0.5 s apart, later on a loaded machine (Ray's word names only a process the watch saw)
for title, seen_in in (("ray::TimeLimitTaskRunner.run", 1.0), ("ray::WorkerDict", 2.5)):
    helpers.append(subprocess.Popen(["bash", "-c", f"exec -a '{title}' sleep 300"]))
    time.sleep(seen_in)
print(step_end_line(3, total=10), flush=True)
for h in helpers:  # the worker killed while saving, the save's error, the driver's exit: both gone within one scan
    os.kill(h.pid, signal.SIGKILL)
for h in helpers:
    h.wait()
log, deadline = Path(sys.argv[1]), time.monotonic() + 60
while "death watch:" not in log.read_text() and time.monotonic() < deadline:
    time.sleep(0.1)  # the scan has named one (the TaskRunner, seen first), then Ray's word reaches the output
print("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.", flush=True)
print(f"\\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict\\n\\tactor_id: 65\\n\\tpid: {helpers[1].pid}",
      flush=True)
time.sleep(60)  # the driver's exit is slow (a loaded machine): the watch stops it
"""


def test_a_stop_names_the_actor_ray_reported_after_the_scan(tmp_path):
    """The CI of 222276c (tests/slurm/test_real_loop_faults.py): an FSDP worker killed while saving, the save failed,
    verl's driver printed Ray's report and began to exit, and one scan saw the worker and the TaskRunner gone, the
    TaskRunner taken first; the driver's exit then outlasted the grace, and the stop's line named the TaskRunner.
    Ray's word, in the output by the stop, names the worker."""
    line = _died_line(tmp_path, RAY_REPORT_AFTER_THE_SCAN)
    log = (tmp_path / "train.log").read_text()
    assert "death watch: ray::TimeLimitTaskRunner.run 300 (pid " in log, log   # the scan's guess, as the CI saw it
    assert line.startswith("died: an FSDP worker (ray::WorkerDict, pid "), line
    assert "died after step 3" in line and "did not end within 5 s of it and was stopped" in line, line


READ_AFTER_THE_SCAN = """
import os, signal, subprocess, sys, time
from pathlib import Path
from src.trainer.progress import step_end_line
worker = subprocess.Popen(["bash", "-c", "exec -a 'ray::WorkerDict' sleep 300"])
time.sleep(1.5)  # seen by the watch's scans (0.5 s apart)
ended = time.time()  # step 3 ends; its line is printed, then the worker is killed
os.kill(worker.pid, signal.SIGKILL)
worker.wait()
log, deadline = Path(sys.argv[1]), time.monotonic() + 60
while "death watch:" not in log.read_text() and time.monotonic() < deadline:
    time.sleep(0.1)
# the line reaches the watch only now, as when the output reader runs late on a loaded machine
print(step_end_line(3, epoch=ended, total=10), flush=True)
print(step_end_line(4, total=10), flush=True)  # a step that ended after the death does not count
time.sleep(60)
"""


def test_a_step_line_read_after_the_scan_still_counts_by_its_own_time(tmp_path):
    """A fast tier: the trainer printed step 3's line and its worker was killed; the scan found the worker gone before
    the output reader had read the line, and the stop said "died before the first step ended"."""
    line = _died_line(tmp_path, READ_AFTER_THE_SCAN)
    assert line.startswith("died: an FSDP worker (ray::WorkerDict, pid "), line
    assert "died after step 3 " in line, line


EXITING = """
import subprocess, sys, time
from src.trainer.progress import step_end_line
# perl's $0 rewrites the process's own argument memory: blanked, /proc/<pid>/cmdline reads empty while the process
# still runs, as a killed process's does between releasing its memory and becoming a zombie (a scan of a loaded
# machine landed there in a fast tier: the worker's title was taken as "", never seen gone, and the stop's line
# failed). It ends with the trainer and holds no pipe of the run's open.
worker = subprocess.Popen(["perl", "-e", '$SIG{USR1} = sub { $0 = "" }; $0 = "ray::WorkerDict"; my $p = getppid(); '
                           'select(undef, undef, undef, 0.1) while getppid() == $p'],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while not open(f"/proc/{worker.pid}/cmdline", "rb").read().startswith(b"ray::WorkerDict"):
    time.sleep(0.02)
time.sleep(0.8)  # seen by the watch's scans (0.5 s apart)
print(step_end_line(3, total=10), flush=True)
worker.send_signal(10)  # SIGUSR1: the worker's command line reads empty from now on
time.sleep(60)  # training hangs, as verl's does when its worker died: the watch stops it
"""


def test_a_worker_whose_command_line_reads_empty_is_gone_under_its_last_title(tmp_path):
    line = _died_line(tmp_path, EXITING)
    assert line.startswith("died: an FSDP worker (ray::WorkerDict, pid "), line
    assert "died after step 3" in line and "did not end within 5 s of it and was stopped" in line, line


RAY_REPORTS_THE_QUEUE = """
import os, signal, subprocess, sys, time
from src.trainer.progress import step_end_line
helpers = [subprocess.Popen(["bash", "-c", f"exec -a '{t}' sleep 300"])
           for t in ("ray::SimpleStorageUnit", "VLLM::EngineCore")]
time.sleep(0.8)
print(step_end_line(2, total=10), flush=True)
for h in reversed(helpers):  # the engine killed, the guard's stop, verl's tq.close(): both gone before the next scan
    os.kill(h.pid, signal.SIGKILL)
    h.wait()
# the queue's callers are told of its death by Ray, and the driver prints it
print("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.", flush=True)
print(f"\\tclass_name: SimpleStorageUnit\\n\\tactor_id: 66\\n\\tpid: {helpers[0].pid}", flush=True)
time.sleep(0.6)
open(os.environ["QE_TRAINING_STOP_FILE"], "w").write("training stopped at step 3: 5 training group(s) lost\\n")
sys.exit(1)
"""


def test_a_dead_engine_is_named_when_ray_reports_the_queue_that_ended_after_it(tmp_path):
    """CI, 2026-11-29 (tests/slurm/test_real_loop_faults.py on a loaded machine): the engine killed, the step's requests
    failed at once, the guard stopped and verl's unwinding killed the transfer queue's storage, which Ray reported dead
    before the watch's next scan saw both gone. The engine is what died; Ray's word on the queue does not outrank it."""
    line = _died_line(tmp_path, RAY_REPORTS_THE_QUEUE)
    assert line.startswith("died: the vLLM engine (VLLM::EngineCore, pid "), line
    assert "training then exited with code 1 (training stopped at step 3: 5 training group(s) lost)" in line, line


@pytest.mark.parametrize("case", ["after the last step", "pool, task and forked workers"])
def test_ends_by_design_are_not_deaths(tmp_path, case):
    # a forked child of verl's TaskRunner carries its title (a dataloader worker) and ends by design
    titles, total = (["ray::WorkerDict"], 2) if case == "after the last step" else (
        ["ray::IDLE", "ray::get_master_addr_port", "ray::DashboardAgent", "fork:ray::TimeLimitTaskRunner.run"], 10)
    code, _, watch = _run(tmp_path, titles, kill=0, total=total, then_s=3)
    assert code == 0 and watch.line is None
    assert "trainer: woke up" in (tmp_path / "train.log").read_text()


def test_processes_the_launcher_stops_are_not_deaths(tmp_path):
    """A service's failure stops training (TrainingStop: SIGTERM to its group): its processes end, and the run
    ends with the service's line, not a death's."""
    stop = training.TrainingStop()
    watch = deaths.DeathWatch(str(tmp_path), poll_s=0.2, grace_s=0.5)

    def fail_later():
        time.sleep(2.0)
        stop("the scorer died")
    threading.Thread(target=fail_later, daemon=True).start()
    command = [sys.executable, "-c", TRAINER, "ray::WorkerDict,VLLM::EngineCore", "none", "10", "60", "0"]
    with pytest.raises(training.ServiceFailure, match="the scorer died"):
        training.run(command, {**os.environ, "PYTHONPATH": str(REPO)}, tmp_path / "train.log", stop=stop,
                     death=watch)
    assert watch.line is None and "died:" not in (tmp_path / "train.log").read_text()


def test_the_titles_watched():
    assert deaths.vital("ray::WorkerDict.actor_rollout_ref_update_weights") == (
        "WorkerDict", "actor_rollout_ref_update_weights")
    assert deaths.vital("ray::TimeLimitTaskRunner.run") == ("TimeLimitTaskRunner", "run")
    assert deaths.vital("VLLM::EngineCore") == ("EngineCore", None)
    for title in ("ray::IDLE", "ray::DashboardAgent", "ray::get_master_addr_port", "/usr/bin/python -m src.trainer",
                  "/x/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/x"):
        assert deaths.vital(title) is None, title
    assert deaths.role("TimeLimitTaskRunner").startswith("verl's TaskRunner")

"""Dead and stopped training processes in a Slurm job that trains for real (issue 48, items 1, 2, 3 and 5): one job
of `--multirun hydra/launcher=slurm experiment=learn_tiny accelerator=cpu` on the dev cluster, verl's own trainer, its
processes killed with SIGKILL mid-step or stopped with SIGSTOP, a save every two steps (trainer.save_freq=2) and two
requeues after a fault allowed (slurm.max_stall_requeues=2).

1. vLLM's engine (`VLLM::EngineCore`) killed in step 3. verl by itself would wait in the weight sync to it for ever
   (src/node/deaths.py); the launcher's death watch stops training within seconds with one line naming the engine
   and the checkpoint of step 2 (step 4's save cannot come: the weight sync after step 3 waits for the dead
   engine), and the job is requeued (src/slurm/requeue.py). Where step 3's requests reach the engine only after its
   death (a loaded machine), they fail at once and the trainer's guard stops on the lost groups: the line still
   names the engine (tests/launcher/test_death_watch.py), and the job is requeued alike.
2. The requeued job resumes from step 2 (its first step is step 3). Its FSDP worker (`ray::WorkerDict`) killed as
   step 4's checkpoint is being written: verl's save fails with Ray's ActorDiedError, the partial `global_step_4/`
   is removed and the tracker still names step 2 (src/trainer/checkpoints.py); the line names the FSDP worker, and
   the job is requeued again.
3. The second requeue resumes from step 2 and trains steps 3 and 4 (step 4 saved). Its FSDP worker then stopped
   (SIGSTOP): a worker that hangs, the step waits on it for ever. The stall guard (src/node/stall.py) stops the run
   at its bound (here max(STALL_MIN_S, 2 x the longest step of the attempt)) with one line naming the phase the
   TaskRunner waits in and the stopped worker, the stacks of every training process in the run dir; with its two
   requeues spent the job fails with that line, and the checkpoint of step 4 is whole.

Each death's line comes within DEAD_BOUND_S of the kill (the watch's poll and grace, the group's stop; the times are
printed). verl's TaskRunner killed mid-step ends the run by itself (Ray's ActorDiedError; its line 4 s after the kill
in a run of this job by hand), named by the same watch (tests/launcher/test_death_watch.py). A stopped vLLM engine
is tests/loop/test_stall_on_cpu.py; each more start here costs CI about two minutes (a stall's bound is a wait,
not CPU). This runs in the Slurm group, beside the CPU loop's launches, which a local launch of the same faults
would lengthen; the death watch and the stall guard are the same code in a local run.
"""
from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

from src.slurm.requeue import FAULTS_FILE
from src.trainer import progress
from src.trainer.checkpoints import tracked_step
from tests.helpers.launches import checkpoint_dir, metrics_files
from tests.helpers.loop_processes import titled_with_env
from tests.helpers.slurm_sweeps import RequeuedStart

# from the kill to the fault's line in the log as the job ends: the watch's poll (2 s) and grace (15 s), the group's
# stop (SIGTERM, Ray's and vLLM's exit), the services' stop, on 2 cores shared with the rest of the suite
DEAD_BOUND_S = 60
SWEEP_TIMEOUT_S = 1500
STEPS = 30
# a fault's line comes within DEAD_BOUND_S; past this, the test fails without holding CI
LINE_TIMEOUT_S = 300
# the stall bound's floor: above the death watch's time to its line (a kill is named as a death, not a stall), and
# the bound of attempt 3 (max(STALL_MIN_S, 2 x its longest step)), which the stopped worker waits out
STALL_MIN_S = 90
REQUEUES = 2


def _steps_since_last_start(log: Path) -> list[int]:
    """Steps ended by the job's current attempt, from its training log (each attempt appends to it)."""
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    starts = [i for i, line in enumerate(lines) if "requeueing the job" in line]
    return [e[0] for line in lines[starts[-1] + 1 if starts else 0:] if (e := progress.parse_step_end(line))]


def _kill(run_dir: Path, title_has: str) -> tuple[int, str, float]:
    """SIGKILL the job's process whose title has `title_has` (its environment names the run dir: the CPU loop's
    launches of other tests run beside it); (pid, title, when)."""
    found = _one(title_has, run_dir)
    os.kill(found[0], signal.SIGKILL)
    return found[0], found[1], time.monotonic()


def _line_within(log: Path, start: str, has: str, since: float) -> tuple[str, float]:
    """The first line of `log` starting with `start` that has `has` (the fault's line as the job ends: the watch
    wrote it without the requeue's outcome before), and when it was seen (seconds after `since`)."""
    deadline = since + LINE_TIMEOUT_S
    while time.monotonic() < deadline:
        found = [line for line in log.read_text(errors="replace").splitlines()
                 if line.startswith(start) and has in line]
        if found:
            return found[0], time.monotonic() - since
        time.sleep(0.5)
    raise AssertionError(f"no line {start!r} with {has!r} in {log} within {LINE_TIMEOUT_S} s; its lines about "
                         f"faults, saves and steps:\n" + "\n".join(_telling(log)))


def _one(title_has: str, run_dir: Path) -> tuple[int, str]:
    found = titled_with_env(title_has, str(run_dir))
    assert len(found) == 1, f"not one process titled {title_has} of {run_dir}: {found}"
    return found[0]


def _telling(log: Path) -> list[str]:
    """The lines of `log` that say what happened to a run (deaths, saves, steps, the launcher's own lines), short."""
    keys = ("died", "death watch", "checkpoint:", "requeue", "training stopped", "Error", "step:", "Saving")
    return [line[:300] for line in log.read_text(errors="replace").splitlines() if any(k in line for k in keys)][-60:]


def _kill_while_saving(run_dir: Path, ckpt: Path, step: int) -> tuple[int, float]:
    """SIGKILL the job's FSDP worker the moment `global_step_<step>/` appears (the save takes a fraction of a second
    on the tiny model: polled every few milliseconds); (pid, when)."""
    worker, _ = _one("ray::WorkerDict", run_dir)
    folder = ckpt / f"global_step_{step}"
    deadline = time.monotonic() + 600
    while not folder.exists():
        assert time.monotonic() < deadline, f"{folder} never appeared"
        time.sleep(0.002)
    os.kill(worker, signal.SIGKILL)
    killed_at = time.monotonic()
    # the save of the tiny model takes milliseconds: a kill that came after it says so (the test then fails on
    # the step the line names, not on a line that never comes)
    print(f"FSDP worker {worker} killed; the tracker then named step {tracked_step(ckpt)}")
    return worker, killed_at


def test_a_killed_engine_and_a_worker_killed_while_saving_requeue_the_job_and_a_stopped_worker_then_fails_it(
        sweep, taught_build, one_loop_of_memory):
    proc = sweep.start(["experiment=learn_tiny", "accelerator=cpu", f"model.build_dir={taught_build}",
                        "learn.enable=false", f"trainer.total_training_steps={STEPS}", "trainer.val_before_train=false",
                        "trainer.test_freq=-1", "trainer.save_freq=2", f"slurm.max_stall_requeues={REQUEUES}",
                        f"trainer.stall_min_s={STALL_MIN_S}", "trainer.stall_multiple=2"])

    def run_dir() -> Path | None:
        logs = list(sweep.dir.glob("*/train.log"))
        return logs[0].parent if logs else None
    sweep.wait_for("the job's second training step", lambda: run_dir() and len(_steps_since_last_start(
        run_dir() / "train.log")) >= 2, timeout=900)
    rd = run_dir()
    log = rd / "train.log"
    ckpt = checkpoint_dir(rd)
    time.sleep(1.0)
    pid, title, killed_at = _kill(rd, "VLLM::EngineCore")
    line, took = _line_within(log, "died: the vLLM engine", "; requeueing the job ", killed_at)
    print(f"dead vLLM engine in a Slurm job: its line {took:.0f} s after the kill")
    assert line.startswith(f"died: the vLLM engine (VLLM::EngineCore, pid {pid}) died after step 2 (killed or "
                           f"crashed"), line
    assert f"a relaunch resumes from step 2 in {ckpt}; requeueing the job " in line, line
    assert f"(1 of {REQUEUES} requeues after a fault, slurm.max_stall_requeues)" in line, line
    assert took < DEAD_BOUND_S, took
    assert tracked_step(ckpt) == 2 and sorted(p.name for p in ckpt.glob("global_step_*")) == ["global_step_2"]

    (job_id,) = sweep.job_ids()

    let_it_start = RequeuedStart(job_id)

    def restarted_and_stepped(steps: int):
        def done() -> bool:
            let_it_start()
            return len(_steps_since_last_start(log)) >= steps
        return done
    sweep.wait_for("the requeued job's first step", restarted_and_stepped(1), timeout=900)
    assert _steps_since_last_start(log)[0] == 3  # resumed from step 2
    pid, killed_at = _kill_while_saving(rd, ckpt, 4)
    line, took = _line_within(log, "died: an FSDP worker", "; requeueing the job ", killed_at)
    print(f"FSDP worker killed while saving, in a Slurm job: its line {took:.0f} s after the kill")
    assert line.startswith(f"died: an FSDP worker (ray::WorkerDict"), line
    assert f", pid {pid}" in line and "died after step 3" in line, line
    assert f"a relaunch resumes from step 2 in {ckpt}; requeueing the job " in line, line
    assert f"(2 of {REQUEUES} requeues after a fault, slurm.max_stall_requeues)" in line, line
    assert took < DEAD_BOUND_S, took
    # the save the kill cut short: removed whole, the tracker still at step 2
    text = log.read_text(errors="replace")
    assert f"checkpoint: saving step 4 failed (" in text and f"removed the partial {ckpt / 'global_step_4'}; the " \
        f"last whole checkpoint is step 2 in {ckpt}" in text, text[-4000:]
    assert tracked_step(ckpt) == 2 and not (ckpt / "global_step_4").exists()

    # attempt 3: steps 3 and 4 (a step's length seen, so the derived bound holds), then its FSDP worker stopped
    sweep.wait_for("the second requeue's two steps", restarted_and_stepped(2), timeout=900)
    assert _steps_since_last_start(log)[:2] == [3, 4]
    worker, _ = _one("ray::WorkerDict", rd)
    os.kill(worker, signal.SIGSTOP)
    stopped_at = time.monotonic()
    line, took = _line_within(log, "stalled: ", f"slurm.max_stall_requeues={REQUEUES}", stopped_at)
    print(f"FSDP worker stopped, in a Slurm job: the stall's line {took:.0f} s after the stop")
    assert "after step 4 (the bound: " in line and f"stopped: ray::WorkerDict (pid {worker})" in line, line
    # what waits on a stopped worker: the next step's log-probs or update, or the weight sync after step 4
    assert any(f"the {phase} phase hung" in line for phase in ("log-prob", "update", "weight sync")), line
    assert line.endswith(f"training stopped; requeued {REQUEUES} time(s) after a fault already "
                         f"(slurm.max_stall_requeues={REQUEUES})"), line
    (folder,) = rd.glob("stall-*")
    assert "stacks of " in line and str(folder) in line, line
    listing = (folder / "processes.txt").read_text()
    assert f"\n{worker}\tT\tray::WorkerDict" in listing, listing[:2000]  # the stopped one, as it was found
    # called at its bound, not before: the wait it names reaches the bound, which is at least the floor
    waited, bound = map(int, re.search(r"no training step ended in (\d+) s after step 4 \(the bound: (\d+) s",
                                       line).groups())
    assert bound >= STALL_MIN_S and waited >= bound, line

    assert sweep.wait(proc, timeout=SWEEP_TIMEOUT_S) != 0
    (row,) = sweep.summary()
    assert row["state"] == "failed" and row["starts"] == 3 and "stalled: " in row["error"], row
    attempts = [json.loads(a) for a in (rd / "attempts.jsonl").read_text().splitlines()]
    assert [a["slurm_restart"] for a in attempts] == [0, 1, 2]
    assert len(json.loads((ckpt / FAULTS_FILE).read_text())["faults"]) == REQUEUES
    # step 4's save of attempt 3 is whole: the tracker names it
    assert tracked_step(ckpt) == 4 and (ckpt / "global_step_4" / "actor").is_dir()
    # each start trained from the last whole checkpoint
    steps = [[json.loads(r)["step"] for r in f.read_text().splitlines() if r.strip()] for f in metrics_files(rd)]
    assert steps[1:] == [[3], [3, 4]], steps
    # nothing of the job is left running (the stopped worker included): no process whose environment names its run
    # dir, a few seconds after the job ended
    deadline = time.monotonic() + 30
    while (left := titled_with_env("", str(rd))) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, left

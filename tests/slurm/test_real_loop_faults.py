"""Dead training processes in a Slurm job that trains for real (issue 48, items 2, 3 and 5): one job of
`--multirun hydra/launcher=slurm experiment=learn_tiny accelerator=cpu` on the dev cluster, verl's own trainer, its
processes killed with SIGKILL mid-step, a save every two steps (trainer.save_freq=2) and one requeue after a fault
allowed (slurm.max_stall_requeues=1).

1. vLLM's engine (`VLLM::EngineCore`) killed in step 3. verl by itself would wait in the weight sync to it for ever
   (src/node/deaths.py); the launcher's death watch stops training within seconds with one line naming the engine
   and the checkpoint of step 2 (step 4's save cannot come: the weight sync after step 3 waits for the dead
   engine), and the job is requeued (src/slurm/requeue.py). Where step 3's requests reach the engine only after its
   death (a loaded machine), they fail at once and the trainer's guard stops on the lost groups: the line still
   names the engine (tests/launcher/test_death_watch.py), and the job is requeued alike.
2. The requeued job resumes from step 2 (its first step is step 3). Its FSDP worker (`ray::WorkerDict`) killed as
   step 4's checkpoint is being written: verl's save fails with Ray's ActorDiedError, the partial `global_step_4/`
   is removed and the tracker still names step 2 (src/trainer/checkpoints.py); the line names the FSDP worker, and
   with its one requeue spent the job fails: the sweep's summary gives the line.

Each death's line comes within DEAD_BOUND_S of the kill (the watch's poll and grace, the group's stop; the times are
printed). verl's TaskRunner killed mid-step ends the run by itself (Ray's ActorDiedError; its line 4 s after the kill
in a run of this job by hand), named by the same watch (tests/launcher/test_death_watch.py). A stopped FSDP worker is
caught as any stall (tests/loop/test_stall_on_cpu.py stops vLLM's engine); each more start here costs CI two
minutes. This runs in the Slurm group, beside the CPU loop's launches,
which a local launch of the same faults would lengthen; the death watch is the same code in a local run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from src.slurm.requeue import FAULTS_FILE
from src.trainer import progress
from src.trainer.checkpoints import tracked_step
from tests.helpers.launches import checkpoint_dir, metrics_files
from tests.helpers.loop_processes import titled_with_env
from tests.helpers.slurm_sweeps import scontrol_field

# from the kill to the fault's line in the log as the job ends: the watch's poll (2 s) and grace (15 s), the group's
# stop (SIGTERM, Ray's and vLLM's exit), the services' stop, on 2 cores shared with the rest of the suite
DEAD_BOUND_S = 60
SWEEP_TIMEOUT_S = 1500
STEPS = 30
# a fault's line comes within DEAD_BOUND_S; past this, the test fails without holding CI
LINE_TIMEOUT_S = 300


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


def test_a_killed_engine_requeues_the_job_and_a_worker_killed_while_saving_then_fails_it(
        sweep, taught_build, one_loop_of_memory):
    proc = sweep.start(["experiment=learn_tiny", "accelerator=cpu", f"model.build_dir={taught_build}",
                        "learn.enable=false", f"trainer.total_training_steps={STEPS}", "trainer.val_before_train=false",
                        "trainer.test_freq=-1", "trainer.save_freq=2", "slurm.max_stall_requeues=1"])

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
    assert "(1 of 1 requeues after a fault, slurm.max_stall_requeues)" in line, line
    assert took < DEAD_BOUND_S, took
    assert tracked_step(ckpt) == 2 and sorted(p.name for p in ckpt.glob("global_step_*")) == ["global_step_2"]

    (job_id,) = sweep.job_ids()

    def let_it_start() -> None:
        # Slurm holds a requeued job back (credential lifetime): let it start now
        if scontrol_field(job_id, "JobState") == "PENDING":
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True, timeout=30)

    def restarted_and_stepped() -> bool:
        let_it_start()
        return len(_steps_since_last_start(log)) >= 1
    sweep.wait_for("the requeued job's first step", restarted_and_stepped, timeout=900)
    assert _steps_since_last_start(log)[0] == 3  # resumed from step 2
    pid, killed_at = _kill_while_saving(rd, ckpt, 4)
    line, took = _line_within(log, "died: an FSDP worker", "slurm.max_stall_requeues=1", killed_at)
    print(f"FSDP worker killed while saving, in a Slurm job: its line {took:.0f} s after the kill")
    assert line.startswith(f"died: an FSDP worker (ray::WorkerDict"), line
    assert f", pid {pid}" in line and "died after step 3" in line, line
    assert line.endswith(f"a relaunch resumes from step 2 in {ckpt}; requeued 1 time(s) after a fault already "
                         f"(slurm.max_stall_requeues=1)"), line
    assert took < DEAD_BOUND_S, took
    # the save the kill cut short: removed whole, the tracker still at step 2
    text = log.read_text(errors="replace")
    assert f"checkpoint: saving step 4 failed (" in text and f"removed the partial {ckpt / 'global_step_4'}; the " \
        f"last whole checkpoint is step 2 in {ckpt}" in text, text[-4000:]
    assert tracked_step(ckpt) == 2 and not (ckpt / "global_step_4").exists()

    assert sweep.wait(proc, timeout=SWEEP_TIMEOUT_S) != 0
    (row,) = sweep.summary()
    assert row["state"] == "failed" and row["starts"] == 2 and "died: an FSDP worker" in row["error"], row
    attempts = [json.loads(a) for a in (rd / "attempts.jsonl").read_text().splitlines()]
    assert [a["slurm_restart"] for a in attempts] == [0, 1]
    assert len(json.loads((ckpt / FAULTS_FILE).read_text())["faults"]) == 1
    # each start trained from the last whole checkpoint
    steps = [[json.loads(r)["step"] for r in f.read_text().splitlines() if r.strip()] for f in metrics_files(rd)]
    assert steps[1:] == [[3]], steps

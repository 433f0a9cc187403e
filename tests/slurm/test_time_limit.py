"""A job that reaches its Slurm time limit loses nothing: the step in progress is saved, the job is
requeued and continues from that step, in its own checkpoint dir and wandb run.

Real dev cluster, real submitit (its USR2 handler requeues), real runner (src/node/training.py); the
training command is tests/slurm/stand_in_train.py, which speaks the same flag protocol as
src/trainer/entry.py (src/trainer/time_limit.py): it trains 0.5 s steps until the runner asks, then saves
the step it completed. With slurm.timeout_min=2 and slurm.signal_delay_s=30 the signal is due 90 s
after the start; Slurm may send it up to a minute early (sbatch(1), --signal: "the resolution of
event handling"), so it comes 30-90 s in, after the job has started training (a one-minute limit
would have it arrive while the job is still starting, before there is a step to save).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.helpers.slurm_sweeps import scontrol_field, stand_in

STEPS_AFTER_RESUME = 3


def test_a_job_at_its_time_limit_saves_its_last_step_is_requeued_and_resumes_there(sweep):
    command = stand_in(f"--train-steps 100000 --step-s 0.5 --resumed-steps {STEPS_AFTER_RESUME}")
    proc = sweep.start(["gpus=2", "slurm.timeout_min=2", "slurm.signal_delay_s=30", "slurm.max_num_timeout=1",
                        # no periodic save would come before the limit: only the time-limit save can
                        "trainer.save_freq=100000", f"debug.train_command_override='{command}'"]
                       + sweep.fake_inputs())
    sweep.wait_for("the first attempt to train", lambda: any(sweep.dir.glob("*/stand_in_steps.jsonl")), timeout=120)
    run_dir = next(sweep.dir.glob("*/stand_in_steps.jsonl")).parent
    (job_id,) = sweep.job_ids()
    seen_pending = []

    def restarted() -> bool:
        # Slurm holds a requeued job back (credential lifetime); let it start now, and give the
        # second attempt room so only the first one meets the limit
        if scontrol_field(job_id, "JobState") == "PENDING":
            seen_pending.append(True)
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now", "TimeLimit=5"],
                           capture_output=True, timeout=30)
        return len((run_dir / "stand_in.jsonl").read_text().splitlines()) > 1
    sweep.wait_for("the job to be requeued after its time limit and start again", restarted, timeout=240)
    assert sweep.wait(proc) == 0, sweep.output()
    assert seen_pending, "the job was never requeued"

    starts = [json.loads(line) for line in (run_dir / "stand_in.jsonl").read_text().splitlines()]
    assert [s["slurm_restart"] for s in starts] == [0, 1], starts
    first, second = starts
    # Slurm's signal reached the training command's process too; the runner had it blocked there
    assert "SIGUSR2" in first["blocked_signals"], first
    assert (first["resumed"], second["resumed"]) == (False, True)
    assert second["checkpoint_dir"] == first["checkpoint_dir"]
    assert second["wandb_run_id"] == first["wandb_run_id"] and second["wandb_resume"] == "allow"
    ckpt = Path(first["checkpoint_dir"])
    assert [p.name for p in (ckpt / "wandb").iterdir()] == [f"offline-run-{first['wandb_run_id']}"]

    steps = [json.loads(line) for line in (run_dir / "stand_in_steps.jsonl").read_text().splitlines()]
    before = [s["step"] for s in steps if s["slurm_restart"] == 0]
    after = [s["step"] for s in steps if s["slurm_restart"] == 1]
    last = before[-1]
    assert before == list(range(1, last + 1)), before
    # the requeued job continues from the step the first attempt completed last: nothing redone or lost
    assert after == list(range(last + 1, last + 1 + STEPS_AFTER_RESUME)), (before, after)
    assert (ckpt / f"global_step_{last}" / "actor").is_dir()
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == str(last + STEPS_AFTER_RESUME)

    log = (run_dir / "train.log").read_text()
    assert "time limit: SIGUSR2 received" in log, log[-3000:]
    assert f"time limit: step {last} saved now in {ckpt}; requeueing the job" in log, log[-3000:]
    assert sweep.summary()[0]["state"] == "succeeded"

"""A Slurm sweep that trains for real (issue 50): `--multirun hydra/launcher=slurm experiment=learn_tiny
accelerator=cpu algo=grpo,gspo` on the dev cluster, each job verl's own trainer with vLLM's CPU build and FSDP
on gloo, no stand-in. One job reaches its Slurm time limit mid-training: Slurm's signal reaches the runner, the
trainer saves the step it is on, submitit requeues the job, and the requeued job resumes from that step in the
same run dir and trains to the end. Then the sweep's summary says both succeeded and that one was started twice,
`python -m src.report <sweep dir>` compares the two configurations with their curves, and no secret of the
submitter's environment reached any file. The array runs one job at a time (`slurm.array_parallelism=1`): two
CPU loops beside the rest of the suite are more than this machine's memory holds.

The time limit is set on the running job once its first step has ended (`scontrol update TimeLimit=`), so the
signal lands mid-training whatever the start-up took on a loaded machine; Slurm then signals and ends the job
as at any time limit. The limit is the one whose signal time has just passed: slurmctld sends it at its next
time-limit check (every 30 s; sbatch(1): "up to 60 seconds earlier than specified"), while the steps left
take longer than that (STEPS). A limit whose signal time lies ahead let CI's steps, ~4 s each since vLLM's
runner moved into its engine core, all end before the signal came. The stand-in trainer (tests/slurm/stand_in_train.py) keeps the tests that inject what a
real trainer does not do on demand (docs/testing.md lists them).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from src.trainer import progress
from tests.helpers.launches import checkpoint_dir, metrics_files
from tests.helpers.slurm_sweeps import SECRETS, RequeuedStart, sacct_tres, scontrol_field

REPO = Path(__file__).resolve().parents[2]
# 15 steps after the first (~4 s each on a quiet machine): more than the signal's 30-60 s
STEPS = 16
# seconds between Slurm's signal and the time limit: the limit set below leaves 120-180 s after the signal is
# due, in which the step in progress ends, is saved, and Ray, vLLM and the workers stop (about 30 s on 2
# loaded cores)
SIGNAL_DELAY_S = 180
SWEEP_TIMEOUT_S = 1500


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def _run_seconds(job_id: str) -> int:
    h, m, s = (scontrol_field(job_id, "RunTime").split("-")[-1].split(":") + ["0", "0"])[:3]
    return int(h) * 3600 + int(m) * 60 + int(s)


def test_a_sweep_of_two_algorithms_trains_for_real_and_the_job_at_its_time_limit_resumes_its_step(
        sweep, taught_build, one_loop_of_memory):
    overrides = ["experiment=learn_tiny", "accelerator=cpu", f"model.build_dir={taught_build}"]

    proc = sweep.start(overrides + [
        "algo=grpo,gspo", "learn.enable=false", f"trainer.total_training_steps={STEPS}",
        # one job of the array at a time: two CPU loops beside the rest of the suite exhaust this machine's
        # memory (tests/helpers/memory_gate.py); the requeued job waits for the other to end
        "slurm.array_parallelism=1",
        # no validation and no periodic save: the only save before the limit is the time limit's own
        "trainer.val_before_train=false", "trainer.test_freq=1000", "trainer.save_freq=1000",
        f"slurm.signal_delay_s={SIGNAL_DELAY_S}", "slurm.max_num_timeout=1"], env_extra=SECRETS)

    def first_step_ended() -> Path | None:
        for log in sweep.dir.glob("*/train.log"):
            if any(progress.parse_step_end(line) for line in log.read_text(errors="replace").splitlines()):
                return log.parent
        return None
    sweep.wait_for("a job's first training step", lambda: first_step_ended() is not None, timeout=900)
    run_dir = first_step_ended()
    # the array task <array>_<job number>: a plain job id may be the array's own (its first task's
    # SLURM_JOB_ID), and `scontrol update` on it changes every task of the array
    idx = run_dir.name.split("_", 1)[0]
    (job_id,) = [j for j in sweep.job_ids() if j.endswith(f"_{idx}")]
    # the limit whose signal time (SIGNAL_DELAY_S before it) is now or just past: Slurm signals at its next check
    limit_min = (_run_seconds(job_id) + SIGNAL_DELAY_S) // 60
    subprocess.run(["scontrol", "update", f"JobId={job_id}", f"TimeLimit={limit_min}"], check=True,
                   capture_output=True, timeout=30)
    # the requeued job started now (RequeuedStart), with room to finish
    start = RequeuedStart(job_id, "TimeLimit=30")

    def restarted() -> bool:
        start()
        return len((run_dir / "attempts.jsonl").read_text().splitlines()) > 1
    # the other job may start first and train all its steps before this one starts again
    sweep.wait_for("the job to be requeued at its time limit and start again", restarted, timeout=900)
    assert sweep.wait(proc, timeout=SWEEP_TIMEOUT_S) == 0, sweep.output()[-6000:]
    assert start.seen_pending, "the job was never requeued"

    # the time-limited job: Slurm's signal, the step in progress saved, the requeue, the resume from that step
    log = (run_dir / "train.log").read_text(errors="replace")
    assert "time limit: SIGUSR2 received" in log, log[-4000:]
    ckpt = checkpoint_dir(run_dir)
    saved = [line for line in log.splitlines() if line.startswith("time limit: step ") and "requeueing" in line]
    assert len(saved) == 1 and f"saved now in {ckpt}; requeueing the job" in saved[0], saved or log[-4000:]
    last = int(saved[0].split()[3])
    assert 1 <= last < STEPS and (ckpt / f"global_step_{last}" / "actor").is_dir()
    # two starts of one job (each start's cause in attempts.jsonl, and a stall's or a death's line in the log)
    attempts = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    assert [a["slurm_restart"] for a in attempts] == [0, 1] and len({a["slurm_job_id"] for a in attempts}) == 1, (
        attempts, [line for line in log.splitlines() if line.startswith("error:")])
    first, second = metrics_files(run_dir)  # verl's file logger writes one per start
    assert _steps(first) == list(range(1, last + 1))
    # nothing redone, nothing lost: the requeued start trains from the saved step to the end
    assert _steps(second) == list(range(last + 1, STEPS + 1))
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)

    # the sweep's summary: both succeeded, the limited one started twice; the other trained its steps in one go
    rows = {Path(r["run_dir"]): r for r in sweep.summary()}
    assert {r["state"] for r in rows.values()} == {"succeeded"} and len(rows) == 2, rows
    assert rows[run_dir]["starts"] == 2
    (other,) = set(rows) - {run_dir}
    # why it started again, if it did: its attempts (each start's cause) and the end of its log
    said = lambda: (other / "attempts.jsonl").read_text() + (other / "train.log").read_text(errors="replace")[-3000:]
    assert rows[other]["starts"] == 1, said()
    assert [_steps(f) for f in metrics_files(other)] == [list(range(1, STEPS + 1))], said()
    assert "started 2 times" in sweep.output(), sweep.output()[-3000:]
    # what Slurm granted is what the plan derived (1 GPU, Ray's CPUs), the signal as the plan asked for it
    plan = json.loads((other / "snapshot" / "plan.json").read_text())
    state, tres = sacct_tres(rows[other]["job_id"])
    assert state == "COMPLETED" and tres["gres/gpu"] == str(plan["node_gpus"]) == "1", tres
    assert tres["cpu"] == str(plan["node_cpus"]), tres
    (array,) = {r["job_id"].split("_")[0] for r in rows.values()}
    script = (sweep.dir / ".submitit" / array / f"{array}_submission.sh").read_text()
    assert f"#SBATCH --signal=USR2@{SIGNAL_DELAY_S}" in script and "#SBATCH --requeue" in script, script
    assert "#SBATCH --array=0-1%1" in script, script

    # the comparison across the sweep, with each configuration's curve
    report = subprocess.run([sys.executable, "-m", "src.report", str(sweep.dir)], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0, report.stdout + report.stderr
    compare = next(sweep.dir.rglob("compare.md")).read_text()
    assert "grpo" in compare and "gspo" in compare, compare

    # no secret from the submitter's environment anywhere: sbatch scripts, pickles, logs, snapshots, metrics
    for path in (p for root in (sweep.dir, sweep.out, ckpt.parent) for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for name, value in SECRETS.items():
            assert value.encode() not in data, f"{name} leaked into {path}"

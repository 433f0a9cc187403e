"""The dev cluster is a real Slurm: real sbatch, slurmctld, slurmd, slurmdbd/sacct, driven through submitit.

These tests pin what the Hydra submitit launcher relies on: results come back, GPU requests are honoured
(CUDA_VISIBLE_DEVICES), sacct knows the jobs, job arrays work, failures come back as failures (with the
error, or without a result file at all) and never as a hang, and impossible requests fail at submission.

The functions below run inside Slurm jobs; the `submitit_executor` fixture makes cloudpickle ship them
by value (see tests/slurm/conftest.py), so they must only use what they import themselves.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
import submitit


# ---------------------------------------------------------------- functions that run in the jobs
def report_env(x: int) -> dict:
    import os
    import socket
    import sys

    return {
        "value": x * 2,
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cpus_per_task": os.environ.get("SLURM_CPUS_PER_TASK"),
        "python": sys.executable,
        "host": socket.gethostname(),
    }


def raise_value_error(token: str) -> None:
    raise ValueError(f"boom from the job {token}")


def die_without_result() -> None:
    # Like an OOM kill or a segfault: the process vanishes and submitit never writes a result file.
    # Only Slurm's accounting (sacct) can then tell submitit that the job is over.
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------- helpers
def sacct_row(job_id: str, timeout_s: float = 30) -> dict:
    """The job's allocation row from sacct once it is final and complete. slurmctld sends job records to
    slurmdbd asynchronously, so the row can lag the job's end by a moment: poll, bounded."""
    fields = ["JobID", "State", "ExitCode", "AllocTRES", "Partition"]
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        last = subprocess.run(
            ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", ",".join(fields)],
            capture_output=True, text=True, timeout=15,
        ).stdout
        for line in last.splitlines():
            row = dict(zip(fields, line.split("|")))
            final = row["State"].split()[0] not in {"PENDING", "RUNNING", "COMPLETING", "REQUEUED"}
            # the end record can arrive before the start record's fields (seen: Partition still empty)
            if row["JobID"] == job_id and final and all(row.values()):
                return row
        time.sleep(0.5)
    pytest.fail(f"sacct has no final record of job {job_id} after {timeout_s}s; last output: {last!r}")


# ---------------------------------------------------------------- tests
def test_cluster_offers_the_configured_resources(slurm_cluster):
    # The defaults are chosen for the Slurm tests of the launcher: an 8-GPU dry-run sweep plus a
    # dedicated scorer GPU request, and Ray's 3*G+10 CPUs per task.
    assert slurm_cluster.accounting, "the dev cluster must run slurmdbd: submitit relies on sacct"
    assert slurm_cluster.gpus >= 4, f"need >= 4 fake GPUs for these tests, node has {slurm_cluster.gpus}"
    assert slurm_cluster.cpus >= 3 * slurm_cluster.gpus + 10


def test_job_returns_its_value_on_the_node(submitit_executor, wait_job):
    ex = submitit_executor()
    t0 = time.monotonic()
    job = ex.submit(report_env, 21)
    wait_job(job)
    out = job.result()
    turnaround = time.monotonic() - t0
    print(f"job {job.job_id} turnaround {turnaround:.1f}s")
    assert out["value"] == 42
    assert out["job_id"] == job.job_id
    # submitit runs the submitter's interpreter: the job really ran in this venv, through Slurm
    assert out["python"] == sys.executable
    assert out["cuda_visible_devices"] in (None, "")  # asked for no GPU, got none


def test_gpu_request_sets_cuda_visible_devices(submitit_executor, wait_job, slurm_cluster):
    ex = submitit_executor(gpus_per_node=4, cpus_per_task=4)
    job = ex.submit(report_env, 1)
    wait_job(job)
    out = job.result()
    devices = out["cuda_visible_devices"].split(",")
    assert len(devices) == 4 and len(set(devices)) == 4, out
    assert out["cpus_per_task"] == "4"
    row = sacct_row(job.job_id)
    assert "gres/gpu=4" in row["AllocTRES"].split(","), row


def test_sacct_reports_the_job(submitit_executor, wait_job, slurm_cluster):
    ex = submitit_executor()
    job = ex.submit(report_env, 3)
    wait_job(job)
    assert job.result()["value"] == 6
    row = sacct_row(job.job_id)
    assert row["State"] == "COMPLETED" and row["ExitCode"] == "0:0", row
    assert row["Partition"] == slurm_cluster.partition
    # submitit's own view comes from the same sacct. (job.state alone reads submitit's cache, which is
    # still UNKNOWN when the result file showed up before submitit's first sacct poll: force a poll.)
    assert job.get_info(mode="force")["State"] == "COMPLETED"


def test_full_node_request_for_training_plus_ray_cpus(submitit_executor, wait_job, slurm_cluster):
    # What the launcher asks for an all-GPU run: every fake GPU and Ray's 3*G+10 CPUs in one task.
    gpus = slurm_cluster.gpus
    cpus = 3 * gpus + 10
    ex = submitit_executor(gpus_per_node=gpus, cpus_per_task=cpus, tasks_per_node=1, nodes=1, mem_gb=8)
    job = ex.submit(report_env, 0)
    wait_job(job)
    out = job.result()
    assert len(out["cuda_visible_devices"].split(",")) == gpus
    tres = sacct_row(job.job_id)["AllocTRES"].split(",")
    assert f"gres/gpu={gpus}" in tres and f"cpu={cpus}" in tres, tres


def test_job_array_returns_every_result(submitit_executor, wait_job):
    # hydra-submitit-launcher submits a sweep as ONE job array (executor.map_array)
    ex = submitit_executor(slurm_array_parallelism=8)
    jobs = ex.map_array(report_env, [1, 2, 3])
    for job in jobs:
        wait_job(job)
    outs = [job.result() for job in jobs]
    assert [o["value"] for o in outs] == [2, 4, 6]
    assert len({o["array_job_id"] for o in outs}) == 1
    assert sorted(o["array_task_id"] for o in outs) == ["0", "1", "2"]
    assert [job.job_id for job in jobs] == [f"{outs[0]['array_job_id']}_{i}" for i in range(3)]


def test_raising_job_is_reported_failed_with_its_error(submitit_executor, wait_job):
    token = uuid.uuid4().hex
    ex = submitit_executor()
    job = ex.submit(raise_value_error, token)
    wait_job(job)
    err = job.exception()
    assert isinstance(err, submitit.core.utils.FailedJobError), err
    assert f"ValueError: boom from the job {token}" in str(err)
    with pytest.raises(submitit.core.utils.FailedJobError, match=token):
        job.result()
    # submitit re-raises after writing the error, so Slurm records a failure too
    assert sacct_row(job.job_id)["State"] == "FAILED"


def test_job_dying_without_result_is_failed_not_a_hang(submitit_executor, wait_job):
    # The case slurmdbd exists for: no result file ever appears, and only sacct tells submitit the job
    # is over. Without accounting, job.wait()/result() would wait forever.
    ex = submitit_executor()
    job = ex.submit(die_without_result)
    waited = wait_job(job, timeout_s=90)
    t0 = time.monotonic()
    err = job.exception()  # bounded: submitit waits <= 15 s for a result file once Slurm says "done"
    assert time.monotonic() - t0 < 30
    assert isinstance(err, submitit.core.utils.UncompletedJobError), err
    assert "has not produced any output" in str(err)
    assert sacct_row(job.job_id)["State"] in {"FAILED", "CANCELLED", "NODE_FAIL"}
    print(f"hard-dead job {job.job_id} seen as done after {waited:.1f}s")


def test_impossible_request_fails_at_submission(submitit_executor, slurm_cluster):
    # More GPUs than the node has must be refused by sbatch at once (EnforcePartLimits=ALL), not left
    # PENDING forever while a submitter waits.
    for params in ({"gpus_per_node": slurm_cluster.gpus + 1}, {"cpus_per_task": slurm_cluster.cpus + 1}):
        ex = submitit_executor(**params)
        t0 = time.monotonic()
        with pytest.raises(Exception, match="sbatch|[Rr]equested|permitted") as info:
            ex.submit(report_env, 0)
        assert time.monotonic() - t0 < 30
        assert "Batch job submission failed" in str(info.value), (params, info.value)


def test_job_ids_do_not_restart_at_one(slurm_cluster):
    # A recreated state dir must not hand out ids that old submitit/hydra folders (named %j) already use.
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=15).stdout
    first = int(next(line.split("=")[1] for line in config.splitlines() if line.startswith("FirstJobId")))
    assert first > 1000, config

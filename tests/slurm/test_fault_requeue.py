"""src/slurm/requeue.py: a job whose run hit a fault is requeued at most slurm.max_stall_requeues times, counted over
the run's attempts in its checkpoint dir; a requeue Slurm refuses fails the job with scontrol's reason. Against the
dev cluster's real scontrol (tests/slurm/test_real_loop_faults.py requeues a job that trains for real)."""
from __future__ import annotations

from src.slurm import requeue


def test_the_count_is_kept_over_attempts_and_bounded(slurm_cluster, tmp_path):
    env = {"SLURM_JOB_ID": "999999"}  # no such job: Slurm refuses its requeue
    requeued, said = requeue.after_fault("stalled: no training step ended", tmp_path, limit=1, environ=env)
    assert not requeued and said.startswith("scontrol requeue 999999 failed ("), said
    assert "Invalid job id" in said, said
    # the attempt counts (Slurm may have carried out a requeue whose answer was lost): the bound is reached
    assert requeue.requeues_so_far(tmp_path) == ["stalled: no training step ended"]
    requeued, said = requeue.after_fault("died: the vLLM engine", tmp_path, limit=1, environ=env)
    assert (requeued, said) == (False, "requeued 1 time(s) after a fault already (slurm.max_stall_requeues=1)")
    assert requeue.after_fault("died: x", tmp_path / "other", limit=0, environ=env) == (
        False, "no requeue after a fault (slurm.max_stall_requeues=0)")


def test_an_array_task_is_named_as_scontrol_takes_it():
    assert requeue.job_id({"SLURM_JOB_ID": "12", "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "2"}) == "10_2"
    assert requeue.job_id({"SLURM_JOB_ID": "12"}) == "12"

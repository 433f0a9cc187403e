"""`python -m src.launch --resume-sweep <sweep dir>` (issue 51, finding 14): a sweep's failed and unfinished jobs
run again in the same sweep dir, each in its own run dir and checkpoint dir, and the jobs that succeeded are
left alone. Real local sweeps with a stand-in training command (`debug.train_command_override`,
tests/helpers/resumable_train.py) that saves a checkpoint like verl, resumes from it, and fails on purpose while
a flag file exists; the Slurm submitter's choice of jobs is tested on its own function (no cluster; the dev
cluster's run: tests/slurm/test_sweeps.py test_resume_sweep_resubmits_only_the_failed_job)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from src.record import sweep_resume, sweep_summary
from src.record.sweep_summary import FAILED, PENDING, SUCCEEDED, SweepJob
from tests.helpers.launches import launch, small_qwen_inputs
from tests.helpers.refusals import assert_one_line_refusal
from tests.helpers.resumable_train import starts

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "tests" / "helpers" / "resumable_train.py"  # fails job #1 while <tmp>/fail exists


@pytest.fixture
def sweep_args(tmp_path) -> list[str]:
    return ["--multirun", "seed=1,2,3", *small_qwen_inputs(tmp_path),
            f"debug.train_command_override='{sys.executable} {TRAINER} {tmp_path}/fail'"]


ENV = {"CUDA_VISIBLE_DEVICES": "0", "SLURM_CPUS_PER_TASK": "16"}


def test_resume_sweep_runs_only_the_failed_job_again_in_its_own_run_dir(tmp_path, sweep_args):
    (tmp_path / "fail").touch()
    first = launch(sweep_args, env_extra=ENV, timeout=600)
    assert first.returncode != 0, (first.stdout + first.stderr)[-3000:]
    (sweep,) = (tmp_path / "out" / "multirun").iterdir()
    rows = sweep_summary.read(sweep)
    assert [r["state"] for r in rows] == [SUCCEEDED, FAILED, SUCCEEDED], rows
    before = {r["idx"]: starts(r["run_dir"]) for r in rows}
    assert [len(s) for s in before.values()] == [1, 1, 1]

    (tmp_path / "fail").unlink()
    again = launch(["--resume-sweep", str(sweep)], env_extra=ENV, timeout=600)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-3000:]
    assert (f"[sweep] resuming {sweep}: running 1 failed (#1) again, each in its own run dir; 2 succeeded and left "
            f"alone (#0, #2)") in out
    assert list((tmp_path / "out" / "multirun").iterdir()) == [sweep]  # no new sweep dir
    rows_after = sweep_summary.read(sweep)
    assert [r["state"] for r in rows_after] == [SUCCEEDED] * 3, rows_after
    assert [r["run_dir"] for r in rows_after] == [r["run_dir"] for r in rows]
    # the finished jobs did not start again; the failed one resumed from its own checkpoint dir
    assert starts(rows[0]["run_dir"]) == before[0] and starts(rows[2]["run_dir"]) == before[2]
    resumed = starts(rows[1]["run_dir"])
    assert [s["resumed_from"] for s in resumed] == [0, 1]
    assert resumed[0]["checkpoint_dir"] == resumed[1]["checkpoint_dir"]
    assert "already holds this run's snapshot (a requeued or resumed job): reusing it" in out

    # once every job succeeded, there is nothing to resume
    done = launch(["--resume-sweep", str(sweep)], env_extra=ENV)
    assert done.returncode == 0 and f"[sweep] nothing to resume in {sweep}: all 3 job(s) succeeded" in done.stdout
    assert sum(len(starts(r["run_dir"])) for r in rows_after) == 4


def test_a_job_that_never_started_runs_and_a_changed_expansion_is_refused(tmp_path, sweep_args):
    first = launch(sweep_args, env_extra=ENV, timeout=600)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    (sweep,) = (tmp_path / "out" / "multirun").iterdir()
    summary = sweep / sweep_summary.SUMMARY_FILE
    rows = json.loads(summary.read_text())
    # as if the sweep was killed while job #1 ran (its row still pending) and before #2 started (no row)
    rows[1]["state"] = PENDING
    summary.write_text(json.dumps(rows[:2]))
    again = launch(["--resume-sweep", str(sweep)], env_extra=ENV, timeout=600)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-3000:]
    assert "running 2 never finished (#1, #2) again" in out and "1 succeeded and left alone (#0)" in out
    assert [r["state"] for r in sweep_summary.read(sweep)] == [SUCCEEDED] * 3

    # a summary whose job ran with other overrides than the sweep's command makes now: refused, nothing runs
    rows = json.loads(summary.read_text())
    rows[1]["overrides"][0], rows[1]["state"] = "seed=7", FAILED
    summary.write_text(json.dumps(rows))
    changed = launch(["--resume-sweep", str(sweep)], env_extra=ENV)
    assert changed.returncode == 2
    assert_one_line_refusal(changed.stderr, "error: ", "job #1 ran with seed=7, the sweep's command now makes seed=2 (",
                            "conf/ or sweeps/ changed since")
    assert sum(len(starts(r["run_dir"])) for r in rows) == 5


@pytest.mark.parametrize("args, says", [
    (["--resume-sweep"], "--resume-sweep needs a sweep dir"),
    (["--resume-sweep", "/nonexistent/sweep"], "no such dir"),
    (["--resume-sweep", "{tmp}", "seed=2"], "takes nothing else, got seed=2"),
    (["--resume-sweep", "{tmp}"], "no multirun.yaml (Hydra writes it into every sweep dir)"),
])
def test_bad_resume_sweep_input_is_one_line(tmp_path, args, says):
    res = launch([a.replace("{tmp}", str(tmp_path)) for a in args])
    assert res.returncode == 2
    assert_one_line_refusal(res.stderr, "error: ", says)


def test_a_slurm_sweep_without_its_summary_is_refused(tmp_path):
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    hydra: [hydra.mode=MULTIRUN, hydra/launcher=slurm]\n    task: ['seed=1,2']\n")
    res = launch(["--resume-sweep", str(tmp_path)])
    assert res.returncode == 2
    assert_one_line_refusal(res.stderr, "error: ", "summary.json is missing", "squeue")


def test_the_slurm_submitter_leaves_finished_jobs_alone_and_submits_the_rest(tmp_path, capsys):
    """src/slurm/sweep.py launch's choice, without a cluster: #0 succeeded (kept, with its old job id and log), #1
    failed (submitted again), #2 never ran (submitted), #3 would run in a dir named differently now (not
    submitted: it would not resume)."""
    from src.slurm import sweep as slurm_sweep

    def row(idx, state, run_dir=None):
        return {"idx": idx, "state": state, "job_id": f"10{idx}", "log": f"/logs/10{idx}.out",
                "run_dir": run_dir or f"{tmp_path}/{idx}_x", "overrides": [f"seed={idx}"]}

    rows = {0: row(0, SUCCEEDED), 1: row(1, FAILED), 3: row(3, FAILED, f"{tmp_path}/3_old_name")}
    sweep_resume.start(sweep_resume.Resumed(tmp_path, True, {0: rows[0]}, rows, [[f"seed={i}"] for i in range(4)]))
    try:
        jobs = [SweepJob(idx=i, overrides=[f"seed={i}"], run_dir=f"{tmp_path}/{i}_x") for i in range(4)]
        slurm_sweep.left_alone(jobs)
    finally:
        sweep_resume.start(None)
    assert [(j.state, j.job_id) for j in jobs] == [(SUCCEEDED, "100"), (PENDING, None), (PENDING, None),
                                                  (FAILED, "(not submitted)")]
    assert jobs[0].log == "/logs/100.out"
    assert f"would run in {tmp_path}/3_x, not in its own run dir {tmp_path}/3_old_name" in jobs[3].error
    assert "[sweep] #0 succeeded before: left alone" in capsys.readouterr().out

"""`python -m src.launch --multirun hydra/launcher=slurm ...` on the real dev cluster.

Every test runs the launcher as a user does (a subprocess from a checkout), with real sbatch,
slurmctld, sacct and submitit. Only verl's GPU-bound training step is replaced, by
tests/slurm/stand_in_train.py through `debug.train_command_override`; the plan, verl's own config
validation, preflight, the snapshot, the Slurm request, the code snapshot, requeue and the Ray
bootstrap are the real ones. Every wait is bounded; jobs left behind by a failing test are
cancelled.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.launches import files_under
from tests.helpers.refusals import assert_one_line_refusal
from tests.helpers.resumable_train import starts
from tests.helpers.slurm_sweeps import REPO, SECRETS, RequeuedStart, Sweep, sacct_tres, scontrol_field, stand_in
from tests.helpers.verl_device_check import verl_worker_devices


# ------------------------------------------------------------------------------ tests
def test_dry_run_sweep_submits_nothing_and_has_slurm_test_each_request(sweep):
    """Issue 33 (finding 6): a Slurm sweep with dry_run=true called sbatch. It submits nothing now: each
    distinct request is checked by `sbatch --test-only`, each job planned and snapshotted here."""
    # a model and data where the jobs look (issue 51, finding 4: a submission refuses missing ones)
    res = sweep.run(["reward=comet,xcomet_xl", "gpus=2,4", "dry_run=true"] + sweep.fake_inputs(), env_extra=SECRETS)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = sweep.summary()
    assert [(r["state"], r["job_id"]) for r in rows] == [("succeeded", "(dry run)")] * 4, rows
    assert "summary: 4 succeeded, 0 failed" in res.stderr
    for gpus in (2, 4):  # one check per distinct request (a job array each, on a real run)
        assert res.stdout.count(f"Slurm would accept 1 node(s) x {gpus} GPUs, {3 * gpus + 10} CPUs/task, "
                                f"partition {sweep.partition} for 2 job(s); nothing submitted") == 1, res.stdout
    assert "[sweep] submitted" not in res.stdout
    # nothing submitted: no submitit folder, no code copy for jobs to run from
    assert not (sweep.dir / ".submitit").exists() and not (sweep.dir / "code").exists()
    for row in rows:
        run_dir = Path(row["run_dir"])
        plan = json.loads((run_dir / "snapshot" / "plan.json").read_text())
        verl = yaml.safe_load((run_dir / "snapshot" / "verl_config.yaml").read_text())
        assert verl["trainer"]["n_gpus_per_node"] == plan["gpus_per_node"]
        assert f"gpus={plan['gpus_per_node']}" in row["overrides"]
        assert (row["gpus_per_node"], row["cpus_per_task"]) == (plan["node_gpus"], plan["node_cpus"])
    # no secret from the submitter's environment anywhere it wrote
    for path in files_under(sweep.dir) + files_under(sweep.out):
        data = path.read_bytes()
        for name, value in SECRETS.items():
            assert value.encode() not in data, f"{name} leaked into {path}"
    for value in SECRETS.values():
        assert value not in res.stdout + res.stderr


@pytest.mark.parametrize("case", ["cpus", "nodes", "gpus, real launch"])
def test_a_request_slurm_refuses_is_bad_input_one_line_exit_2_and_no_sweep_dir(sweep, slurm_cluster, case):
    """Issue 51 (finding 6): a request the partition cannot meet was reported as a failed job (its line twice,
    exit 1, a sweep dir with summary.json) and never suggested fewer nodes. It is bad input now, for a dry
    run and a real launch alike: `sbatch --test-only` in the pre-launch check, one line, exit 2, nothing
    written or submitted."""
    too_many_cpus, too_many_gpus = slurm_cluster.cpus + 6, slurm_cluster.gpus
    args, request, fix = {
        "cpus": (["gpus=2", f"slurm.cpus_per_task={too_many_cpus}", "dry_run=true"] + sweep.fake_inputs(),
                 f"1 node(s) x 2 GPUs, {too_many_cpus} CPUs/task", "ask for fewer GPUs per node (gpus=)"),
        # the command: two nodes on a one-node partition
        "nodes": (["gpus=2", "nodes=2", "dry_run=true"] + sweep.fake_inputs(), "2 node(s) x 2 GPUs, 16 CPUs/task",
                  "ask for fewer nodes (nodes=), fewer GPUs per node (gpus=)"),
        # scorer.placement=dedicated: 2 training GPUs + as many scorer GPUs as the node has
        "gpus, real launch": (["gpus=2", "scorer.placement=dedicated", f"scorer.dedicated_gpus={too_many_gpus}"]
                              + sweep.fake_inputs(), f"1 node(s) x {2 + too_many_gpus} GPUs, 16 CPUs/task",
                              "ask for fewer GPUs per node (gpus=)"),
    }[case]
    res = sweep.run(args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert_one_line_refusal(res.stderr, f"error: sbatch refused the request ({request}, partition {sweep.partition}): ",
                            f"partition {sweep.partition}: 1 node(s) with {slurm_cluster.cpus} CPUs", fix)
    assert "[sweep]" not in res.stdout
    assert not sweep.dir.exists() and files_under(sweep.out) == [] and not (sweep.tmp / "results").exists()
    assert sweep.job_ids() == []


def test_a_request_without_a_partition_names_the_default_one(sweep, slurm_cluster):
    command = [a for a in sweep.command(["gpus=2", f"slurm.cpus_per_task={slurm_cluster.cpus + 6}", "dry_run=true"]
                                        + sweep.fake_inputs())
               if not a.startswith("slurm.partition=")]
    res = subprocess.run(command, cwd=sweep.checkout, env=sweep.env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert_one_line_refusal(res.stderr, "error: sbatch refused the request (1 node(s) x 2 GPUs, "
                            f"{slurm_cluster.cpus + 6} CPUs/task, the default partition): ",
                            f"partition {sweep.partition}: 1 node(s)")


def test_a_controller_that_does_not_answer_is_named_instead_of_blamed_on_the_request(sweep, tmp_path):
    """With slurmctld down or unreachable, sbatch --test-only fails with "Unable to contact slurm controller", and
    the launcher called that a refusal of the request and advised fewer nodes and GPUs. It says now that no
    controller answered: one line, exit 2, nothing written or submitted. The controller is made unreachable for
    real: sbatch reads a copy of the dev cluster's slurm.conf (SLURM_CONF) whose controller port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    conf = tmp_path / "slurm.conf"
    text = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")).read_text()
    conf.write_text(re.sub(r"(?m)^SlurmctldPort=.*$", f"SlurmctldPort={closed_port}", text))
    res = sweep.run(["gpus=2", "dry_run=true"] + sweep.fake_inputs(), env_extra={"SLURM_CONF": str(conf)})
    assert res.returncode == 2, res.stdout + res.stderr
    assert_one_line_refusal(res.stderr, "error: Slurm's controller did not answer sbatch (",
                            "Unable to contact slurm controller", f"(1 node(s) x 2 GPUs, 16 CPUs/task, partition "
                            f"{sweep.partition}) was not checked and nothing was submitted", "sinfo")
    assert "ask for fewer" not in res.stderr
    assert not sweep.dir.exists() and files_under(sweep.out) == [] and sweep.job_ids() == []


@pytest.mark.parametrize("dry", ["true", "false"])
def test_a_missing_model_is_refused_before_anything_is_queued(sweep, dry):
    """Issue 51 (finding 4): `paths.model_root=/nope` passed (`Slurm would accept ... 1 succeeded`) and a real
    sweep would have found it missing on the node, after the wait in the queue. Refused here, in one line."""
    args = [a for a in sweep.fake_inputs() if not a.startswith("paths.model_root=")]
    res = sweep.run(["gpus=2", "paths.model_root=/nope", f"dry_run={dry}",
                     f"debug.train_command_override='{stand_in()}'"] + args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert_one_line_refusal(res.stderr, "error: model not found at /nope/Qwen2.5-3B; ",
                            "checked on this machine before submitting")
    assert "[sweep]" not in res.stdout
    assert not sweep.dir.exists() and files_under(sweep.out) == [] and sweep.job_ids() == []


def test_failed_jobs_are_named_with_error_and_log_while_the_others_return(sweep, slurm_cluster):
    # scorer.placement=dedicated: a job asks for 2 training GPUs + 1 scorer GPU. The two jobs run, one of them
    # fails in its run, and the sweep returns with both (a request Slurm refuses never gets this far: it is
    # refused before submission, test_a_request_slurm_refuses_is_bad_input_one_line_exit_2_and_no_sweep_dir)
    ok, bad = stand_in(), stand_in("--exit 5")
    res = sweep.run(["gpus=2", "scorer.placement=dedicated", "scorer.dedicated_gpus=1",
                     f"debug.train_command_override='{ok}','{bad}'"] + sweep.fake_inputs())
    assert res.returncode == 1, res.stdout + res.stderr
    rows = sweep.summary()
    assert [r["state"] for r in rows] == ["succeeded", "failed"], rows
    ran_ok, run_failed = rows[0], rows[1]
    assert "scorer.dedicated_gpus=1" in ran_ok["overrides"] and "scorer.dedicated_gpus=1" in run_failed["overrides"]
    # the submitting terminal names the job, its overrides, its error and its log
    report = next(line for line in res.stderr.splitlines() if line.startswith("[sweep] FAILED #1 job "))
    assert f"#1 job {run_failed['job_id']}" in report and "--exit 5" in report, report
    assert "training command exited with code 5" in report and "failing on purpose" in report, report
    assert f"log: {run_failed['log']}" in res.stderr
    assert "failing on purpose with exit code 5" in Path(run_failed["log"]).read_text()
    assert "summary: 1 succeeded, 1 failed" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("1 of 2 jobs of the sweep failed"), res.stderr[-2000:]

    # the other job finished its run (the stand-in wrote its checkpoint) and returned
    seen = json.loads((Path(ran_ok["run_dir"]) / "stand_in.jsonl").read_text().splitlines()[0])
    assert (Path(seen["checkpoint_dir"]) / "latest_checkpointed_iteration.txt").exists()
    # training sees its 2 GPUs only; the third of the allocation is the scorer's
    assert len(seen["cuda_visible_devices"].split(",")) == 2, seen
    # Slurm exported its GPUs under every vendor's variable (ROCR_VISIBLE_DEVICES among them, which verl's
    # workers refuse beside CUDA_VISIBLE_DEVICES): what training got passes verl's own check, same 2 GPUs
    assert "GPU_DEVICE_ORDINAL" in seen["device_env"] and "ROCR_VISIBLE_DEVICES" not in seen["device_env"], seen
    assert verl_worker_devices([seen["device_env"]]) == [{"cuda_visible_devices": seen["cuda_visible_devices"]}]
    assert seen["wandb_mode"] == "offline" and seen["hf_hub_offline"] == "1"
    # the training processes run from, and import `src` from, the code copied at submission
    assert seen["cwd"] == str(sweep.dir / "code") == seen["pythonpath"].split(os.pathsep)[0]
    for row in (ran_ok, run_failed):
        state, tres = sacct_tres(row["job_id"])
        assert tres["gres/gpu"] == "3" and tres["cpu"] == "16", tres
        # Slurm says COMPLETED for both: the failed run was caught in the job and returned as an error
        assert state == "COMPLETED"


def test_requeued_job_resumes_in_the_same_run_dir_from_the_first_attempts_checkpoint(sweep):
    proc = sweep.start(["gpus=2", f"debug.train_command_override='{stand_in('--wait-for-requeue')}'"]
                       + sweep.fake_inputs())
    sweep.wait_for("the first attempt's checkpoint", lambda: any(sweep.dir.glob("*/stand_in.waiting")))
    run_dir = next(sweep.dir.glob("*/stand_in.waiting")).parent
    (job_id,) = sweep.job_ids()
    subprocess.run(["scontrol", "requeue", job_id], check=True, capture_output=True, timeout=30)
    # once it is pending again, let it start now (RequeuedStart says why not at once)
    start = RequeuedStart(job_id)

    def restarted() -> bool:
        start()
        second_start = len((run_dir / "stand_in.jsonl").read_text().splitlines()) > 1
        return (start.seen_pending and scontrol_field(job_id, "JobState") != "PENDING") or second_start
    sweep.wait_for("the requeued job to start again", restarted, timeout=120)
    assert sweep.wait(proc) == 0, sweep.output()

    starts = [json.loads(line) for line in (run_dir / "stand_in.jsonl").read_text().splitlines()]
    assert [s["slurm_restart"] for s in starts] == [0, 1], starts
    first, second = starts
    assert second["run_dir"] == first["run_dir"] == str(run_dir)
    assert second["checkpoint_dir"] == first["checkpoint_dir"]
    assert (first["resumed"], second["resumed"]) == (False, True)
    assert second["resume_mode"] == "auto"
    assert second["wandb_run_id"] == first["wandb_run_id"] and second["wandb_resume"] == "allow"
    # one (offline) wandb run for the job, both attempts in it; the checkpoint dir ends in the run id
    wandb_runs = list((Path(first["checkpoint_dir"]) / "wandb").iterdir())
    assert [p.name for p in wandb_runs] == [f"offline-run-{first['wandb_run_id']}"]
    assert len((wandb_runs[0] / "attempts.jsonl").read_text().splitlines()) == 2
    # issue 51 (finding 13): there because the job's WANDB_DIR is the checkpoint dir (not the working dir,
    # <sweep>/code); the run dir links to it, for `wandb sync <sweep dir>/*/wandb`
    assert (run_dir / "wandb").resolve() == (Path(first["checkpoint_dir"]) / "wandb").resolve()
    assert not (sweep.dir / "code" / "wandb").exists()
    assert first["checkpoint_dir"].endswith("-" + first["wandb_run_id"].removeprefix("qerl-"))
    attempts = (run_dir / "attempts.jsonl").read_text().splitlines()
    assert [json.loads(a)["slurm_restart"] for a in attempts] == [0, 1]
    assert [p.name for p in run_dir.iterdir() if p.name.startswith("snapshot")] == ["snapshot"]
    assert sweep.summary()[0]["state"] == "succeeded"


def test_two_job_sweep_writes_two_checkpoint_dirs_and_two_wandb_runs_in_one_group(sweep):
    res = sweep.run(["gpus=2", "trainer.lr=2e-6,3e-6", f"debug.train_command_override='{stand_in()}'"]
                    + sweep.fake_inputs(), env_extra=SECRETS)
    assert res.returncode == 0, res.stdout + res.stderr
    # what Slurm granted is what the plan derived (training GPUs, Ray's 3G+10 CPUs), in one job array
    # whose script carries what every job needs (a dry run submits nothing, so a real sweep shows it)
    rows = sweep.summary()
    for row in rows:
        plan = json.loads((Path(row["run_dir"]) / "snapshot" / "plan.json").read_text())
        state, tres = sacct_tres(row["job_id"])
        assert state == "COMPLETED" and tres["gres/gpu"] == str(plan["node_gpus"]) == "2", tres
        assert tres["cpu"] == str(plan["node_cpus"]) == "16", tres
        assert scontrol_field(row["job_id"], "TresPerNode") == "gres:gpu:2"
    (array,) = {r["job_id"].split("_")[0] for r in rows}
    script = (sweep.dir / ".submitit" / array / f"{array}_submission.sh").read_text()
    for line in ("#SBATCH --requeue", "#SBATCH --signal=USR2@300", f"#SBATCH --chdir={sweep.dir / 'code'}",
                 f"#SBATCH --partition={sweep.partition}", "#SBATCH --ntasks-per-node=1",
                 "export HF_HUB_OFFLINE=1", "export WANDB_MODE='offline'", "export HF_HOME="):
        assert line in script, (line, script)
    # no secret from the submitter's environment anywhere: sbatch scripts, pickles, logs, snapshots
    written = files_under(sweep.dir) + files_under(sweep.out)
    assert any(p.name.endswith("_submitted.pkl") for p in written)
    for path in written:
        data = path.read_bytes()
        for name, value in SECRETS.items():
            assert value.encode() not in data, f"{name} leaked into {path}"
    seen = [json.loads(p.read_text().splitlines()[0]) for p in sorted(sweep.dir.glob("*/stand_in.jsonl"))]
    assert len(seen) == 2
    dirs = {s["checkpoint_dir"] for s in seen}
    assert len(dirs) == 2 and all(Path(d).name.startswith("seed1_lr") for d in dirs)
    # the swept key first; the model and data paths given on the command line follow (issue 33: a name
    # carries what the id hashes, and a path changes what is trained)
    names = sorted(Path(d).name for d in dirs)
    assert names[0].startswith("seed1_lr2e-6_") and names[1].startswith("seed1_lr3e-6_"), names
    assert len({s["wandb_run_id"] for s in seen}) == 2
    # grouped by the sweep: its dir's name
    assert {s["wandb_run_group"] for s in seen} == {f"sweep-{sweep.dir.name}"}
    for s in seen:
        ckpt = Path(s["checkpoint_dir"])
        assert [p.name for p in (ckpt / "wandb").iterdir()] == [f"offline-run-{s['wandb_run_id']}"]
        recorded = json.loads((ckpt / "run_identity.json").read_text())
        assert ckpt.name.endswith("-" + recorded["run_id"])


def test_a_queued_job_runs_the_code_and_config_as_submitted(slurm_cluster, tmp_path):
    checkout = tmp_path / "checkout"
    for name in ("src", "conf", "hydra_plugins", "sweeps", "pyproject.toml"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, checkout / name, ignore=shutil.ignore_patterns("__pycache__", "local"))
        else:
            shutil.copy2(src, checkout / name)
    sweep = Sweep(tmp_path, slurm_cluster.partition, checkout=checkout)
    try:
        # held at submission, so the job surely starts after the edits below (a real submission with the
        # stand-in training: a dry run submits nothing)
        proc = sweep.start(["gpus=2", f"debug.train_command_override='{stand_in()}'", *sweep.fake_inputs(),
                            "+hydra.launcher.additional_parameters.hold=true"])
        sweep.wait_for("the submission", lambda: bool(sweep.job_ids()), timeout=60)
        (job_id,) = sweep.job_ids()
        assert scontrol_field(job_id, "JobState") == "PENDING"

        config = checkout / "conf" / "config.yaml"
        text = config.read_text()
        assert "  save_freq: 50\n" in text
        config.write_text(text.replace("  save_freq: 50\n", "  save_freq: 7\n"))
        with open(checkout / "src" / "plan" / "run_plan.py", "a") as f:
            f.write("\nraise RuntimeError('src/plan/run_plan.py edited after submission')\n")
        broken = subprocess.run([sys.executable, "-c", "import src.plan"], cwd=checkout, capture_output=True,
                                text=True, timeout=60)
        assert "edited after submission" in broken.stderr  # the edit would break a job that read the checkout

        subprocess.run(["scontrol", "release", job_id], check=True, capture_output=True, timeout=30)
        assert sweep.wait(proc) == 0, sweep.output()
        (row,) = sweep.summary()
        snap = Path(row["run_dir"]) / "snapshot"
        assert yaml.safe_load((snap / "composed.yaml").read_text())["trainer"]["save_freq"] == 50
        assert yaml.safe_load((snap / "verl_config.yaml").read_text())["trainer"]["save_freq"] == 50
        assert "save_freq: 50" in (sweep.dir / "code" / "conf" / "config.yaml").read_text()
        # data, results and outputs still go to the checkout the user submitted from
        assert json.loads((sweep.dir / "code" / "CODE_SNAPSHOT.json").read_text())["checkout"] == str(checkout)
    finally:
        sweep.cleanup()


def test_resume_sweep_resubmits_only_the_failed_job(sweep):
    """--resume-sweep (issue 51, finding 14): a Slurm sweep of two seeds, job #1 failing while a flag file
    exists; resumed, only job #1 is submitted again (a new Slurm job), into its own run dir and checkpoint
    dir, from a new code copy (code.1/); job #0 keeps its row and does not start again."""
    flag = sweep.tmp / "fail"
    flag.touch()
    trainer = f"debug.train_command_override='{sys.executable} {REPO}/tests/helpers/resumable_train.py {flag}'"
    res = sweep.run(["gpus=2", "seed=1,2", trainer] + sweep.fake_inputs())
    assert res.returncode == 1, res.stdout + res.stderr
    rows = sweep.summary()
    assert [r["state"] for r in rows] == ["succeeded", "failed"], rows

    flag.unlink()
    again = subprocess.run([sys.executable, "-m", "src.launch", "--resume-sweep", str(sweep.dir)], cwd=sweep.checkout,
                           env=sweep.env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "running 1 failed (#1) again" in again.stdout and "[sweep] #0 succeeded before: left alone" in again.stdout
    after = sweep.summary()
    assert [r["state"] for r in after] == ["succeeded", "succeeded"], after
    assert after[0]["job_id"] == rows[0]["job_id"] and after[1]["job_id"] != rows[1]["job_id"]
    assert [r["run_dir"] for r in after] == [r["run_dir"] for r in rows]
    assert [s["resumed_from"] for s in starts(rows[0]["run_dir"])] == [0]
    resumed = starts(rows[1]["run_dir"])
    assert [s["resumed_from"] for s in resumed] == [0, 1]
    assert resumed[0]["checkpoint_dir"] == resumed[1]["checkpoint_dir"]
    assert (sweep.dir / "code.1" / "CODE_SNAPSHOT.json").is_file()

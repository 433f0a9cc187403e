"""A local `--multirun` writes `<sweep dir>/summary.json` as a Slurm sweep does (issue 36), with the
same writer (src/record/sweep_summary.py): one row per job with its overrides, state, error and run
dir; a job that fails is a failed row with its error, and the sweep goes on."""
import json
from pathlib import Path

from src.record import identity as run_identity
from src.record import sweep_summary
from tests.helpers.launches import launch

# the keys of a row, Slurm's and local alike (a local job has no job id, log before training, or request)
ROW_KEYS = {"idx", "job_id", "overrides", "state", "error", "log", "run_dir", "gpus_per_node", "cpus_per_task",
            "nodes", "starts"}


def _sweep_dir(out):
    (sweep,) = (out / "outputs" / "multirun").iterdir()
    return sweep


def test_local_sweep_writes_summary_json_with_each_jobs_outcome(isolated_paths):
    out, paths = isolated_paths
    result = launch(["--multirun", "algo=grpo,dapo", "dry_run=true"] + paths)
    assert result.returncode == 0, result.stderr
    sweep = _sweep_dir(out)
    rows = json.loads((sweep / sweep_summary.SUMMARY_FILE).read_text())
    assert [set(r) for r in rows] == [ROW_KEYS, ROW_KEYS]
    assert [(r["idx"], r["state"], r["error"]) for r in rows] == [(0, "succeeded", None), (1, "succeeded", None)]
    assert [r["overrides"][0] for r in rows] == ["algo=grpo", "algo=dapo"]
    assert [r["starts"] for r in rows] == [0, 0]  # a dry run never starts training (attempts.jsonl)
    for r in rows:
        assert (sweep / r["run_dir"].rsplit("/", 1)[1] / "snapshot" / "plan.json").is_file()
    # issue 51 (finding 8): it ended without a summary line or the sweep dir; now as a Slurm sweep ends
    end = result.stderr.strip().splitlines()[-3:]
    assert end[0] == f"[sweep] summary: 2 succeeded, 0 failed ({sweep / sweep_summary.SUMMARY_FILE})", result.stderr[-2000:]
    assert end[1].startswith("  ok     #0 (algo=grpo ") and end[2].startswith("  ok     #1 (algo=dapo ")

    # the grpo job's checkpoint dir now holds another run (a hand-set path, a hash collision): that
    # job is refused, the dapo job still runs, and the summary says which is which
    plan = json.loads((sweep / rows[0]["run_dir"].rsplit("/", 1)[1] / "snapshot" / "plan.json").read_text())
    run_identity.record(Path(plan["checkpoint_dir"]), {"actor.lr": 1.0}, "0badc0de", None)
    again = [p.replace(f"{out}/outputs", f"{out}/again") for p in paths]
    result = launch(["--multirun", "algo=grpo,dapo", "dry_run=true"] + again)
    assert result.returncode != 0
    (second,) = (out / "again" / "multirun").iterdir()
    rows = json.loads((second / sweep_summary.SUMMARY_FILE).read_text())
    assert [r["state"] for r in rows] == ["failed", "succeeded"]
    assert "holds run 0badc0de trained with another config" in rows[0]["error"]
    assert rows[1]["error"] is None
    # the summary names the failed job with its error, and Hydra adds no second copy of it
    assert f"[sweep] summary: 1 succeeded, 1 failed ({second / sweep_summary.SUMMARY_FILE})" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "1 of 2 jobs of the sweep failed: #0"
    assert "Error executing job" not in result.stderr and "HYDRA_FULL_ERROR" not in result.stderr

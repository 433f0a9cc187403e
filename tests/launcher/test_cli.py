"""`python -m src.launch` as a user runs it: refusals, preflight, dry run, snapshot round trip."""
import json
from pathlib import Path

import pytest
import yaml

from src.config import compose_config
from tests.helpers.launches import files_under, launch

SECRETS = {"WANDB_API_KEY": "wandb-secret-0123456789", "HF_TOKEN": "hf_secret_token_abcdef",
           "QE_SCORER_TOKEN": "scorer-secret-xyz987", "DB_PASSWORD": "hunter2-password"}


@pytest.mark.parametrize("args,needle", [
    (["gpus=0"], "gpus (GPUs per node) must be a positive integer, got 0"),
    (["gpus=-2"], "got -2"),
    (["nodes=0"], "nodes must be a positive integer, got 0"),
    (["reward=nope"], "Could not find 'reward/nope'"),
    (["algo=ppo"], "comet" if False else "grpo"),
    (["data.train_batch_size=7", "gpus=4"], "breaks verl rule P >= m"),
    (["reward=comet,xcomet_xl"], "is a sweep: add --multirun"),
    (["--multirun", "reward=comet,nope"], "Could not find 'reward/nope'"),
    (["--multirun", "gpus=2,0"], "got 0"),
    # types and enums come from the schema (src/config/schema.py), with the key
    (["gpus=four"], "gpus=four: Value 'four' of type 'str' could not be converted to Integer"),
    (["scorer.placement=gpu"], "Invalid value 'gpu', expected one of [shared, dedicated, cpu, external]"),
    (["scorer.restarts=-1"], "scorer.restarts must be an integer >= 0, got -1"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(isolated_paths, args, needle):
    out, paths = isolated_paths
    result = launch(args + paths + ["dry_run=true"])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert needle in lines[0]
    assert files_under(out) == []


def test_real_launch_without_gpus_stops_in_preflight(isolated_paths):
    out, paths = isolated_paths
    result = launch(["gpus=4"] + paths)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: this node needs 4 GPUs for gpus=4 but 0 are visible"), result.stderr
    assert "Traceback" not in result.stderr
    assert files_under(out) == []


def test_dry_run_snapshot_round_trip_and_no_secret_in_any_file(isolated_paths):
    out, paths = isolated_paths
    first = launch(["reward=comet", "algo=dapo", "gpus=3", "model=qwen2.5_7b", "dry_run=true"] + paths,
                   env_extra=SECRETS)
    assert first.returncode == 0, first.stderr
    snaps = sorted(out.rglob("snapshot"))
    assert len(snaps) == 1
    snap = snaps[0]
    names = {p.name for p in snap.iterdir()}
    assert {"plan.json", "verl_config.yaml", "composed.yaml", "overrides.yaml", "command.txt", "git.txt",
            "env.json", "packages-train.txt"} <= names
    plan = json.loads((snap / "plan.json").read_text())
    assert plan["world_size"] == 3 and plan["batch"]["rollout_tp"] == 1 and plan["algo"] == "dapo"
    verl = yaml.safe_load((snap / "verl_config.yaml").read_text())
    assert verl["trainer"]["default_local_dir"] == plan["checkpoint_dir"]
    # verl's main_ppo with the time-limit save (src/trainer/entry.py)
    assert "-m src.trainer --config-path=" in (snap / "command.txt").read_text()
    env = json.loads((snap / "env.json").read_text())
    assert env["WANDB_API_KEY"] == "<redacted>" and env["HF_TOKEN"] == "<redacted>"

    # --from-snapshot: a reproduction from step 0 in a new dir, marked as one; the same training id
    again = launch(["--from-snapshot", str(snap), "dry_run=true"], env_extra=SECRETS)
    assert again.returncode == 0, again.stderr
    assert "warning: the training config" not in again.stderr
    snaps2 = sorted(s for s in out.rglob("snapshot") if s != snap)
    assert len(snaps2) == 1
    repro = json.loads((snaps2[0] / "plan.json").read_text())
    assert repro["checkpoint_dir"] == plan["checkpoint_dir"] + "-repro1"
    assert repro["run_id"] == plan["run_id"] and repro["reproduces"] == plan["run_id"]
    assert repro["wandb_run_id"] == plan["wandb_run_id"] + "-repro1"
    assert f"reproducing run {plan['run_id']} from step 0 into a new dir" in again.stdout

    # --from-snapshot --resume: the original run in its own dir, the byte-identical verl config
    resumed = launch(["--from-snapshot", str(snap), "--resume", "dry_run=true"], env_extra=SECRETS)
    assert resumed.returncode == 0, resumed.stderr
    snap3 = sorted(s for s in out.rglob("snapshot") if s not in (snap, snaps2[0]))[0]
    assert (snap3 / "verl_config.yaml").read_bytes() == (snap / "verl_config.yaml").read_bytes()
    assert f"resuming run {plan['run_id']} in its own dir {plan['checkpoint_dir']}" in resumed.stdout
    assert not (out / "results").exists()  # dry runs write nothing into results/
    for path in files_under(out):
        text = path.read_bytes()
        for value in SECRETS.values():
            assert value.encode() not in text, f"secret leaked into {path}"
    for stream in (first.stdout, first.stderr, again.stdout, again.stderr, resumed.stdout, resumed.stderr):
        assert not any(v in stream for v in SECRETS.values())


def test_from_snapshot_refuses_overrides_and_non_snapshots(tmp_path):
    result = launch(["--from-snapshot", str(tmp_path)])
    assert result.returncode == 2 and "is not a snapshot dir" in result.stderr


def test_from_snapshot_takes_a_run_dir_and_names_a_missing_path(tmp_path):
    """Issue 33: a run dir and a path that does not exist both said "is not a snapshot dir"."""
    from src.pipeline import snapshot_dir_of

    run = tmp_path / "run"
    (run / "snapshot").mkdir(parents=True)
    (run / "snapshot" / "composed.yaml").write_text("{}\n")
    assert snapshot_dir_of(run) == snapshot_dir_of(run / "snapshot") == run / "snapshot"
    missing = tmp_path / "nope"
    result = launch(["--from-snapshot", str(missing), "dry_run=true"])
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"error: --from-snapshot {missing}: no such file or directory; pass a run dir or its snapshot, "
        f"e.g. outputs/runs/<run>/snapshot"]


def test_gpus_is_a_plain_integer_key():
    # any count composes; the plan decides which ones verl can split (tests above: gpus=0, -2)
    assert compose_config(["gpus=5"])["gpus"] == 5
    assert compose_config(["gpus=8"])["gpus"] == 8
    # the quoted form of the former `gpus` config group (old sweep files, old snapshots' overrides.yaml)
    assert compose_config(["gpus='3'"])["gpus"] == 3


def _job_plans(out) -> dict:
    """{overrides that differ per job: plan.json} of every job of a dry multirun under out/."""
    plans = {}
    for snap in out.rglob("snapshot"):
        overrides = yaml.safe_load((snap / "overrides.yaml").read_text())
        key = tuple(sorted(o for o in overrides if o.startswith(("trainer.lr", "reward.weights", "+verl."))))
        plans[key] = json.loads((snap / "plan.json").read_text())
    return plans


def test_sweep_jobs_get_distinct_dirs_and_wandb_ids_whatever_the_override_order(isolated_paths):
    out, paths = isolated_paths
    sweep = ["trainer.lr=1e-6,3e-6", "reward.weights.bleu=0.5,1.0", "+verl.actor_rollout_ref.actor.clip_ratio_c=2.5"]
    first = launch(["--multirun", "reward=comet", "gpus=4", *sweep, "dry_run=true"] + paths)
    assert first.returncode == 0, first.stderr
    plans = _job_plans(out)
    assert len(plans) == 4
    dirs = {p["checkpoint_dir"] for p in plans.values()}
    assert len(dirs) == 4 and len({p["wandb_run_id"] for p in plans.values()}) == 4
    assert len({p["wandb_run_name"] for p in plans.values()}) == 4
    for key, p in plans.items():
        assert p["checkpoint_dir"].startswith(f"{out}/results/qwen2.5_3b/comet/grpo/gpus4/seed1_")
        assert p["checkpoint_dir"].endswith("-" + p["run_id"]) and p["wandb_run_id"] == "qerl-" + p["run_id"]
        lr = next(o for o in key if o.startswith("trainer.lr")).split("=")[1]
        # 1e-6 is the default: it trains what no lr override trains, so it names nothing (issue 33)
        assert ("_lr3e-6_" in p["checkpoint_dir"]) == (float(lr) == 3e-6)
        # every word in the plan; the name has room for those first in the table (lr, weights, data, ...)
        assert "clipc2.5" in [d["word"] for d in p["differs_from_preset"]]

    # the same sweep again, overrides in another order: the same ids and dirs (a rerun resumes)
    again_out = out.parent / "again"
    again_paths = [p.replace(str(out), str(again_out)) if not p.startswith("paths.results_root") else p
                   for p in paths]
    second = launch(["--multirun", "dry_run=true", *reversed(sweep), "gpus=4", "reward=comet"] + again_paths)
    assert second.returncode == 0, second.stderr
    assert {k: p["checkpoint_dir"] for k, p in _job_plans(again_out).items()} == {
        k: p["checkpoint_dir"] for k, p in plans.items()}
    assert not (out / "results").exists()  # dry runs write nothing into results/


def test_checkpoint_dir_holding_another_run_is_refused_with_the_keys(isolated_paths):
    out, paths = isolated_paths
    first = launch(["trainer.lr=3e-6", "dry_run=true"] + paths)
    assert first.returncode == 0, first.stderr
    snap = next(out.rglob("snapshot"))
    plan = json.loads((snap / "plan.json").read_text())
    ckpt = Path(plan["checkpoint_dir"])
    ckpt.mkdir(parents=True)
    # what a hash collision or a hand-set path would leave: the dir records another lr
    lr = yaml.safe_load((snap / "verl_config.yaml").read_text())["actor_rollout_ref"]["actor"]["optim"]["lr"]
    assert lr == 3e-6
    from src.record import identity as run_identity
    from tests.helpers.run_identity import identified
    same_data = [p for p in paths if p.startswith(("paths.data_root", "paths.model_root"))]
    recorded = identified(["trainer.lr=1e-6"] + same_data, out.parent / "other")[2]
    run_identity.record(ckpt, recorded, "feedbeef", None)
    before = files_under(out)
    result = launch(["--from-snapshot", str(snap), "--resume", "dry_run=true"])
    assert result.returncode == 2
    errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert f"{ckpt} holds run feedbeef trained with another config" in errors[0]
    assert "differs in actor_rollout_ref.actor.optim.lr (1e-06 -> 3e-06):" in errors[0]
    assert files_under(out) == before  # nothing written: no new run dir, no snapshot

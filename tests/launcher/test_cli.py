"""`python -m src.launch` as a user runs it: refusals, preflight, dry run, snapshot round trip."""
import json

import pytest
import yaml

from src.launch import compose_config, quote_gpu_counts
from tests.launcher.conftest import files_under, launch

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
    assert plan["world_size"] == 3 and plan["batch"]["tp"] == 1 and plan["algo"] == "dapo"
    verl = yaml.safe_load((snap / "verl_config.yaml").read_text())
    assert verl["trainer"]["default_local_dir"] == plan["checkpoint_dir"]
    assert "verl.trainer.main_ppo" in (snap / "command.txt").read_text()
    env = json.loads((snap / "env.json").read_text())
    assert env["WANDB_API_KEY"] == "<redacted>" and env["HF_TOKEN"] == "<redacted>"

    again = launch(["--from-snapshot", str(snap), "dry_run=true"], env_extra=SECRETS)
    assert again.returncode == 0, again.stderr
    assert "differs" not in again.stderr
    snaps2 = sorted(s for s in out.rglob("snapshot") if s != snap)
    assert len(snaps2) == 1
    assert (snaps2[0] / "verl_config.yaml").read_bytes() == (snap / "verl_config.yaml").read_bytes()

    for path in files_under(out):
        text = path.read_bytes()
        for value in SECRETS.values():
            assert value.encode() not in text, f"secret leaked into {path}"
    for stream in (first.stdout, first.stderr, again.stdout, again.stderr):
        assert not any(v in stream for v in SECRETS.values())


def test_from_snapshot_refuses_overrides_and_non_snapshots(tmp_path):
    result = launch(["--from-snapshot", str(tmp_path)])
    assert result.returncode == 2 and "is not a snapshot dir" in result.stderr


def test_any_gpu_count_composes_but_group_lists_shipped_files():
    assert compose_config(["gpus='5'"])["gpus"]["per_node"] == 5
    assert compose_config(["gpus='8'"])["gpus"]["per_node"] == 8


@pytest.mark.parametrize("arg,expected", [
    ("gpus=4", "gpus='4'"), ("gpus=2,3,4,8", "gpus='2','3','4','8'"), ("gpus=-2", "gpus='-2'"),
    ("gpus.per_node=4", "gpus.per_node=4"), ("reward=comet", "reward=comet")])
def test_gpu_counts_are_quoted_for_hydra(arg, expected):
    assert quote_gpu_counts(arg) == expected

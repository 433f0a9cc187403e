"""A snapshot written by the code before the one-package-per-stage layout still re-runs, and a run
launched again after the move keeps its id (so a relaunch finds its checkpoint dir).

The fixture (tests/fixtures/snapshot_before_layout/, README there) is that code's own output:
its composed.yaml has the GPU count as the former `gpus` group, its verl config names the moved
replay-buffer module by its old path, and its run id was computed by the old code.
"""
import json
import shutil
from pathlib import Path

import yaml

from src import verl_config
from src.config import compose_config
from src.pipeline import identify
from src.plan import build_plan
from tests.helpers.launches import launch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "snapshot_before_layout"
OLD_ROOT = "/qe-rl-fixture-root"
OLD_ID = "43b4c978"
OVERRIDES = ["reward=comet", "algo=dapo", "gpus=4", "seed=7", "trainer.lr=3e-6"]


def relocated_snapshot(tmp_path: Path) -> tuple[Path, dict]:
    """The fixture with its output and results roots (not part of the run's identity) under tmp_path."""
    snap = tmp_path / "old_run" / "snapshot"
    shutil.copytree(FIXTURE / "snapshot", snap)
    for name in ("composed.yaml", "plan.json"):
        text = (snap / name).read_text(encoding="utf-8")
        text = text.replace(f"{OLD_ROOT}/outputs", f"{tmp_path}/outputs").replace(f"{OLD_ROOT}/results",
                                                                                 f"{tmp_path}/results")
        (snap / name).write_text(text, encoding="utf-8")
    return snap, json.loads((snap / "plan.json").read_text(encoding="utf-8"))


def test_the_fixture_is_the_old_shape():
    composed = yaml.safe_load((FIXTURE / "snapshot" / "composed.yaml").read_text(encoding="utf-8"))
    assert composed["gpus"] == {"per_node": 4}
    verl = (FIXTURE / "snapshot" / "verl_config.yaml").read_text(encoding="utf-8")
    assert "pkg://src.training_guard" in verl and "src.trainer" not in verl
    assert json.loads((FIXTURE / "snapshot" / "plan.json").read_text(encoding="utf-8"))["run_id"] == OLD_ID


def test_old_snapshot_reproduces_with_the_same_id(tmp_path):
    snap, plan = relocated_snapshot(tmp_path)
    result = launch(["--from-snapshot", str(snap), "dry_run=true"])
    assert result.returncode == 0, result.stderr
    assert "warning: the training config" not in result.stderr
    (new,) = [s for s in (tmp_path / "outputs").rglob("snapshot")]
    repro = json.loads((new / "plan.json").read_text(encoding="utf-8"))
    assert repro["run_id"] == OLD_ID and repro["reproduces"] == OLD_ID and repro["gpus_per_node"] == 4
    assert repro["checkpoint_dir"] == plan["checkpoint_dir"] + "-repro1"
    verl = yaml.safe_load((new / "verl_config.yaml").read_text(encoding="utf-8"))
    assert verl["trainer"]["v1"]["sampler"]["custom_sampler"]["path"] == "pkg://src.trainer.guard"
    assert "-m src.trainer --config-path=" in (new / "command.txt").read_text(encoding="utf-8")


def test_old_run_resumes_in_its_own_dir_and_its_identity_file_is_checked(tmp_path):
    snap, plan = relocated_snapshot(tmp_path)
    ckpt = Path(plan["checkpoint_dir"])
    ckpt.mkdir(parents=True)
    shutil.copy(FIXTURE / "checkpoint" / "run_identity.json", ckpt)
    result = launch(["--from-snapshot", str(snap), "--resume", "dry_run=true"])
    assert result.returncode == 0, result.stderr
    assert f"resuming run {OLD_ID} in its own dir {ckpt}" in result.stdout

    # the check is live: a dir whose identity says another learning rate is refused
    recorded = json.loads((ckpt / "run_identity.json").read_text(encoding="utf-8"))
    recorded["identity"]["actor_rollout_ref.actor.optim.lr"] = 1e-5
    (ckpt / "run_identity.json").write_text(json.dumps(recorded), encoding="utf-8")
    refused = launch(["--from-snapshot", str(snap), "--resume", "dry_run=true"])
    assert refused.returncode == 2 and "actor_rollout_ref.actor.optim.lr" in refused.stderr, refused.stderr


def test_the_same_command_after_the_move_trains_what_it_trained(tmp_path):
    """The move changed no value of the training config: every key of the old run's identity has
    its value today (the moved module by its first path, which is what keeps the id). Keys added
    since (a new reward setting) are a new training config and a new id, by design; without any,
    the id is the old one, so a relaunch finds its checkpoint dir."""
    cfg = compose_config(OVERRIDES + [f"paths.root_dir={OLD_ROOT}", f"paths.results_root={tmp_path}/results"])
    plan = build_plan(cfg, run_dir=str(tmp_path / "run"))
    plan, _, ident = identify(plan, cfg, OVERRIDES, verl_config.build(plan, cfg), None)
    recorded = json.loads((FIXTURE / "checkpoint" / "run_identity.json").read_text(encoding="utf-8"))["identity"]
    assert ident["trainer.v1.sampler.custom_sampler.path"] == "pkg://src.training_guard"
    assert {k: ident.get(k, "<absent>") for k in recorded} == recorded
    if set(ident) == set(recorded):
        assert plan.run_id == OLD_ID

"""Every snapshot this repository has written re-runs with today's code (docs/snapshots.md).

The fixtures are the real output of past commits' own launchers (tests/fixtures/snapshots/README.md
says how each was made). Each is re-run through the CLI (`--from-snapshot ... dry_run=true`) and
must give the verl config it recorded, apart from the run's names and paths; keys added since are
filled from today's defaults and named on the first lines. A key added after a snapshot was
written (to our config or to verl's) is shown on a snapshot that lacks it; what cannot be re-run
is one `error:` line, exit 2, nothing written.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from src.pipeline.lineage import RUN_NAMES_AND_PATHS
from src.record import identity, snapshot
from tests.helpers.launches import files_under, launch

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PAST = sorted(p for p in (FIXTURES / "snapshots").glob("*/*") if p.is_dir())
BEFORE_LAYOUT = FIXTURES / "snapshot_before_layout" / "snapshot"  # 78dd887
CASES = PAST + [BEFORE_LAYOUT]
ROOT = "/qe-rl-fixture-root"

# keys whose value verl's own yaml derives from a name or path RUN_NAMES_AND_PATHS holds
DERIVED = ("actor_rollout_ref.rollout.trace.project_name", "actor_rollout_ref.rollout.trace.experiment_name")
MOVED = {old: new for new, old in identity.STABLE_CODE_NAMES.items()}

# keys each commit's snapshot lacks because they came later (read in git history, not in the code
# under test): the notice must name them
ADDED_SINCE = {
    "9cbfe4f": ["scorer.models.cometkiwi_da.kind", "scorer.lost_groups_allowed", "reward.credit"],
    "5584a51": ["scorer.models.cometkiwi_da.kind", "scorer.lost_groups_allowed", "scorer.restarts"],
    "67b6993": ["scorer.lost_groups_allowed", "reward.credit"],
    "d8d19bf": ["algo.filter_groups.max_inflight_gen_batches"],
    "78dd887": ["algo.filter_groups.max_inflight_gen_batches"],
}


def case_id(path: Path) -> str:
    return "78dd887/before_layout" if path == BEFORE_LAYOUT else f"{path.parent.name}/{path.name}"


def relocated(fixture: Path, tmp_path: Path) -> Path:
    """The fixture as <tmp>/old_run/snapshot, its output and results roots (not part of a run's
    identity) moved under tmp_path; model and data paths stay as recorded (a dry run does not open them)."""
    snap = tmp_path / "old_run" / "snapshot"
    shutil.copytree(fixture, snap)
    for name in (snapshot.COMPOSED, snapshot.PLAN):
        text = (snap / name).read_text(encoding="utf-8")
        for sub in ("outputs", "results"):
            text = text.replace(f"{ROOT}/{sub}", f"{tmp_path}/{sub}")
        (snap / name).write_text(text, encoding="utf-8")
    return snap


def flat(path: Path) -> dict:
    return identity._flatten(yaml.safe_load(path.read_text(encoding="utf-8")))


def new_snapshot(tmp_path: Path) -> Path:
    (new,) = [s for s in (tmp_path / "outputs" / "runs").glob("*/snapshot")]
    return new


def assert_same_verl_config_apart_from_names_and_paths(old: dict, new: dict, new_plan: dict) -> None:
    assert set(new) == set(old), f"keys differ: {sorted(set(new) ^ set(old))[:10]}"
    for k in sorted(k for k in old if old[k] != new[k]):
        if isinstance(old[k], str) and old[k] in MOVED:  # our module, moved since: today's name
            assert new[k] == MOVED[old[k]], k
            continue
        assert k in RUN_NAMES_AND_PATHS + DERIVED or k.endswith(".profiler.save_path"), \
            f"{k}: {old[k]!r} -> {new[k]!r} is not a name or a path"
        # a path now points into this run's checkpoint dir, a name carries this run's id
        assert isinstance(new[k], str) and (new[k].startswith(new_plan["checkpoint_dir"])
                                            or new_plan["run_id"] in new[k] or k == "trainer.project_name"), (k, new[k])


@pytest.mark.parametrize("fixture", CASES, ids=case_id)
def test_each_past_snapshot_re_runs_with_the_verl_config_it_recorded(fixture, tmp_path):
    snap = relocated(fixture, tmp_path)
    original = json.loads((snap / snapshot.PLAN).read_text(encoding="utf-8"))
    result = launch(["--from-snapshot", str(snap), "dry_run=true"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "warning: the training config" not in result.stderr

    # the first lines: which commit wrote it, what was filled, and that verl runs what it recorded
    commit = (snap / snapshot.GIT).read_text().split()[1][:7]
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"snapshot: written by {commit} (snapshot format 1)"), lines[:3]
    head = "\n".join(l for l in lines if l.startswith("snapshot: "))
    assert lines[:len(head.splitlines())] == head.splitlines()
    for key in ADDED_SINCE.get(commit, []):
        assert f" {key}=" in head, (key, head)
    assert "snapshot: changes what verl runs: no: verl runs the snapshot's own verl_config.yaml" in head
    assert ("names no reward function" in head) == (commit == "9cbfe4f")

    new = new_snapshot(tmp_path)
    new_plan = json.loads((new / snapshot.PLAN).read_text(encoding="utf-8"))
    assert_same_verl_config_apart_from_names_and_paths(flat(snap / snapshot.VERL_CONFIG),
                                                       flat(new / snapshot.VERL_CONFIG), new_plan)
    # a snapshot with a run id keeps it (the training config is the same); an older one gets its
    # id now, from its own verl config, and the reproduction says so
    if original.get("run_id"):
        assert new_plan["run_id"] == new_plan["reproduces"] == original["run_id"]
    else:
        assert new_plan["reproduces"] == new_plan["run_id"] and new_plan["run_id"]
    assert f"reproducing run {new_plan['reproduces']} from step 0" in result.stdout
    assert new_plan["checkpoint_dir"].endswith("-repro1")
    # every value the snapshot recorded is still there, in today's shape
    recorded = identity._flatten(yaml.safe_load((snap / snapshot.COMPOSED).read_text()))
    now = identity._flatten(yaml.safe_load((new / snapshot.COMPOSED).read_text()))
    for key, value in recorded.items():
        if key.startswith("gpus."):  # the former gpus group, migrated
            assert now["gpus"] == value
        else:
            assert now[key] == value, key
    assert json.loads((new / snapshot.FORMAT_FILE).read_text()) == {"format": snapshot.FORMAT}


def test_a_re_run_snapshot_re_runs_again_unchanged(tmp_path):
    """Today's own format: the re-run of a re-run fills nothing and runs the same verl config."""
    first = relocated(PAST[0], tmp_path / "a")
    assert launch(["--from-snapshot", str(first), "dry_run=true"]).returncode == 0
    again = new_snapshot(tmp_path / "a")
    result = launch(["--from-snapshot", str(again), "dry_run=true"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[1] == "snapshot: no key added since; nothing filled", result.stdout[:2000]
    (third,) = [s for s in (tmp_path / "a" / "outputs" / "runs").glob("*/snapshot") if s != again]
    plan = json.loads((third / snapshot.PLAN).read_text())
    assert_same_verl_config_apart_from_names_and_paths(flat(again / snapshot.VERL_CONFIG),
                                                       flat(third / snapshot.VERL_CONFIG), plan)


def _drop(tree: dict, dotted: str):
    *parents, last = dotted.split(".")
    for p in parents:
        tree = tree[p]
    return tree.pop(last)


def test_a_key_added_after_the_snapshot_is_filled_named_and_said_whether_verl_runs_it(tmp_path):
    """Next month's key, simulated: a snapshot that lacks a key today's conf/ has (ours) and one
    today's verl has (verl's): both filled from today's defaults, named first, and the verl one
    said to change what verl runs."""
    snap = relocated(FIXTURES / "snapshots" / "a485c05" / "comet_dapo_g4", tmp_path)  # the newest past format
    composed = yaml.safe_load((snap / snapshot.COMPOSED).read_text())
    _drop(composed, "scorer.restarts")
    _drop(composed, "trainer.val_before_train")
    (snap / snapshot.COMPOSED).write_text(yaml.safe_dump(composed, sort_keys=False))
    verl = yaml.safe_load((snap / snapshot.VERL_CONFIG).read_text())
    _drop(verl, "actor_rollout_ref.rollout.calculate_log_probs")
    (snap / snapshot.VERL_CONFIG).write_text(yaml.safe_dump(verl, sort_keys=False))

    result = launch(["--from-snapshot", str(snap), "dry_run=true"])
    assert result.returncode == 0, result.stderr[-3000:]
    filled = next(l for l in result.stdout.splitlines() if "added since, filled from today's defaults" in l)
    assert " scorer.restarts=1" in filled and " trainer.val_before_train=True" in filled, filled
    assert ("snapshot: changes what verl runs: YES: today's verl has key(s) the snapshot's verl config lacks, "
            "filled from verl's defaults: actor_rollout_ref.rollout.calculate_log_probs=True") in result.stdout
    new = new_snapshot(tmp_path)
    assert yaml.safe_load((new / snapshot.COMPOSED).read_text())["scorer"]["restarts"] == 1
    assert yaml.safe_load((new / snapshot.VERL_CONFIG).read_text())["actor_rollout_ref"]["rollout"][
        "calculate_log_probs"] is True


@pytest.mark.parametrize("name", [snapshot.VERL_CONFIG, snapshot.PLAN, snapshot.OVERRIDES])
def test_a_snapshot_missing_a_file_is_refused_in_one_line(name, tmp_path):
    snap = relocated(PAST[0], tmp_path)
    (snap / name).unlink()
    before = files_under(tmp_path)
    result = launch(["--from-snapshot", str(snap), "dry_run=true"])
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: {snap / name} is missing or unreadable (No such file or directory): a re-run needs the whole "
        f"snapshot dir as the launcher wrote it; restore {name}"]
    assert files_under(tmp_path) == before  # no run dir, no snapshot


def test_a_damaged_or_newer_snapshot_is_refused_in_one_line(tmp_path):
    snap = relocated(PAST[0], tmp_path)
    (snap / snapshot.COMPOSED).write_text("paths: [unclosed\n")
    result = launch(["--from-snapshot", str(snap)])  # no dry_run=: the launcher peeks at composed.yaml first
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"error: {snap / snapshot.COMPOSED} is not readable YAML")

    shutil.rmtree(snap)
    snap = relocated(PAST[0], tmp_path)
    (snap / snapshot.FORMAT_FILE).write_text(json.dumps({"format": snapshot.FORMAT + 1}))
    result = launch(["--from-snapshot", str(snap), "dry_run=true"])
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"has snapshot format {snapshot.FORMAT + 1}, newer than this code's {snapshot.FORMAT}" in result.stderr


def test_a_real_re_run_whose_model_is_gone_is_refused_in_one_line(tmp_path):
    """The real-run path (dry_run=false) goes through the same replay, then preflight: the model
    the snapshot names is not on this machine."""
    snap = relocated(PAST[0], tmp_path)
    result = launch(["--from-snapshot", str(snap), "dry_run=false"],
                    env_extra={"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_CPUS_PER_TASK": "32"})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert errors == [f"error: model not found at {ROOT}/models/Qwen2.5-3B; fix the path in conf/local/default.yaml "
                      f"(paths.*) or prepare it (docs/data-and-report.md)"], result.stderr[-2000:]
    assert not (tmp_path / "results").exists()


def test_a_snapshot_with_no_reward_function_plans_but_does_not_train(tmp_path):
    """The first launcher (9cbfe4f) wrote verl configs with no reward function: verl would score
    with its default_compute_score, which raises for this project's data at the first rollout. Its
    dry run re-runs (above) and says so; a real re-run is refused in one line before anything runs."""
    snap = relocated(FIXTURES / "snapshots" / "9cbfe4f" / "comet_dapo_g4", tmp_path)
    before = files_under(tmp_path)
    result = launch(["--from-snapshot", str(snap), "dry_run=false"],
                    env_extra={"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_CPUS_PER_TASK": "32"})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {snap / snapshot.VERL_CONFIG} names no reward function (written by 9cbfe4f")
    assert files_under(tmp_path) == before


@pytest.mark.parametrize("key, value, says", [
    ("trainer.v1.sampler.custom_sampler.path", "pkg://src.trainer.replay_guard",
     "trainer.v1.sampler.custom_sampler.path names the module src.trainer.replay_guard, which today's code does "
     "not have (moved or removed)"),
    ("trainer.v1.sampler.custom_sampler.name", "GuardedBuffer",
     "trainer.v1.sampler.custom_sampler.path names src.trainer.guard.GuardedBuffer, which today's code does not "
     "have (renamed or removed)"),
    ("reward.custom_reward_function.reward_kwargs.train_weights", "heavy",
     "reward.custom_reward_function.reward_kwargs as recorded are refused by today's src.rewards.compute"),
])
def test_a_snapshot_naming_code_today_lacks_is_refused_in_one_line(key, value, says, tmp_path):
    """The verl config names this project's code by module path; a module or class gone since,
    or reward kwargs today's reward function refuses, would fail on the GPU node at the first
    rollout: refused at launch instead, dry run too."""
    snap = relocated(FIXTURES / "snapshots" / "d8d19bf" / "comet_dapo_g4", tmp_path)
    verl = yaml.safe_load((snap / snapshot.VERL_CONFIG).read_text())
    *parents, last = key.split(".")
    node = verl
    for p in parents:
        node = node[p]
    node[last] = value
    (snap / snapshot.VERL_CONFIG).write_text(yaml.safe_dump(verl, sort_keys=False))
    before = files_under(tmp_path)
    result = launch(["--from-snapshot", str(snap), "dry_run=true"])
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {snap / snapshot.VERL_CONFIG}: {says}"), line
    assert line.endswith("this snapshot needs the code that wrote it (d8d19bf)")
    assert files_under(tmp_path) == before


def test_what_a_replay_takes_from_the_run_is_names_and_paths_only():
    """RUN_NAMES_AND_PATHS: each key is one the launcher fills per run (src/verl_config VERL_KEYS)
    and one the run's identity excludes, so a replay never changes what is trained."""
    from src.verl_config import VERL_KEYS

    filled = {k.lstrip("+") for k, _ in VERL_KEYS}
    for key in RUN_NAMES_AND_PATHS:
        assert key in filled and identity.is_excluded(key), key


def test_an_override_today_refuses_is_left_out_of_the_defaults_and_said(tmp_path):
    """A recorded override naming a group option removed since (here a model file that no longer
    exists): today's defaults are composed without it, the rest of the snapshot's choices still
    pick them, and the notice says which override was left out."""
    from src.pipeline.from_snapshot import notice
    from src.pipeline.replay import prepare
    from src.record import upgrade

    snap = relocated(FIXTURES / "snapshots" / "67b6993" / "comet_dapo_g4", tmp_path)
    overrides = yaml.safe_load((snap / snapshot.OVERRIDES).read_text()) + ["model=qwen2.5_1b"]
    (snap / snapshot.OVERRIDES).write_text(yaml.safe_dump(overrides))
    old = upgrade.load(snap)
    assert old.overrides_dropped == ["model=qwen2.5_1b"]
    assert dict(old.filled)["scorer.lost_groups_allowed"] == 0
    assert old.composed["model"]["name"] == "qwen2.5_3b"      # the recorded value, not a default
    lines = notice(old, prepare(old.verl))
    assert ("snapshot: today's conf/ refuses these recorded overrides, so defaults are filled without them: "
            "model=qwen2.5_1b") in lines

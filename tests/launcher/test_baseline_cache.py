"""src/pipeline/baseline_cache.py: the identity a run's name is read against, remembered on disk, names runs as
the launcher names them without it; a stored entry is what is read (one changed by hand changes the name); it is
switched off with verl's cache; and its key changes with the code, conf/ and the environment conf/ reads."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from src.config import CODE_ROOT
from src.pipeline import baseline_cache
from tests.helpers.launches import launch

# a run read against its preset's baseline, and one with a changed weight (read against a second baseline:
# src/pipeline/lineage.py names_read)
RUNS = [["reward=comet", "algo=dapo", "gpus=4", "algo.clip_ratio_high=0.3", "seed=3"],
        ["reward=comet", "gpus=2", "reward.weights.bleu=0.5"]]
# what a stored baseline is changed to by hand
LR_KEY = "actor_rollout_ref.actor.optim.lr"


def _names(tmp_path: Path, runs: list[list[str]], **env: str) -> list[tuple[str, str]]:
    """Each dry run's (wandb run name, run id), as its plan.json has them."""
    names = []
    for run in runs:
        out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}"
        done = launch([*run, "dry_run=true", f"paths.output_dir={out}", f"paths.results_root={tmp_path}/res"],
                      env_extra={"QE_RL_CACHE_DIR": str(tmp_path / "cache"), **env})
        assert done.returncode == 0, done.stderr
        (plan,) = out.glob("runs/*/snapshot/plan.json")
        body = json.loads(plan.read_text())
        names.append((body["wandb_run_name"], body["run_id"]))
    return names


def test_remembered_baselines_name_runs_as_computed_ones_and_are_what_is_read(tmp_path):
    off = _names(tmp_path, RUNS, QE_RL_VERL_CACHE="0")   # computed, nothing stored
    assert not (tmp_path / "cache").exists()
    assert _names(tmp_path, RUNS) == off                  # computed and stored
    entries = sorted((tmp_path / "cache" / "baseline").glob("*.json"))
    assert len(entries) == 3, entries   # the two runs' baselines, and the second's with its weight
    assert _names(tmp_path, RUNS) == off                  # read back
    for entry in entries:   # a baseline whose learning rate differs: the name says the run's
        body = json.loads(entry.read_text())
        body["identity"] = [[k, 12345.0 if k == LR_KEY else v] for k, v in body["identity"]]
        entry.write_text(json.dumps(body))
    changed = _names(tmp_path, RUNS)
    assert [rid for _, rid in changed] == [rid for _, rid in off], (changed, off)   # the same runs
    assert all(name != was and "lr" in name for (name, _), (was, _) in zip(changed, off)), (changed, off)


def test_the_key_holds_the_code_conf_and_the_environment_conf_reads(tmp_path):
    root = tmp_path / "code"
    for tree in baseline_cache.CODE_TREES:
        shutil.copytree(CODE_ROOT / tree, root / tree, ignore=shutil.ignore_patterns("__pycache__"))
    base = ("reward=comet", "gpus=2")
    env = {"QE_RL_MODELS": "/models", "UNRELATED": "1"}
    first = baseline_cache.key(base, 80.0, root, env)
    assert baseline_cache.key(base, 80.0, root, {**env, "UNRELATED": "2"}) == first
    assert baseline_cache.key(base, 80.0, root, {**env, "QE_RL_MODELS": "/elsewhere"}) != first  # conf/paths reads it
    assert baseline_cache.key(base, 40.0, root, env) != first
    assert baseline_cache.key(("reward=comet", "gpus=4"), 80.0, root, env) != first
    for edit in (root / "conf" / "algo" / "grpo.yaml", root / "src" / "plan" / "batch.py"):
        baseline_cache.code_fingerprint.cache_clear()   # once per process: an edit is read by the next launch
        before = baseline_cache.key(base, 80.0, root, env)
        with open(edit, "a", encoding="utf-8") as f:
            f.write("\n# an edit\n")
        baseline_cache.code_fingerprint.cache_clear()
        assert baseline_cache.key(base, 80.0, root, env) != before, edit
    baseline_cache.code_fingerprint.cache_clear()

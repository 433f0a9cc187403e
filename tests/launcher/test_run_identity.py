"""Run identity: every verl key classified, the id ignores names/paths and override order,
and a checkpoint dir refuses a run with another training config."""
import json

import pytest
from omegaconf import OmegaConf

from src import verl_config
from src.record import identity as run_identity
from src.config import compose_config
from src.pipeline import identify
from src.plan import build_plan


def _verl_keys() -> dict:
    # verl's own ppo_trainer, composed the way src/verl_config.compose composes it
    return run_identity._flatten(OmegaConf.to_container(verl_config.compose([]), resolve=False))


def test_every_verl_key_is_either_training_or_excluded():
    unclassified = [k for k in _verl_keys() if run_identity.classify(k) is None]
    assert unclassified == [], ("verl has keys neither training nor excluded; add each to "
                                f"src/record/identity.py EXCLUDED (with why) or the training rules: {unclassified}")


def test_every_exclusion_rule_still_names_a_verl_key():
    keys = list(_verl_keys())
    stale = [p for p, _ in run_identity.EXCLUDED if not any(run_identity._matches(k, p) for k in keys)]
    assert stale == [], f"exclusion rules that match no key of verl's ppo_trainer (renamed upstream?): {stale}"


def test_core_training_keys_are_in_the_identity_and_names_are_not():
    for key in ("actor_rollout_ref.actor.optim.lr", "data.train_files", "actor_rollout_ref.rollout.n",
                "algorithm.adv_estimator", "trainer.total_training_steps", "trainer.n_gpus_per_node"):
        assert run_identity.classify(key) == "training", key
    for key in ("trainer.default_local_dir", "trainer.experiment_name", "trainer.save_freq", "trainer.logger",
                "trainer.resume_mode", "actor_rollout_ref.actor.profiler.tool",
                "actor_rollout_ref.rollout.trace.experiment_name", "ray_kwargs.ray_init.num_cpus"):
        assert run_identity.classify(key) == "excluded", key


def _identified(overrides, tmp_path):
    cfg = compose_config(overrides + [f"paths.results_root={tmp_path}/results"])
    plan = build_plan(cfg, run_dir=str(tmp_path / "run"))
    return identify(plan, cfg, overrides, verl_config.build(plan, cfg), None)


def test_id_ignores_where_it_logs_and_saves_but_not_what_it_trains(tmp_path):
    plan, verl_cfg, ident = _identified(["trainer.lr=3e-6"], tmp_path)
    assert len(plan.run_id) == 8 and int(plan.run_id, 16) >= 0
    assert verl_cfg.trainer.default_local_dir == plan.checkpoint_dir
    assert plan.checkpoint_dir.endswith(f"/gpus4/seed1_lr3e-06-{plan.run_id}")
    assert verl_cfg.trainer.experiment_name == plan.wandb_run_name
    assert verl_cfg.actor_rollout_ref.rollout.trace.experiment_name == plan.wandb_run_name
    assert "trainer.default_local_dir" not in ident and "actor_rollout_ref.actor.optim.lr" in ident
    logging_only = _identified(["trainer.lr=3e-6", "trainer.save_freq=7", "trainer.test_freq=3",
                                "logger.backends=[console]"], tmp_path)[0]
    assert logging_only.run_id == plan.run_id
    other_lr = _identified(["trainer.lr=1e-6"], tmp_path)[0]
    assert other_lr.run_id != plan.run_id
    # a results root elsewhere: another dir, the same training config
    elsewhere = compose_config(["trainer.lr=3e-6", f"paths.results_root={tmp_path}/elsewhere"])
    p2 = build_plan(elsewhere, run_dir="x")
    assert identify(p2, elsewhere, ["trainer.lr=3e-6"], verl_config.build(p2, elsewhere), None)[0].run_id == plan.run_id


def test_every_roles_profiler_writes_under_its_own_runs_dir(tmp_path):
    """Issue 33: each role's profiler.save_path (verl derives it from global_profiler.save_path) held the
    dir without seed or id, so every run of a sweep profiled into one dir."""
    plan, verl_cfg, _ = _identified(["reward=comet", "profile.enable=true"], tmp_path)
    other, other_cfg, _ = _identified(["reward=comet", "profile.enable=true", "seed=2"], tmp_path)
    assert verl_cfg.global_profiler.save_path == f"{plan.checkpoint_dir}/profile"
    roles = {"actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout", "critic"}
    paths = {role: OmegaConf.select(verl_cfg, f"{role}.profiler.save_path") for role in roles}
    assert paths == {role: verl_cfg.global_profiler.save_path for role in roles}
    assert plan.run_id in paths["critic"] and other.run_id != plan.run_id
    assert {OmegaConf.select(other_cfg, f"{role}.profiler.save_path") for role in roles} == {
        f"{other.checkpoint_dir}/profile"}


def test_readable_name_follows_override_dirname_and_ignores_order():
    a = ["trainer.lr=3e-6", "reward.weights.bleu=0.5", "+verl.actor_rollout_ref.actor.clip_ratio_c=3.0",
         "reward=comet", "gpus=4", "dry_run=true", "paths.results_root=/x", "trainer.save_freq=5"]
    name = run_identity.readable_name(a, seed=3)
    assert name == "seed3_bleu0.5_lr3e-06_clip_ratio_c3.0"
    assert run_identity.readable_name(list(reversed(a)), seed=3) == name


def test_dir_with_another_identity_is_refused_with_the_differing_keys(tmp_path):
    ident = {"actor_rollout_ref.actor.optim.lr": 3e-6, "data.train_files": "a.parquet"}
    assert run_identity.check_dir(tmp_path, ident, "aaaa0000") is None  # nothing recorded yet
    run_identity.record(tmp_path, ident, "aaaa0000", None)
    recorded = json.loads((tmp_path / run_identity.IDENTITY_FILE).read_text())
    assert recorded == {"run_id": "aaaa0000", "reproduces": None, "identity": ident}
    assert [p.name for p in tmp_path.iterdir()] == [run_identity.IDENTITY_FILE]  # no temp file left
    assert run_identity.check_dir(tmp_path, dict(ident), "aaaa0000") is None
    refusal = run_identity.check_dir(tmp_path, {**ident, "actor_rollout_ref.actor.optim.lr": 1e-6}, "bbbb1111")
    assert "\n" not in refusal
    assert "holds run aaaa0000" in refusal and "actor_rollout_ref.actor.optim.lr (3e-06 -> 1e-06)" in refusal


@pytest.mark.parametrize("body", ["{not json", json.dumps({"run_id": "x"})])
def test_unreadable_identity_file_is_refused(tmp_path, body):
    (tmp_path / run_identity.IDENTITY_FILE).write_text(body)
    assert "unreadable" in run_identity.check_dir(tmp_path, {}, "aaaa0000")

"""Every conf/algo preset (enumerated from Hydra, so a new preset is covered without editing this file):
composed for gpus 1..8 on 1 and 2 nodes, planned, and accepted by verl's own validate_config and worker
config classes (test_verl_oracle.verl_accepts); combined with reward.credit=token,
reward.normalise=per_component and DAPO's dynamic sampling, each either accepted by verl or refused by the
plan in one line that says why; named apart from every other preset; and its plan rows read back from
the verl config it runs (src/plan/algorithm.py)."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from src import verl_config
from src.config.dotted import flatten
from src.config.presets import preset_values
from src.plan import PlanError, build_plan, with_trains
from tests.helpers.config_groups import group_options
from tests.helpers.verl_oracle import verl_accepts

ALGOS = group_options("algo")
GEOMETRY = [(g, n) for n in (1, 2) for g in range(1, 9)]
# the reward settings that replace or filter the advantage; each preset meets each
COMBINED = {"credit": ["reward.credit=token"], "normalise": ["reward=comet", "reward.normalise=per_component"],
            "filter": ["algo.filter_groups.enable=true", "algo.filter_groups.metric=score_rounded",
                       "algo.filter_groups.max_num_gen_batches=10"]}


def test_the_presets_the_issue_asks_for_are_offered():
    assert {"grpo", "dapo", "gspo", "drgrpo", "rloo", "reinforce_pp", "opo", "clip_cov", "kl_cov", "cispo",
            "gmpo"} <= set(ALGOS)


def _build(compose, tmp_path, overrides, checked=True):
    """(composed config, plan, verl config). `checked`: through verl_config.build (verl's validation and the
    project's checks, src/verl_config/checks.py); else composed only, for a test that runs verl's own
    validation itself (verl_accepts) on a setting the project's checks do not read."""
    cfg = compose([*overrides, f"paths.results_root={tmp_path}/results", f"paths.output_dir={tmp_path}/out"])
    plan = build_plan(cfg, run_dir=str(tmp_path / "run"))
    return cfg, plan, (verl_config.build(plan, cfg) if checked else verl_config.unvalidated(plan, cfg))


@pytest.mark.parametrize("algo", ALGOS)
def test_preset_on_every_gpu_count_and_node_count_is_accepted_by_verl(compose, tmp_path, algo):
    preset = preset_values(algo)
    for gpus, nodes in GEOMETRY:
        # reward=comet: one GPU holds its scorer beside a 3B policy and reference model (the span model's
        # rewards on each GPU count are tests/launcher/test_group_combinations.py's)
        # the project's checks (loss parameters, estimators the V1 trainer cannot feed) read no GPU count: once
        cfg, plan, verl_cfg = _build(compose, tmp_path, [f"algo={algo}", "reward=comet", f"gpus={gpus}",
                                                         f"nodes={nodes}"], checked=(gpus, nodes) == (4, 1))
        sizes = verl_accepts(verl_cfg)
        assert sizes["padding"] == 0, (gpus, nodes)
        assert (verl_cfg.trainer.n_gpus_per_node, verl_cfg.trainer.nnodes) == (gpus, nodes)
        # what the preset file says is what verl trains
        actor = verl_cfg.actor_rollout_ref.actor
        assert verl_cfg.algorithm.adv_estimator == preset["adv_estimator"]
        assert actor.policy_loss.loss_mode == preset.get("loss_mode", "vanilla")
        assert actor.loss_agg_mode == preset["loss_agg_mode"]
        assert (actor.clip_ratio_low, actor.clip_ratio_high) == (preset["clip_ratio_low"], preset["clip_ratio_high"])
        assert actor.use_kl_loss is preset["use_kl_loss"]
        for key, value in flatten(preset.get("verl") or {}).items():
            assert OmegaConf.select(verl_cfg, key) == value, key
        # Dr. GRPO's constant divisor: the response budget, never the micro batch's padded width
        assert actor.loss_scale_factor == (cfg["data"]["max_response_length"]
                                           if preset["loss_agg_mode"] == "seq-mean-token-sum-norm" else None)
        assert f"/{algo}/gpus{gpus * nodes}/" in plan.checkpoint_dir + "/"
        assert plan.wandb_run_name.startswith(f"{cfg['model']['name']}-{algo}-g{gpus * nodes}")


@pytest.mark.parametrize("algo", ALGOS)
def test_preset_with_token_credit_per_component_and_dynamic_sampling_is_accepted_or_refused_in_one_line(
        compose, tmp_path, algo):
    preset = preset_values(algo)
    for what, extra in COMBINED.items():
        try:
            _, plan, verl_cfg = _build(compose, tmp_path, [f"algo={algo}", *extra])
        except PlanError as err:
            text = str(err)
            assert "\n" not in text and algo in text, text
            # refused only where verl's function would lose what the setting needs, and the line says so
            if what == "credit":
                assert preset["adv_estimator"] != "grpo" or preset.get("loss_mode") == "geo_mean", text
                assert "per-token advantages" in text and "docs/algorithms.md" in text, text
            elif what == "normalise":
                assert preset["adv_estimator"] != "grpo" or not preset["norm_adv_by_std_in_grpo"], text
            else:
                pytest.fail(f"dynamic sampling refused for {algo}: {text}")
            continue
        assert verl_accepts(verl_cfg)["padding"] == 0
        expected = {"credit": "grpo_token", "normalise": "grpo_per_component"}.get(what, preset["adv_estimator"])
        assert verl_cfg.algorithm.adv_estimator == expected
        if what == "filter":
            assert verl_cfg.algorithm.filter_groups.enable is True


def test_each_preset_has_its_own_names_and_run_id(compose, tmp_path):
    from src.pipeline.lineage import identify

    names, ids = {}, {}
    for algo in ALGOS:
        cfg, plan, verl_cfg = _build(compose, tmp_path, [f"algo={algo}"])
        plan, _, _ = identify(plan, cfg, [f"algo={algo}"], verl_cfg, None)
        names[algo] = (plan.checkpoint_dir, plan.wandb_run_name)
        ids[algo] = plan.run_id
    assert len(set(names.values())) == len(ALGOS) and len(set(ids.values())) == len(ALGOS)


def test_a_changed_estimator_or_loss_is_named_and_shown_with_its_source(compose, tmp_path):
    """Issue 36: after algo.adv_estimator=rloo the dir said `grpo` and the plan "GRPO on the summed score"."""
    cfg, plan, verl_cfg = _build(compose, tmp_path, ["algo=grpo", "algo.adv_estimator=rloo", "algo.loss_mode=gspo"])
    assert plan.algo == "grpo+rloo+gspo" and "/grpo+rloo+gspo/gpus" in plan.checkpoint_dir
    plan = with_trains(plan, cfg, OmegaConf.to_container(verl_cfg, resolve=True))
    rows = {r["what"]: (r["value"], r["source"]) for r in plan.trains}
    assert rows["advantage estimator"] == ("rloo", "override: algo.adv_estimator")
    assert rows["policy loss"] == ("gspo", "override: algo.loss_mode")
    assert rows["KL in the loss"] == ("low_var_kl x 0.001", "preset grpo")
    assert rows["max prompt / response tokens"][0] == (f"{cfg['data']['max_prompt_length']} / "
                                                       f"{cfg['data']['max_response_length']}")
    assert rows["learning rate"][0].startswith(f"{cfg['trainer']['lr']:g}, constant")
    # a verl key set by hand is an override of that key; the reward's weights say trained and held out
    cfg, plan, verl_cfg = _build(compose, tmp_path, ["algo=drgrpo", "reward=comet",
                                                     "+verl.actor_rollout_ref.rollout.temperature=0.7"])
    plan = with_trains(plan, cfg, OmegaConf.to_container(verl_cfg, resolve=True))
    rows = {r["what"]: (r["value"], r["source"]) for r in plan.trains}
    assert rows["rollout temperature / top-p"] == ("0.7 / 1", "override: verl.actor_rollout_ref.rollout.temperature; "
                                                   "verl default")
    assert rows["loss aggregation"][1].endswith("derived: data.max_response_length (Dr. GRPO's constant)")
    trained = {c: w for c, w in plan.reward_kwargs["train_weights"].items() if w}
    held_out = [c for c, w in plan.reward_kwargs["validation_weights"].items() if w and c not in trained]
    assert trained and rows["reward weights"][0] == (
        "trained: " + ", ".join(f"{c} x{w:g}" for c, w in trained.items())
        + "; held out (validation only): " + (", ".join(held_out) or "none")), rows["reward weights"]

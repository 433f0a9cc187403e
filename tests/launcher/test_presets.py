"""Every shipped preset (conf/experiment/*.yaml, found by glob so a new preset is covered without
editing this file) is composed, planned and accepted by verl's own code, as shipped and with
every model x reward x gpus option of the shipped groups, with grpo and dapo (the two reward managers).

Planning runs on the whole product (cheap). verl's validation (compose verl's ppo_trainer,
validate_config, worker config classes, batch split: test_verl_oracle.verl_accepts) costs about
a second a config, so it runs on each preset as shipped, on preset x model x gpus (what the batch
and memory derivations depend on) and on preset x reward x algo (what the reward and algorithm
sections depend on); reward x algo x gpus on the default model is tests/launcher/test_group_combinations.py.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from src import verl_config
from src.config import CONF_DIR
from src.plan import PlanError, build_plan
from tests.helpers.config_groups import GPUS, MANAGER_ALGOS, group_options
from tests.helpers.verl_oracle import verl_accepts

PRESETS = sorted(p.stem for p in Path(CONF_DIR, "experiment").glob("*.yaml"))
MODELS, REWARDS = (group_options(g) for g in ("model", "reward"))
# the algo presets with their own reward side (test_group_combinations.py MANAGER_ALGOS); every algo preset's
# estimator and loss on every GPU and node count: test_algo_presets.py
ALGOS = MANAGER_ALGOS
# presets that fix their reward's models (learn_tiny: format + BLEU, no QE model; learn_terms_tiny: and the term):
# another reward group's QE weights on them are refused in one line naming the model they need, before any plan
PINNED_REWARD = {"learn_tiny", "learn_terms_tiny"}


def allowed_refusal(preset: str, refusal: str) -> bool:
    """The memory plan's refusal, with its numbers; on a preset that pins its reward, the reward's own."""
    if "\n" in refusal:
        return False
    if refusal.startswith("memory plan:") and "does not fit" in refusal:
        return True
    return preset in PINNED_REWARD and refusal.startswith("reward.weights.") and " needs a " in refusal


def test_presets_are_found_and_are_hydra_options():
    assert "qwen3b_xcomet_3gpu" in PRESETS and len(PRESETS) >= 2
    assert PRESETS == sorted(group_options("experiment"))


def overrides(preset, model=None, reward=None, algo=None, gpus=None):
    out = [f"experiment={preset}"]
    out += [f"model={model}"] if model else []
    out += [f"reward={reward}"] if reward else []
    out += [f"algo={algo}"] if algo else []
    out += [f"gpus={gpus}"] if gpus else []
    return out


def plan_or_refusal(compose, tmp_path, ov):
    cfg = compose([*ov, f"paths.results_root={tmp_path}/results", f"paths.output_dir={tmp_path}/outputs"])
    try:
        return cfg, build_plan(cfg, run_dir=str(tmp_path / "run")), None
    except PlanError as err:
        return cfg, None, str(err)


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_as_shipped_is_accepted_by_verl(compose, tmp_path, preset):
    cfg, plan, refusal = plan_or_refusal(compose, tmp_path, overrides(preset))
    assert refusal is None, refusal
    sizes = verl_accepts(verl_config.build(plan, cfg))
    assert sizes == {} or sizes["padding"] == 0


@pytest.mark.parametrize("preset", PRESETS)
def test_every_group_option_on_a_preset_plans_or_is_refused_for_memory_in_one_line(compose, tmp_path, preset):
    refused = []
    for model, reward, algo, gpus in itertools.product(MODELS, REWARDS, ALGOS, GPUS):
        _, plan, refusal = plan_or_refusal(compose, tmp_path, overrides(preset, model, reward, algo, gpus))
        if refusal is not None:
            # the only refusal a shipped option may meet is the memory plan's, with its numbers (allowed_refusal)
            assert allowed_refusal(preset, refusal), refusal
            if refusal.startswith("memory plan:"):
                refused.append((model, gpus))
        else:
            assert plan.gpus_per_node == int(gpus)
    # the smallest model fits everywhere; refusals (if any) are for too few GPUs, never for 8
    assert all(m != MODELS[0] and g != "8" for m, g in refused), refused


def _verl_cases():
    for preset in PRESETS:
        for model, gpus in itertools.product(MODELS, GPUS):
            yield pytest.param(overrides(preset, model=model, gpus=gpus), id=f"{preset}-{model}-gpus{gpus}")
        for reward, algo in itertools.product(REWARDS, ALGOS):
            yield pytest.param(overrides(preset, reward=reward, algo=algo), id=f"{preset}-{reward}-{algo}")


@pytest.mark.parametrize("ov", list(_verl_cases()))
def test_preset_variants_are_accepted_by_verl(compose, tmp_path, ov):
    cfg, plan, refusal = plan_or_refusal(compose, tmp_path, ov)
    if refusal is not None:  # covered by the test above: a one-line refusal before any verl config
        assert allowed_refusal(ov[0].split("=", 1)[1], refusal), refusal
        return
    verl_cfg = verl_config.build(plan, cfg)
    sizes = verl_accepts(verl_cfg)
    assert sizes == {} or sizes["padding"] == 0
    assert verl_cfg.trainer.n_gpus_per_node == plan.gpus_per_node
    assert cfg["model"]["num_kv_heads"] % verl_cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 0


def test_a_preset_run_at_another_gpu_count_says_its_batches_moved(isolated_paths):
    """Issue 33 (finding 11): experiment=qwen3b_xcomet_3gpu with gpus=5 trained 50 prompts per step instead
    of the preset's 48, and logged to another wandb project, without a word."""
    from tests.helpers.launches import launch

    _, paths = isolated_paths
    moved = launch(["experiment=qwen3b_xcomet_3gpu", "gpus=5", "dry_run=true"] + paths)
    assert moved.returncode == 0, moved.stderr
    line = next((l for l in moved.stdout.splitlines() if l.startswith("note: experiment=")), "")
    assert line.startswith("note: experiment=qwen3b_xcomet_3gpu is set for G=3 (48 prompts per step, mini batch 24"), \
        moved.stdout
    assert "at G=5 the plan moved that to 50 prompts per step, mini batch 25" in line
    assert "wandb project qe-rl-xcomet_xl-train-s400, not qe-rl-xcomet_xl-train-s384" in line
    for same in (["experiment=qwen3b_xcomet_3gpu"], ["experiment=qwen3b_xcomet_3gpu", "gpus=4"]):
        # its own count, or one where the preset's batches stay valid (48 prompts at G=4): nothing to say
        result = launch(same + ["dry_run=true"] + paths)
        assert result.returncode == 0 and "note: experiment=" not in result.stdout, (same, result.stdout)

"""Every reward x gpus option (enumerated from Hydra), with each algo preset that sets its own reward
manager (grpo: verl's naive, dapo: ours), composes, plans, and yields a verl config that verl's own code
accepts: validate_config, the worker config classes and the workers' batch splitting
(tests/helpers/verl_oracle.py verl_accepts), not our own src/plan/verl_rules.py. Every algo preset on
gpus 1..8 and 1..2 nodes, and with the reward's settings: tests/launcher/test_algo_presets.py."""
import itertools

import pytest

from src import verl_config
from src.plan import build_plan
from tests.helpers.config_groups import GPUS, MANAGER_ALGOS, group_options
from tests.helpers.verl_oracle import verl_accepts

REWARDS, ALGOS = group_options("reward"), group_options("algo")
COMBOS = list(itertools.product(REWARDS, MANAGER_ALGOS, GPUS))


def test_groups_offer_what_the_readme_promises():
    assert set(REWARDS) == {"comet", "xcomet_xl", "word_qe", "metricx"}
    assert set(MANAGER_ALGOS) <= set(ALGOS)
    # every preset besides these uses verl's naive manager: the reward side of grpo's combinations
    from src.config.presets import preset_values
    assert {a for a in ALGOS if preset_values(a)["reward_manager"] != "naive"} == {"dapo"}
    assert len(COMBOS) == 32


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("combos")
    from src.config import compose_config
    out = {}
    for reward, algo, gpus in COMBOS:
        cfg = compose_config([f"reward={reward}", f"algo={algo}", f"gpus={gpus}",
                              f"paths.results_root={tmp}/results"])
        plan = build_plan(cfg, run_dir=str(tmp / "run"))
        out[(reward, algo, gpus)] = (cfg, plan, verl_config.build(plan, cfg))  # build runs validate_config
    return out


@pytest.mark.parametrize("combo", COMBOS, ids=["-".join(c) for c in COMBOS])
def test_combination_is_accepted_by_verl_and_its_workers(built, combo):
    cfg, plan, verl_cfg = built[combo]
    reward, algo, gpus = combo
    assert verl_cfg.trainer.n_gpus_per_node == int(gpus)
    assert verl_accepts(verl_cfg)["padding"] == 0
    # vLLM shards KV heads over tensor-parallel ranks (no verl function to call on CPU)
    assert cfg["model"]["num_kv_heads"] % verl_cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 0
    assert verl_cfg.trainer.default_local_dir == plan.checkpoint_dir
    label = reward if cfg["reward"]["mode"] == "off" else f"{reward}_{cfg['reward']['mode']}"  # the span model runs
    assert f"/{label}/{algo}/gpus{gpus}/" in plan.checkpoint_dir + "/"
    if algo == "dapo":
        assert verl_cfg.reward.reward_manager.name == "PureValidationDAPORewardManager"  # verl's dapo, pure validation
        assert verl_cfg.algorithm.filter_groups.enable is True
        assert (verl_cfg.actor_rollout_ref.actor.clip_ratio_low,
                verl_cfg.actor_rollout_ref.actor.clip_ratio_high) == (0.2, 0.28)
        assert verl_cfg.reward.reward_kwargs.overlong_buffer_cfg.enable is True
        assert verl_cfg.actor_rollout_ref.actor.use_kl_loss is False
    else:
        assert verl_cfg.algorithm.adv_estimator == "grpo"
        assert verl_cfg.actor_rollout_ref.actor.use_kl_loss is True


def test_checkpoint_dirs_and_wandb_names_are_distinct(built):
    plans = [plan for _, plan, _ in built.values()]
    assert len({p.checkpoint_dir for p in plans}) == len(plans)
    assert len({(p.wandb_project, p.wandb_run_name) for p in plans}) == len(plans)


def test_npu_accelerator_gives_a_config_verl_accepts(tmp_path):
    from src.config import compose_config
    cfg = compose_config(["accelerator=npu", f"paths.results_root={tmp_path}"])
    plan = build_plan(cfg, run_dir=str(tmp_path))
    verl_cfg = verl_config.build(plan, cfg)
    assert verl_cfg.trainer.device == "npu"
    assert "libjemalloc" in plan.accelerator_env["LD_PRELOAD"]

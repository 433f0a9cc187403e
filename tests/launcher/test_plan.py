"""The run plan: derived batch sizes, refusals, names."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from src.plan import PlanError, build_plan, plan_batch, with_identity
from tests.helpers.config_changes import with_
from tests.helpers.verl_oracle import rank_split


@pytest.fixture(scope="module")
def base_cfg():
    from src.config import compose_config
    return compose_config([])


def test_design_defaults_need_no_adjustment_for_2_3_4_8_gpus(base_cfg):
    for g in (2, 3, 4, 8):
        plan = build_plan(with_(base_cfg, gpus=g), run_dir="r")
        b = plan.batch
        assert (b.prompts_per_step, b.samples_per_prompt, b.mini_batch_prompts, b.micro_batch_per_gpu, b.log_prob_micro_batch_per_gpu) == (48, 8, 24, 8, 16)
        assert b.rollout_tp == (1 if g == 3 else 2)  # 3 GPUs: TP 2 cannot divide; Qwen2.5-3B has 2 KV heads
        # (the memory plan may lower vLLM's share for the shared scorer: tests/launcher/test_memory_plan.py)
        assert [a.key for a in plan.adjustments if a.key != "gpu_memory_utilization"] == (
            ["rollout_tp"] if g == 3 else [])


def test_intent_is_moved_to_the_nearest_valid_values_with_reasons(base_cfg):
    cfg = with_(base_cfg, gpus=5, batch__prompts_per_step=50, batch__mini_batch_prompts=12,
                batch__samples_per_prompt=4)
    plan = build_plan(cfg, run_dir="r")
    b = plan.batch
    # m*n % 5 == 0 needs m multiple of 5: 12 -> 10; P multiple of m: 50 stays
    assert (b.prompts_per_step, b.samples_per_prompt, b.mini_batch_prompts) == (50, 4, 10)
    assert b.rollout_tp == 1
    keys = {a.key: a for a in plan.adjustments}
    assert keys["mini_batch_prompts"].intent == 12 and keys["mini_batch_prompts"].value == 10
    assert "multiple of 5" in keys["mini_batch_prompts"].reason
    assert rank_split(5, b.prompts_per_step, b.samples_per_prompt, b.mini_batch_prompts, b.micro_batch_per_gpu, b.log_prob_micro_batch_per_gpu)["padding"] == 0  # verl's own batch split


def test_pin_that_breaks_a_rule_is_refused_with_rule_and_nearest_values(base_cfg):
    with pytest.raises(PlanError) as err:
        build_plan(with_(base_cfg, data__train_batch_size=7, gpus=4), run_dir="r")
    msg = str(err.value)
    assert "\n" not in msg
    assert "data.train_batch_size=7" in msg and "P >= m" in msg and "{24}" in msg


def test_pinned_micro_batch_that_does_not_divide_is_refused(base_cfg):
    cfg = with_(base_cfg, verl={"actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 5}}})
    with pytest.raises(PlanError, match=r"\(m\*n/G\) % mu == 0"):
        build_plan(cfg, run_dir="r")


def test_valid_pin_is_kept_and_not_reported_as_adjustment(base_cfg):
    plan = build_plan(with_(base_cfg, data__train_batch_size=96), run_dir="r")
    assert plan.batch.prompts_per_step == 96 and plan.samples_per_step == 768
    # (vLLM's share may be lowered by the memory plan: tests/launcher/test_memory_plan.py)
    assert [a.key for a in plan.adjustments if a.key != "gpu_memory_utilization"] == []


@pytest.mark.parametrize("key,value,needle", [
    ("gpus", 0, "gpus (GPUs per node) must be a positive integer, got 0"),
    ("gpus", -2, "got -2"),
    ("nodes", 0, "nodes must be a positive integer, got 0"),
    ("batch__samples_per_prompt", 0, "batch.samples_per_prompt"),
    ("reward__mode", "sometimes", "reward.mode must be off, train or eval"),
])
def test_bad_values_are_refused_in_one_line(base_cfg, key, value, needle):
    with pytest.raises(PlanError) as err:
        build_plan(with_(base_cfg, **{key: value}), run_dir="r")
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_names_and_checkpoint_dir_are_stable_and_follow_the_layout(base_cfg):
    cfg = with_(base_cfg, paths__results_root="/res", nodes=2, seed=7)
    plan = build_plan(cfg, run_dir="r")
    assert plan.world_size == 8
    # the prefix until the run id is known (src/record/identity.py), then the run's own dir below it
    assert plan.checkpoint_dir == "/res/qwen2.5_3b/xcomet_xl_train/grpo/gpus8"
    assert plan.wandb_project == "qe-rl-xcomet_xl-train-s384"
    named = with_identity(plan, "0123abcd", "seed7_lr3e-6")
    assert named.checkpoint_dir == "/res/qwen2.5_3b/xcomet_xl_train/grpo/gpus8/seed7_lr3e-6-0123abcd"
    assert named.wandb_run_name == "qwen2.5_3b-grpo-g8-seed7_lr3e-6-0123abcd"
    assert named.wandb_run_id == "qerl-0123abcd" and named.run_id == "0123abcd"
    repro = with_identity(plan, "0123abcd", "seed7_lr3e-6", reproduces="0123abcd", reproduction=2)
    assert repro.checkpoint_dir.endswith("-0123abcd-repro2") and repro.wandb_run_id == "qerl-0123abcd-repro2"
    assert build_plan(cfg, run_dir="other").checkpoint_dir == plan.checkpoint_dir
    assert plan.ray_cpus_needed == 3 * 8 + 10 and plan.ray_num_cpus is None  # multi-node: from cluster


def test_single_node_ray_cpus(base_cfg):
    plan = build_plan(with_(base_cfg, gpus=8), run_dir="r")
    assert plan.ray_cpus_needed == 34 and plan.ray_num_cpus == 34
    with pytest.raises(PlanError, match="ray_num_cpus=20 is below the 34"):
        build_plan(with_(base_cfg, gpus=8, ray_num_cpus=20), run_dir="r")


def test_dynamic_bsz_keeps_only_its_rules(base_cfg):
    plan = build_plan(with_(base_cfg, batch__dynamic_bsz=True, gpus=3), run_dir="r")
    assert plan.batch.micro_batch_per_gpu is None and plan.batch.log_prob_micro_batch_per_gpu is None
    assert plan.batch.max_token_len_per_gpu == 2 * (256 + 1024)
    with pytest.raises(PlanError, match="max_token_len_per_gpu=100 is below"):
        build_plan(with_(base_cfg, batch__dynamic_bsz=True, batch__max_token_len_per_gpu=100), run_dir="r")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gpus=st.integers(1, 64), nodes=st.integers(1, 4), P=st.integers(1, 512), n=st.integers(1, 32),
       m=st.integers(1, 512), mu=st.integers(1, 64), lam=st.integers(1, 64),
       tp=st.sampled_from([1, 2, 4, 8]), kv=st.sampled_from([1, 2, 4, 8]),
       pin_p=st.one_of(st.none(), st.integers(-4, 600)),
       pin_mu=st.one_of(st.none(), st.integers(1, 32)))
def test_property_plan_is_valid_or_refuses_with_a_named_rule(base_cfg, gpus, nodes, P, n, m, mu, lam, tp, kv,
                                                              pin_p, pin_mu):
    cfg = with_(base_cfg, gpus=gpus, nodes=nodes, batch__prompts_per_step=P,
                batch__samples_per_prompt=n, batch__mini_batch_prompts=m, batch__micro_batch_per_gpu=mu,
                batch__log_prob_micro_batch_per_gpu=lam, model__rollout_tp=tp, model__num_kv_heads=kv,
                data__train_batch_size=pin_p,
                # batch rules only: a card so large that the memory plan never refuses (test_memory_plan.py)
                memory__gpu_gb=100_000)
    if pin_mu is not None:
        cfg["verl"] = {"actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": pin_mu}}}
    try:
        plan = build_plan(cfg, run_dir="r")
    except PlanError as err:
        msg = str(err)
        assert "\n" not in msg
        assert pin_p is not None or pin_mu is not None, f"refused an unpinned intent: {msg}"
        assert "must be a positive integer" in msg or "breaks verl rule" in msg
        return
    b = plan.batch
    # verl's own batch split (tests/launcher/test_verl_oracle.py), not src/plan/verl_rules.py
    assert rank_split(gpus * nodes, b.prompts_per_step, b.samples_per_prompt, b.mini_batch_prompts, b.micro_batch_per_gpu, b.log_prob_micro_batch_per_gpu)["padding"] == 0
    assert b.prompts_per_step >= b.mini_batch_prompts  # verl/workers/config/actor.py ActorConfig.validate
    # rollout mesh (engine_workers.py init_model), vLLM TP inside a node, KV heads split over TP
    assert (gpus * nodes) % b.rollout_tp == 0 and gpus % b.rollout_tp == 0 and kv % b.rollout_tp == 0
    assert b.micro_batch_per_gpu <= max(mu, pin_mu or 0) and b.log_prob_micro_batch_per_gpu <= lam and b.rollout_tp <= tp

"""The per-GPU memory plan (src/memory_plan.py) against hand-computed numbers, scorer placement,
vLLM's derived share, and the refusal of plans that cannot fit. GiB = 2^30 bytes throughout."""
import itertools
import json

import pytest

from src.plan import PlanError, build_plan
from tests.launcher.conftest import files_under, launch

GIB = 2 ** 30


@pytest.fixture(scope="module")
def plan_of():
    from src.launch import compose_config, quote_gpu_counts

    cache = {}

    def make(*overrides, gpu_memory_gb=None):
        key = (overrides, gpu_memory_gb)
        if key not in cache:
            cfg = compose_config([quote_gpu_counts(o) for o in overrides])
            try:
                cache[key] = build_plan(cfg, run_dir="r", gpu_memory_gb=gpu_memory_gb)
            except PlanError as exc:
                cache[key] = exc
        return cache[key]
    return make


def test_qwen3b_xcomet_xl_2_gpus_shared_by_hand(plan_of):
    """Every component of the default reward on 2 x 80 GiB, computed by hand."""
    m = plan_of("gpus=2").memory
    N = 3.09e9
    assert m.actor_params_gb == pytest.approx(4 * N / 2 / GIB)            # 5.756 fp32 shard
    assert m.actor_grads_gb == pytest.approx(4 * N / 2 / GIB)             # 5.756
    assert m.actor_optimizer_gb == pytest.approx(8 * N / 2 / GIB)         # 11.511 Adam m + v
    assert m.ref_gb == pytest.approx(4 * N / 2 / GIB)                     # 5.756 (grpo: KL loss)
    # one micro batch: mu 8 x (256 + 1024) tokens = 10240; logits bf16 + fp32 copy; 36 checkpointed layers
    assert m.update_activations_gb == pytest.approx((10240 * 151936 * 6 + 10240 * 2048 * 2 * 36) / GIB)  # 10.10
    # scorer: CometKiwi (0.57B) + XCOMET-XL (3.5B) in bf16; XL's activations at 16384 tokens
    assert m.scorer_weights_gb == pytest.approx((0.57e9 + 3.5e9) * 2 / GIB)                            # 7.581
    assert m.scorer_activations_gb == pytest.approx(
        (16384 * 2 * (2560 * 37 + 2 * 10240) + 16384 * 32 * 512 * 4) / GIB)                               # 4.516
    assert m.scorer_gb == pytest.approx(7.581 + 4.516 + 1.0, abs=1e-3)
    assert m.scorer_on_training_gpu
    # vLLM gets what the rollout leaves: 80 - 4 reserve - (5.756 + 11.511 + 5.756) - 13.097 = 39.88 -> 0.49
    assert m.vllm_share == 0.49 and m.vllm_gb == pytest.approx(39.2)
    assert m.vllm_weights_gb == pytest.approx(2 * N / 2 / GIB)             # 2.878 (bf16, TP 2)
    assert m.kv_cache_gb == pytest.approx(39.2 - 2.878 - 2.0, abs=1e-3)    # 34.32
    # one rollout replica (G/TP = 1): min(384, max_num_seqs 256) x 1280 tokens x 2 x 36 layers x 1 KV head x 128 x 2 B
    assert m.kv_needed_gb == pytest.approx(256 * 1280 * 2 * 36 * 1 * 128 * 2 / GIB)                 # 5.625
    assert m.rollout_gb == pytest.approx(23.022 + 39.2 + 13.097 + 4, abs=0.01)                       # 79.32
    assert m.update_gb == pytest.approx(5.756 * 2 + 11.511 + 5.756 + 10.100 + 13.097 + 4, abs=0.01)  # 55.98


def test_qwen7b_comet_4_gpus_shared_by_hand(plan_of):
    m = plan_of("model=qwen2.5_7b", "reward=comet", "gpus=4").memory
    # 7.62B: params 7.097, Adam 14.193, ref 7.097 (resident during rollout: 28.39)
    # scorer: CometKiwi bf16 1.062 + activations (16384 x 2 x (1024 x 25 + 2 x 4096) + 16384 x 16 x 512 x 4) 1.531 + 1
    assert m.scorer_gb == pytest.approx(1.062 + 1.531 + 1.0, abs=2e-3)
    # free for vLLM: 80 - 4 - 28.39 - 3.593 = 44.02 -> 0.55
    assert m.vllm_share == 0.55
    assert m.rollout_gb == pytest.approx(28.387 + 44.0 + 3.593 + 4, abs=0.01)                        # 79.98
    # update: 7.097 x 2 + 14.193 + 7.097 + activations (10240 x 152064 x 6 + 10240 x 3584 x 2 x 28) 10.615
    assert m.update_activations_gb == pytest.approx(10.615, abs=2e-3)
    assert m.update_gb == pytest.approx(7.097 * 2 + 14.193 + 7.097 + 10.615 + 3.593 + 4, abs=0.01)    # 53.69
    # KV: 2 replicas of TP 2 -> 192 seqs x 1280 x 2 x 28 layers x 2 KV heads per GPU x 128 x 2 B
    assert m.kv_needed_gb == pytest.approx(192 * 1280 * 2 * 28 * 2 * 128 * 2 / GIB)                  # 6.56


# model x reward x gpus as shipped (algo grpo, scorer.placement shared, 80 GiB cards):
# (vLLM share, rollout peak GiB, update peak GiB) or the phase that refuses it
SHIPPED = {
    ("qwen2.5_3b", "comet", "2"): (0.60, 78.6, 46.5), ("qwen2.5_3b", "comet", "3"): (0.60, 70.9, 36.9),
    ("qwen2.5_3b", "comet", "4"): (0.60, 67.1, 32.1), ("qwen2.5_3b", "comet", "8"): (0.60, 61.3, 24.9),
    ("qwen2.5_3b", "xcomet_xl", "2"): (0.49, 79.3, 56.0), ("qwen2.5_3b", "xcomet_xl", "3"): (0.59, 79.6, 46.4),
    ("qwen2.5_3b", "xcomet_xl", "4"): (0.60, 76.6, 41.6), ("qwen2.5_3b", "xcomet_xl", "8"): (0.60, 70.9, 34.4),
    ("qwen2.5_3b", "word_qe", "2"): (0.49, 79.3, 56.0), ("qwen2.5_3b", "word_qe", "3"): (0.59, 79.6, 46.4),
    ("qwen2.5_3b", "word_qe", "4"): (0.60, 76.6, 41.6), ("qwen2.5_3b", "word_qe", "8"): (0.60, 70.9, 34.4),
    ("qwen2.5_7b", "comet", "2"): "rollout", ("qwen2.5_7b", "comet", "3"): (0.43, 79.8, 65.5),
    ("qwen2.5_7b", "comet", "4"): (0.55, 80.0, 53.7), ("qwen2.5_7b", "comet", "8"): (0.60, 69.8, 35.9),
    ("qwen2.5_7b", "xcomet_xl", "2"): "rollout", ("qwen2.5_7b", "xcomet_xl", "3"): "rollout",
    ("qwen2.5_7b", "xcomet_xl", "4"): (0.43, 79.9, 63.2), ("qwen2.5_7b", "xcomet_xl", "8"): (0.60, 79.3, 45.5),
    ("qwen2.5_7b", "word_qe", "2"): "rollout", ("qwen2.5_7b", "word_qe", "3"): "rollout",
    ("qwen2.5_7b", "word_qe", "4"): (0.43, 79.9, 63.2), ("qwen2.5_7b", "word_qe", "8"): (0.60, 79.3, 45.5),
}


@pytest.mark.parametrize("combo", list(SHIPPED), ids=["-".join(c) for c in SHIPPED])
def test_shipped_combinations(plan_of, combo):
    model, reward, gpus = combo
    got = plan_of(f"model={model}", f"reward={reward}", f"gpus={gpus}")
    want = SHIPPED[combo]
    if isinstance(want, str):
        assert isinstance(got, PlanError), got
        assert str(got).startswith("memory plan: ") and f" {want}: " in str(got) and "\n" not in str(got)
        return
    assert not isinstance(got, PlanError), got
    share, rollout, update = want
    m = got.memory
    assert (m.vllm_share, round(m.rollout_gb, 1), round(m.update_gb, 1)) == (share, rollout, update)
    assert got.gpu_memory_utilization == share
    assert m.rollout_gb <= 80 and m.update_gb <= 80 and m.kv_cache_gb >= m.kv_needed_gb


def test_every_shipped_3b_combination_fits_with_every_placement(plan_of):
    for reward, gpus, placement in itertools.product(("comet", "xcomet_xl", "word_qe"), ("2", "3", "4", "8"),
                                                     ("shared", "dedicated", "cpu")):
        got = plan_of(f"reward={reward}", f"gpus={gpus}", f"scorer.placement={placement}")
        assert not isinstance(got, PlanError), (reward, gpus, placement, got)


def test_xcomet_xxl_shared_with_7b_on_80gb_is_refused_with_numbers_and_alternatives(plan_of):
    got = plan_of("model=qwen2.5_7b", "gpus=4", "reward.span_model=xcomet_xxl")
    assert isinstance(got, PlanError)
    msg = str(got)
    assert "\n" not in msg
    # XXL: 10.7B x 2 B = 19.93 GiB + activations (16384 x 2 x (4096 x 49 + 2 x 16384) + 16384 x 32 x 512 x 4) 8.12
    # + CometKiwi 1.06 + 1 = 30.1; update = 7.1 + 7.1 + 14.2 + 7.1 + 10.6 + 30.1 + 4 = 80.2 > 80
    assert "cometkiwi_da+xcomet_xxl shared does not fit" in msg
    assert "scorer 30.1 + reserve 4 = 80.2 GiB > 80 GiB" in msg, msg
    assert ("alternatives that fit: XCOMET-XL instead of XXL (reward.span_model=xcomet_xl); "
            "scorer.placement=dedicated; offload (+verl.actor_rollout_ref.actor.fsdp_config.param_offload=true") in msg
    # ... and each alternative does plan
    for alt in (("reward.span_model=xcomet_xl",), ("reward.span_model=xcomet_xxl", "scorer.placement=dedicated"),
                ("reward.span_model=xcomet_xxl", "+verl.actor_rollout_ref.ref.fsdp_config.param_offload=true")):
        assert not isinstance(plan_of("model=qwen2.5_7b", "gpus=4", *alt), PlanError), alt


def test_offload_counts_in_rollout_not_in_update(plan_of):
    base = plan_of("model=qwen2.5_7b", "gpus=8").memory
    off = plan_of("model=qwen2.5_7b", "gpus=8", "+verl.actor_rollout_ref.actor.fsdp_config.param_offload=true",
                  "+verl.actor_rollout_ref.actor.fsdp_config.optimizer_offload=true").memory
    # params + Adam leave the GPU while vLLM generates; the update loads them back
    assert off.rollout_gb == pytest.approx(base.rollout_gb - base.actor_params_gb - base.actor_optimizer_gb, abs=0.01)
    assert off.update_gb == pytest.approx(base.update_gb)


def test_placement_decides_what_the_training_gpu_holds(plan_of):
    shared = plan_of("gpus=2")
    dedicated = plan_of("gpus=2", "scorer.placement=dedicated")
    cpu = plan_of("gpus=2", "scorer.placement=cpu")
    assert (shared.scorer.device, shared.scorer.training_gpu_index, shared.scorer.dtype) == ("cuda", 1, "bf16")
    assert (dedicated.scorer.device, dedicated.scorer.training_gpu_index) == ("cuda", None)
    assert (cpu.scorer.device, cpu.scorer.dtype) == ("cpu", "fp32")
    # the shared scorer's 13.1 GiB come out of vLLM's share; dedicated/cpu leave it at the model's 0.6
    assert shared.gpu_memory_utilization == 0.49
    assert dedicated.gpu_memory_utilization == cpu.gpu_memory_utilization == 0.6
    # resident actor + ref 23.02 + vLLM 0.6 x 80 + reserve 4, no scorer
    assert dedicated.memory.rollout_gb == pytest.approx(23.022 + 48 + 4, abs=0.01)
    why = next(a for a in shared.adjustments if a.key == "gpu_memory_utilization")
    assert (why.intent, why.value) == (0.6, 0.49) and "shared scorer needs 13.1 GiB on training GPU 1" in why.reason
    kinds = {m.name: m.kind for m in shared.scorer.models}
    assert kinds == {"cometkiwi_da": "cometkiwi", "xcomet_xl": "xcomet"}


def test_no_qe_model_no_scorer(plan_of):
    plan = plan_of("reward=comet", "reward.sentence_models=[]", "reward.validation_models=[]",
                   "reward.weights.kiwi=0", "reward.validation.weights.kiwi=0")
    assert not isinstance(plan, PlanError), plan
    assert plan.scorer is None and plan.scorer_models == ()
    assert plan.memory.scorer_gb == 0 and plan.gpu_memory_utilization == 0.6


def test_gpu_memory_from_config_or_from_the_devices(plan_of):
    assert plan_of("gpus=4", "memory.gpu_gb=48").memory.gpu_gb == 48
    detected = plan_of("gpus=4", "memory.gpu_gb=null", gpu_memory_gb=79.6)
    assert detected.memory.gpu_gb == 79.6
    refused = plan_of("gpus=4", "memory.gpu_gb=null")
    assert isinstance(refused, PlanError) and "set memory.gpu_gb=80" in str(refused)
    # a smaller card squeezes vLLM further; a 24 GiB card cannot hold the 3B actor on 2 GPUs
    assert plan_of("gpus=4", "memory.gpu_gb=48").memory.vllm_share < 0.6
    assert isinstance(plan_of("gpus=2", "memory.gpu_gb=24"), PlanError)


def test_cli_refuses_a_plan_that_cannot_fit_before_writing_anything(isolated_paths):
    out, paths = isolated_paths
    res = launch(["model=qwen2.5_7b", "gpus=4", "reward.span_model=xcomet_xxl", "dry_run=true"] + paths)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [l for l in res.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith("error: memory plan: qwen2.5_7b on 4 GPU(s) of 80 GiB"), res.stderr
    assert files_under(out) == []


def test_memory_plan_is_in_plan_json_and_the_table(isolated_paths):
    out, paths = isolated_paths
    res = launch(["gpus=2", "dry_run=true"] + paths)
    assert res.returncode == 0, res.stdout + res.stderr
    (plan_json,) = [p for p in files_under(out) if p.name == "plan.json"]
    plan = json.loads(plan_json.read_text())
    assert plan["memory"]["vllm_share"] == plan["gpu_memory_utilization"] == 0.49 and plan["memory"]["fits"]
    assert plan["scorer"]["placement"] == "shared" and plan["scorer"]["training_gpu_index"] == 1
    assert "peak per GPU: rollout / update" in res.stdout and "79.3 / 56.0" in res.stdout
    assert "0.6 -> 0.49: the shared scorer needs 13.1 GiB" in res.stdout
    verl = next(p for p in files_under(out) if p.name == "verl_config.yaml").read_text()
    assert "gpu_memory_utilization: 0.49" in verl

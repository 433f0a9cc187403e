"""LoRA as a choice (model.lora.*) and the 14B preset (issue 45, items 1, 2 and 4): planned on this CPU machine
(the launcher's env has no vLLM, which verl's own LoRA check imports), named as LoRA, mapped to verl's keys, and
counted by the memory plan (adapter parameters as peft makes them; no reference model; grads and Adam of the
adapters only)."""
import json

import pytest

from src.plan import PlanError, build_plan
from src.plan.memory import ActorShape, lora_parameters, lora_targets, vllm_lora_rank
from tests.helpers.launches import files_under, launch

GIB = 2 ** 30


@pytest.fixture(scope="module")
def plan_of():
    from src.config import compose_config

    def make(*overrides):
        try:
            return build_plan(compose_config(list(overrides)), run_dir="r")
        except PlanError as exc:
            return exc
    return make


@pytest.mark.parametrize("targets", ["all-linear", "q_proj,v_proj"])
def test_adapter_count_is_what_peft_makes(targets):
    """The plan's adapter count against peft's own wrap of a small Qwen2 (peft is what verl wraps the actor with:
    verl/workers/engine/fsdp/transformer_impl.py get_peft_model): every trainable parameter, none other."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = dict(hidden_size=64, intermediate_size=160, num_attention_heads=8, num_key_value_heads=2,
                 num_hidden_layers=3, vocab_size=128)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**shape))
    base = sum(p.numel() for p in model.parameters())
    wrapped = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=targets if targets == "all-linear"
                                               else targets.split(","), task_type="CAUSAL_LM"))
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in wrapped.parameters() if not p.requires_grad)
    actor = ActorShape(params_b=base / 1e9, layers=3, hidden=64, heads=8, kv_heads=2, vocab=128, intermediate=160)
    assert trainable == lora_parameters(actor, 8, lora_targets(targets)) and frozen == base


def test_vllm_rank_rounds_up_as_verl_does():
    assert [vllm_lora_rank(r) for r in (0, 1, 2, 8, 33, 64, 300, 512)] == [0, 1, 8, 8, 64, 64, 320, 512]


def test_lora_state_per_gpu(plan_of):
    """7B, rank 64 on all linears, 4 GPUs: the base frozen in fp32 (verl's actor model_dtype), the adapters
    with fp32 grads and Adam, and no reference model though GRPO's KL loss is on."""
    full, lora = plan_of("model=qwen2.5_7b", "gpus=4"), plan_of("model=qwen2.5_7b", "gpus=4", "model.lora.rank=64")
    a = lora.memory.lora_params
    # 28 layers x 64 x (9 x 3584 + 2 x 512 + 3 x 18944): q, k, v, o, gate, up, down
    assert a == 28 * 64 * (9 * 3584 + 2 * 512 + 3 * 18944) == 161_480_704
    m = lora.memory
    assert m.actor_params_gb == pytest.approx(4 * (7.62e9 + a) / 4 / GIB)
    assert m.actor_grads_gb == pytest.approx(4 * a / 4 / GIB) and m.actor_optimizer_gb == pytest.approx(8 * a / 4 / GIB)
    assert full.memory.ref_gb > 0 and m.ref_gb == 0
    assert m.update_gb < full.memory.update_gb - 20


def test_7b_on_two_gpus_is_refused_in_full_and_plans_with_lora(plan_of):
    full = plan_of("model=qwen2.5_7b", "gpus=2")
    assert isinstance(full, PlanError) and str(full).endswith("alternatives that fit: LoRA (model.lora.rank=64)"), full
    lora = plan_of("model=qwen2.5_7b", "gpus=2", "model.lora.rank=64")
    assert not isinstance(lora, PlanError), lora
    assert lora.memory.fits and lora.memory.rollout_gb <= lora.memory.gpu_gb


def test_lora_refused_where_it_does_not_fit_names_the_adapter():
    """A LoRA plan that does not fit says so with its numbers (a 40 GiB card, 14B on 2 GPUs)."""
    from src.config import compose_config

    with pytest.raises(PlanError) as err:
        build_plan(compose_config(["model=qwen2.5_14b", "gpus=2", "model.lora.rank=64", "memory.gpu_gb=39.5"]),
                   run_dir="r")
    text = str(err.value)
    assert text.startswith("memory plan: qwen2.5_14b on 2 GPU(s) of 39.5 GiB") and "\n" not in text, text
    assert "LoRA (model.lora.rank=64)" not in text  # it is LoRA already: not offered again


# 14B (Qwen2.5-14B's config.json: 48 layers, hidden 5120, 40 heads, 8 KV heads, MLP 13824, 14.77B parameters) on
# the default 80 GB card with the default reward: full fine-tuning plans on 8 GPUs and not on 4 (actor, Adam and
# the KL loss's reference model), LoRA plans on 4 and 8
FOURTEEN_B = {("8", "0"): True, ("4", "0"): False, ("4", "64"): True, ("8", "64"): True}


@pytest.mark.parametrize("gpus,rank", list(FOURTEEN_B))
def test_14b_memory_rows(plan_of, gpus, rank):
    got = plan_of("model=qwen2.5_14b", f"gpus={gpus}", f"model.lora.rank={rank}")
    if not FOURTEEN_B[(gpus, rank)]:
        assert isinstance(got, PlanError) and "alternatives that fit: LoRA (model.lora.rank=64)" in str(got), got
        return
    assert not isinstance(got, PlanError), got
    assert got.memory.rollout_gb <= got.memory.gpu_gb and got.memory.update_gb <= got.memory.gpu_gb
    assert got.batch.rollout_tp == 4  # vLLM's TP divides the 40 heads and 8 KV heads


def test_lora_dry_run_on_a_cpu_machine(isolated_paths):
    """`model.lora.rank=64 dry_run=true` plans here (no vLLM in the launcher's env: verl's LoRA rank check is made
    on verl's own list instead), writes verl's LoRA keys, names the run as LoRA in its dirs and wandb name, and the
    table says what trains."""
    import importlib.util

    assert importlib.util.find_spec("vllm") is None  # what this test is about: a CPU machine's launcher env
    out, paths = isolated_paths
    res = launch(["model=qwen2.5_7b", "gpus=2", "model.lora.rank=64", "logger=console", "dry_run=true"] + paths)
    assert res.returncode == 0, res.stdout + res.stderr
    verl = next(p for p in files_under(out) if p.name == "verl_config.yaml").read_text()
    assert "lora_rank: 64" in verl and "lora_alpha: 16" in verl and "target_modules: all-linear" in verl
    plan = json.loads(next(p for p in files_under(out) if p.name == "plan.json").read_text())
    assert "/qwen2.5_7b-lora64/" in plan["checkpoint_dir"], plan["checkpoint_dir"]
    assert plan["wandb_run_name"].startswith("qwen2.5_7b-lora64-grpo-g2-seed1"), plan["wandb_run_name"]
    trains = {row["what"]: row["value"] for row in plan["trains"]}
    assert trains["weights trained"] == "LoRA adapters of rank 64 (alpha 16, on all-linear); the base frozen", trains


def test_a_rank_vllm_cannot_serve_is_refused_in_one_line(isolated_paths):
    out, paths = isolated_paths
    res = launch(["model.lora.rank=513", "dry_run=true"] + paths)
    assert res.returncode == 2 and res.stderr.strip() == \
        "error: model.lora.rank must be an integer in [0, 512], got 513 (e.g. model.lora.rank=64)", res.stderr
    assert files_under(out) == []

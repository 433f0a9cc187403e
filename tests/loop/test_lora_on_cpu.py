"""LoRA in real steps on the CPU loop (issue 45, item 3): verl's own trainer with `model.lora.rank=8` on the taught
tiny policy (experiment=learn_tiny, its verdict off). verl wraps the actor with peft, syncs the base weights into
vLLM once and the adapter after every step (verl/workers/engine_workers.py update_weights); vLLM serves the adapter
(enable_lora). On the CPU loop the actor trains under FSDP2 (src/verl_config/ppo_trainer.py says why).

1. Four steps asked, the launcher preempted (SIGTERM) after step 2: vLLM's log-probs of the sampled tokens agree
   with the actor's after each adapter sync (Pearson > 0.99, verl's training/rollout_actor_probs_pearson_corr);
   the step in progress is saved and holds the adapter
   (peft's lora_A / lora_B, lora_B moved off its zero init: it trained) beside the base weights, which are the
   taught policy's own (frozen), and the run is named as LoRA; Adam's state is the memory plan's count: two
   moments for each adapter parameter, none for the base.
   The evaluation's model of that checkpoint (verl's merger, then the adapter merged into the base weights) is
   the trained one: W + alpha / r x B A.
2. The same command again resumes from the saved step and trains to step 4, from the adapter it saved.
Both launches take the reward's CometKiwi from a QE service started apart from the launcher (scorer.placement=
external, its token in QE_SCORER_TOKEN): each says so, starts no scorer of its own, and writes the token nowhere.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from src.evaluate.checkpoint import hf_model_dir, resolve_checkpoint
from src.plan.memory import ActorShape, lora_parameters
from src.record.verl_metrics import read_metrics
from src.trainer import time_limit
from tests.helpers.launches import checkpoint_dir, metrics_files
from tests.helpers.loop_processes import launcher_pid
from tests.helpers.scorer_service import TOKEN

TIMEOUT_S = 900
WAIT_S = 600
STEPS = 4
ARGS = ["experiment=learn_tiny", "learn.enable=false", "model.lora.rank=8", "trainer.val_before_train=false",
        "trainer.test_freq=-1", "trainer.save_freq=100", f"trainer.total_training_steps={STEPS}",
        "trainer.preempt_grace_s=600"]
LAYER = "model.layers.0.self_attn.q_proj"


def _actor_state(step_dir) -> dict:
    state = torch.load(step_dir / "actor" / "model_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    return {k: (v.to_local() if hasattr(v, "to_local") else v) for k, v in state.items()}


def read_model_shape(build: Path) -> ActorShape:
    """The taught tiny policy's shape, from its config.json (the plan's ActorShape)."""
    c = json.loads((build / "learn" / "taught" / "config.json").read_text())
    return ActorShape(params_b=0.0, layers=c["num_hidden_layers"], hidden=c["hidden_size"],
                      heads=c["num_attention_heads"], kv_heads=c["num_key_value_heads"], vocab=c["vocab_size"],
                      intermediate=c["intermediate_size"])


def _steps_trained(results: Path) -> set[int]:
    steps = set()
    for path in results.rglob("metrics/*.jsonl"):
        steps.update(read_metrics(path))
    return steps


def test_lora_trains_real_steps_syncs_its_adapter_into_vllm_saves_and_resumes(cpu_loop, taught_build, tmp_path,
                                                                              scorer_service):
    results = tmp_path / "results"
    # the reward's CometKiwi from a QE service started apart from the launcher (scorer.placement=external)
    args = ARGS + [f"model.build_dir={taught_build}", f"paths.results_root={results}", "scorer=tiny", "reward=comet",
                   "reward.sentence_models=[cometkiwi_da]", "reward.weights.kiwi=1.0", "scorer.placement=external",
                   f"scorer.url={scorer_service.url}"]
    token = {"QE_SCORER_TOKEN": TOKEN}

    def preempt(out: Path, running) -> None:
        # SIGTERM to the launcher after step 2, as a preempting scheduler sends it: the step in progress is saved
        deadline = time.monotonic() + WAIT_S
        while 2 not in _steps_trained(results):
            assert running() and time.monotonic() < deadline, "the launch ended (or hung) before step 2"
            time.sleep(0.5)
        os.kill(launcher_pid(out), signal.SIGTERM)

    run = cpu_loop(args, timeout_s=TIMEOUT_S, env=token, out_name="lora-1", during=preempt)
    print(f"LoRA, preempted after step 2: {run.seconds:.0f} s")
    (run_dir,) = run.run_dirs
    ckpt = checkpoint_dir(run_dir)
    saved = time_limit.saved(ckpt)
    assert run.returncode == 1 and saved and saved["saved_now"], (saved, run.output[-6000:])
    step = saved["step"]
    assert "/tiny_qwen2-lora8/" in str(ckpt), ckpt
    verl = (run_dir / "snapshot" / "verl_config.yaml").read_text()
    assert "lora_rank: 8" in verl and "strategy: fsdp2" in verl
    (first,) = metrics_files(run_dir)
    rows = read_metrics(first)
    assert sorted(rows) == list(range(1, step + 1)) and step in (2, 3), (sorted(rows), step)
    for s, row in rows.items():
        assert row["training/rollout_actor_probs_pearson_corr"] > 0.99, (s, row)
        assert [k for k in row if "kiwi" in k and k.startswith("train-aux/")], sorted(row)  # scored there
    said = f"QE scorer (node 0): the external service at {scorer_service.url} (cometkiwi_da)"
    assert said in run.output and not (run_dir / "scorer").exists(), run.output[-3000:]  # nothing started here

    saved_dir = ckpt / f"global_step_{step}"
    assert json.loads((saved_dir / "actor" / "lora_train_meta.json").read_text())["r"] == 8
    state = _actor_state(saved_dir)
    a, b = (f"base_model.model.{LAYER}.lora_{x}.default.weight" for x in "AB")
    assert state[a].shape[0] == 8 and state[b].shape[1] == 8
    assert state[b].abs().sum() > 0  # peft starts lora_B at zero: the adapter trained
    # the memory plan's count (src/plan/memory.py lora_parameters) is what this real step's FSDP state holds: Adam's
    # two fp32 moments for the adapters' parameters and for nothing else (the base is frozen)
    shape = read_model_shape(taught_build)
    optim = torch.load(saved_dir / "actor" / "optim_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    moments = [v for st in optim["state"].values() for k, v in st.items() if k in ("exp_avg", "exp_avg_sq")]
    adapters = [v for k, v in state.items() if ".lora_" in k]
    assert sum(m.numel() for m in moments) == 2 * sum(p.numel() for p in adapters) == 2 * lora_parameters(shape, 8)
    taught = load_file(str(taught_build / "learn" / "taught" / "model.safetensors"))
    base = state[f"base_model.model.{LAYER}.base_layer.weight"]
    assert torch.equal(base.to(taught[f"{LAYER}.weight"].dtype), taught[f"{LAYER}.weight"])  # frozen

    # the evaluation's model of that checkpoint (src/evaluate/checkpoint.py: verl's merger, then the adapter merged
    # into the base by peft, src/evaluate/lora_merge.py): W + alpha / r x B A, not the base alone
    merged_dir = hf_model_dir(resolve_checkpoint(saved_dir), merged_dir=str(tmp_path / "merged"))
    assert not (merged_dir / "lora_adapter").exists()
    merged = load_file(str(merged_dir / "model.safetensors"))[f"{LAYER}.weight"].float()
    expected = base.float() + 16 / 8 * state[b].float() @ state[a].float()
    assert torch.allclose(merged, expected, atol=1e-5) and not torch.allclose(merged, base.float(), atol=1e-5)

    run2 = cpu_loop(args, timeout_s=TIMEOUT_S, env=token, out_name="lora-2")
    print(f"LoRA, resumed from step {step}: {run2.seconds:.0f} s")
    assert run2.returncode == 0, run2.output[-6000:]
    (run_dir2,) = run2.run_dirs
    assert checkpoint_dir(run_dir2) == ckpt
    files = metrics_files(run_dir2)
    assert len(files) == 2, files
    resumed = read_metrics(files[-1])
    assert sorted(resumed) == list(range(step + 1, STEPS + 1)), sorted(resumed)
    for s, row in resumed.items():
        assert row["training/rollout_actor_probs_pearson_corr"] > 0.99, (s, row)
    assert not torch.equal(_actor_state(ckpt / f"global_step_{STEPS}")[b], state[b])  # it went on from the saved one
    assert said in run2.output
    # the service's token is in no file of either launch
    written = [p for p in (tmp_path / "lora-1").rglob("*") if p.is_file()] + \
              [p for p in (tmp_path / "lora-2").rglob("*") if p.is_file()]
    assert written and not [p for p in written if TOKEN.encode() in p.read_bytes()]

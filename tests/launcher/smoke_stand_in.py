"""Stand-in for verl's GPU-bound trainer in the smoke tests (`debug.train_command_override`).

verl cannot train on CPU. This writes what verl 0.9.1's V1 trainer writes, where it writes it, so the
smoke verdict (src/pipeline/smoke.py) reads the same files it reads after a real run:
- resume: like `_load_checkpoint` (verl/trainer/ppo/v1/trainer_base.py) with resume_mode=auto, the
  step in `<checkpoint dir>/latest_checkpointed_iteration.txt` is loaded and training starts at
  step + 1 (`fit`), up to trainer.total_training_steps;
- per step, a rollout of data.train_batch_size prompts x rollout.n samples from the prepared train
  parquet (data.train_max_samples rows at most, as RLHFDataset caps them), each scored by the REAL
  reward function (src.rewards.compute.compute_score, with the verl config's reward_kwargs) against
  the REAL QE scorer the launcher started (QE_SCORER_URL/QE_SCORER_TOKEN); GRPO advantages and a
  policy-gradient loss from those scores;
- metrics: one JSON line per step `{"step": N, "data": {...}}` in $VERL_FILE_LOGGER_PATH, opened
  with "wb" as verl's file logger does (verl/utils/tracking.py FileLogger), with verl's metric
  names (critic/score/mean, response_length/mean, actor/pg_loss, val-core/...);
- checkpoint (every trainer.save_freq steps and the last, `_save_checkpoint`):
  global_step_N/actor/model_world_size_<W>_rank_<r>.pt, global_step_N/data.pt, then the tracker;
- validation (every trainer.test_freq steps and the last): `<trainer.validation_data_dir>/<N>.jsonl`
  with input, output, gts, score, step per sample (`_dump_generations`).

  --no-checkpoint   train and validate but save nothing (the verdict must say checkpoint FAIL)

It runs no policy and no vLLM, so it reports no vLLM/actor agreement
(training/rollout_actor_probs_pearson_corr): its update stage FAILs on that metric. The smoke's PASS on every
stage is proven on the real loop (tests/loop/test_smoke_on_cpu.py); this stand-in serves the verdict's FAIL
paths on experiment=smoke's own preset.
"""
import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import yaml

TRACKER = "latest_checkpointed_iteration.txt"


def rows(path: str, limit: int) -> list[dict]:
    table = pq.read_table(path).to_pylist()
    return table[:limit] if limit > 0 else table


def responses(row: dict, n: int) -> list[str]:
    """n distinct answers in the template's format: the reference, then shorter ones."""
    ref = row["reward_model"]["ground_truth"]
    words = ref.split() or [ref]
    out = []
    for k in range(n):
        text = " ".join(words[: max(1, len(words) - k)]) if len(words) > 1 else ref[: max(1, len(ref) - k)]
        out.append(f"<think>translate it</think><translate>{text}</translate>")
    return out


async def score_all(items: list[tuple[dict, str]], kwargs: dict) -> list[dict]:
    from src.rewards.compute import compute_score

    return await asyncio.gather(*(compute_score(row["data_source"], resp, row["reward_model"]["ground_truth"],
                                                row["extra_info"], **kwargs) for row, resp in items))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-checkpoint", action="store_true")
    args = ap.parse_args()

    verl = yaml.safe_load(Path(os.environ["QE_RL_VERL_CONFIG"]).read_text())
    ckpt = Path(os.environ["QE_RL_CHECKPOINT_DIR"])
    run_dir = Path(os.environ["QE_RL_RUN_DIR"])
    trainer, data = verl["trainer"], verl["data"]
    world = trainer["n_gpus_per_node"] * trainer["nnodes"]
    P, n = data["train_batch_size"], verl["actor_rollout_ref"]["rollout"]["n"]
    total = trainer["total_training_steps"]
    kwargs = verl["reward"]["custom_reward_function"]["reward_kwargs"]
    train = rows(data["train_files"], data["train_max_samples"])
    val = rows(data["val_files"], data["val_max_samples"])

    answer = responses
    tracker = ckpt / TRACKER
    start = int(tracker.read_text()) if tracker.is_file() and trainer["resume_mode"] == "auto" else 0
    print(f"stand-in: world size {world}, resuming from step {start}" if start else f"stand-in: world size {world}")
    # like verl's FileLogger: no mkdir, the launcher must have made the dir
    metrics_file = open(os.environ["VERL_FILE_LOGGER_PATH"], "wb")
    # one event loop for the whole run, as verl's reward loop keeps one (its HTTP sessions live on it)
    loop = asyncio.new_event_loop()
    done = []
    for step in range(start + 1, total + 1):
        t_step = time.perf_counter()
        batch = [train[((step - 1) * P + i) % len(train)] for i in range(P)]
        items = [(row, resp) for row in batch for resp in answer(row, n)]
        scores = [r["score"] for r in loop.run_until_complete(score_all(items, kwargs))]
        t_reward = time.perf_counter() - t_step
        advantages = []
        for g in range(P):
            group = scores[g * n:(g + 1) * n]
            mean, std = statistics.fmean(group), statistics.pstdev(group)
            advantages += [(s - mean) / (std + 1e-6) for s in group]
        metrics = {
            "critic/score/mean": statistics.fmean(scores),
            "critic/rewards/mean": statistics.fmean(scores),
            "response_length/mean": statistics.fmean(len(resp) for _, resp in items),
            "critic/score/min": min(scores), "critic/score/max": max(scores),
            # the loss at ratio 1: -mean(A); an update that ran reports a finite number
            "actor/pg_loss": -statistics.fmean(advantages),
            # the norm of that loss's gradient with respect to each answer's log-prob (-A_i / N)
            "actor/grad_norm": math.sqrt(sum(a * a for a in advantages)) / len(advantages),
            # the stand-in's own measured seconds, under the names of verl's marked_timer
            "timing_s/reward": t_reward,
        }
        last = step == total
        if not args.no_checkpoint and (last or step % trainer["save_freq"] == 0):
            t_save = time.perf_counter()
            folder = ckpt / f"global_step_{step}"
            (folder / "actor").mkdir(parents=True, exist_ok=True)
            for rank in range(world):
                (folder / "actor" / f"model_world_size_{world}_rank_{rank}.pt").write_bytes(b"stand-in shard\n")
            (folder / "data.pt").write_bytes(b"stand-in dataloader state\n")
            tracker.write_text(str(step))
            metrics["timing_s/save_checkpoint"] = time.perf_counter() - t_save
        # verl's step timer closes before validation (trainer_base.py fit)
        metrics["timing_s/step"] = time.perf_counter() - t_step
        if last or step % trainer["test_freq"] == 0:
            val_items = [(row, answer(row, 1)[0]) for row in val]
            val_results = loop.run_until_complete(score_all(val_items, kwargs))
            out = Path(trainer["validation_data_dir"])
            out.mkdir(parents=True, exist_ok=True)
            with open(out / f"{step}.jsonl", "w", encoding="utf-8") as f:
                for (row, resp), res in zip(val_items, val_results):
                    f.write(json.dumps({"input": json.dumps(row["prompt"], ensure_ascii=False), "output": resp,
                                        "gts": row["reward_model"]["ground_truth"], "score": res["score"],
                                        "step": step}, ensure_ascii=False) + "\n")
            source = val[0]["data_source"]
            metrics[f"val-core/{source}/reward/mean@1"] = statistics.fmean(r["score"] for r in val_results)
        metrics_file.write(json.dumps({"step": step, "data": metrics}).encode() + b"\n")
        metrics_file.flush()
        done.append(step)
        print(f"stand-in: step {step}: score {metrics['critic/score/mean']:.4f}")
    metrics_file.close()
    from src.rewards.client import close_clients

    loop.run_until_complete(close_clients())
    loop.close()
    with open(run_dir / "stand_in.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"pid": os.getpid(), "resumed_from": start, "steps": done}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

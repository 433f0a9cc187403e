"""Stand-in for verl's GPU-bound training step in the Slurm tests (`debug.train_command_override`).

verl cannot train on CPU, so the tests replace only its command; everything around it is real
(plan, verl config validated by verl, preflight, snapshot, Slurm request, code snapshot, requeue,
Ray bootstrap). Like verl it writes FSDP-style shards into the checkpoint dir
(global_step_1/actor/model_world_size_<G>_rank_<r>.pt + latest_checkpointed_iteration.txt) and
resumes when they exist. Each start appends what it saw to <run dir>/stand_in.jsonl.

  --exit N             fail with exit code N (after recording)
  --wait-for-requeue   on a fresh checkpoint dir: write the checkpoint, create
                       <run dir>/stand_in.waiting and wait (bounded) to be requeued
  --ray-nodes K        join the job's Ray cluster (RAY_ADDRESS) and require K alive nodes
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import yaml


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exit", type=int, default=0)
    ap.add_argument("--wait-for-requeue", action="store_true")
    ap.add_argument("--wait-s", type=float, default=150.0)
    ap.add_argument("--ray-nodes", type=int, default=0)
    args = ap.parse_args()

    run_dir = Path(os.environ["QE_RL_RUN_DIR"])
    ckpt = Path(os.environ["QE_RL_CHECKPOINT_DIR"])
    verl = yaml.safe_load(Path(os.environ["QE_RL_VERL_CONFIG"]).read_text())
    world = verl["trainer"]["n_gpus_per_node"] * verl["trainer"]["nnodes"]
    step = ckpt / "global_step_1"
    resumed = (ckpt / "latest_checkpointed_iteration.txt").exists()
    record = {
        "pid": os.getpid(), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_restart": int(os.environ.get("SLURM_RESTART_COUNT", 0)), "run_dir": str(run_dir),
        "checkpoint_dir": str(ckpt), "resumed": resumed, "resume_mode": verl["trainer"]["resume_mode"],
        "wandb_run_id": os.environ.get("WANDB_RUN_ID"), "wandb_resume": os.environ.get("WANDB_RESUME"),
        "wandb_mode": os.environ.get("WANDB_MODE"), "hf_hub_offline": os.environ.get("HF_HUB_OFFLINE"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "ray_address": os.environ.get("RAY_ADDRESS"), "ray_tmpdir": os.environ.get("RAY_TMPDIR"),
        "cwd": os.getcwd(), "pythonpath": os.environ.get("PYTHONPATH"),
    }
    if args.ray_nodes:
        import ray

        ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
        alive = [n for n in ray.nodes() if n["Alive"]]
        record["ray_nodes"] = len(alive)
        record["ray_node_manager_ports"] = sorted(n["NodeManagerPort"] for n in alive)
        ray.shutdown()
    with open(run_dir / "stand_in.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"stand-in: {json.dumps(record)}", flush=True)

    if args.ray_nodes and record["ray_nodes"] != args.ray_nodes:
        print(f"stand-in: expected {args.ray_nodes} Ray nodes, found {record['ray_nodes']}", flush=True)
        return 4
    if args.exit:
        print(f"stand-in: failing on purpose with exit code {args.exit}", flush=True)
        return args.exit
    if not resumed:
        (step / "actor").mkdir(parents=True, exist_ok=True)
        for rank in range(world):
            (step / "actor" / f"model_world_size_{world}_rank_{rank}.pt").write_bytes(b"stand-in shard")
        (ckpt / "latest_checkpointed_iteration.txt").write_text("1")
        if args.wait_for_requeue:
            (run_dir / "stand_in.waiting").write_text(str(os.getpid()))
            print("stand-in: checkpoint written, waiting to be requeued", flush=True)
            time.sleep(args.wait_s)
            print("stand-in: was not requeued", flush=True)
            return 3
    print(f"stand-in: done ({'resumed from' if resumed else 'wrote'} {step})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

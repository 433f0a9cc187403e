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
  --qe-health          ask the QE scorer the runner started (QE_SCORER_URL, QE_SCORER_TOKEN) for
                       /health and record what it says (tests/lifecycle)
  --token-file PATH    write QE_SCORER_TOKEN there and print it (tests/lifecycle check that the
                       runner scrubs it from train.log and that it is nowhere else on disk)
  --hold               create <run dir>/stand_in.holding (its pid) and wait (bounded by --wait-s)
                       until <run dir>/stand_in.release exists, like a long training run
  --train-steps N      train steps 1..N of --step-s seconds each, from the step after the one in
                       latest_checkpointed_iteration.txt, saving every trainer.save_freq steps and at
                       N like verl; speaks the time-limit protocol of src/trainer/entry.py through
                       src/trainer/time_limit.py: after a step, if the runner asked, save that step (unless
                       just saved), record it and end. Each completed step is a line in
                       <run dir>/stand_in_steps.jsonl. --resumed-steps K: a resumed start ends K
                       steps after the step it resumed from (so a requeued job finishes quickly)
"""
import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import yaml


def qe_health() -> dict:
    """What the runner gave this process for the QE scorer, and what /health answers with it."""
    import urllib.error
    import urllib.request

    url, token = os.environ.get("QE_SCORER_URL"), os.environ.get("QE_SCORER_TOKEN")
    seen = {"url": url, "log": os.environ.get("QE_SCORER_LOG"), "token_set": bool(token)}
    req = urllib.request.Request(f"{url}/health", headers={"Authorization": f"Bearer {token}"})
    # training starts while the service loads its models (src/node/scorer_service.py): wait for it, as the
    # reward client does (QE_SCORER_READY_TIMEOUT_S)
    deadline = time.monotonic() + float(os.environ.get("QE_SCORER_READY_TIMEOUT_S") or 120)
    while True:
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                health = json.loads(resp.read())
            break
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    seen.update(status=health["status"], pid=health["pid"], device=health["device"],
                models=sorted(health["models"]))
    return seen


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exit", type=int, default=0)
    ap.add_argument("--wait-for-requeue", action="store_true")
    ap.add_argument("--wait-s", type=float, default=150.0)
    ap.add_argument("--ray-nodes", type=int, default=0)
    ap.add_argument("--qe-health", action="store_true")
    ap.add_argument("--token-file")
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--train-steps", type=int, default=0)
    ap.add_argument("--step-s", type=float, default=0.5)
    ap.add_argument("--resumed-steps", type=int, default=0)
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
        "wandb_run_group": os.environ.get("WANDB_RUN_GROUP"),
        "wandb_mode": os.environ.get("WANDB_MODE"), "hf_hub_offline": os.environ.get("HF_HUB_OFFLINE"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        # every device variable this process got, for verl's own check of a worker's environment
        "device_env": {k: v for k, v in os.environ.items()
                       if k.endswith(("_VISIBLE_DEVICES", "_DEVICE_ORDINAL", "_AFFINITY_MASK")) or k == "SLURM_JOB_GPUS"},
        "ray_address": os.environ.get("RAY_ADDRESS"), "ray_tmpdir": os.environ.get("RAY_TMPDIR"),
        "cwd": os.getcwd(), "pythonpath": os.environ.get("PYTHONPATH"),
        # the runner blocks Slurm's time-limit signal in what it starts (src/node/training.py)
        "blocked_signals": sorted(sig.name for sig in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    }
    if args.ray_nodes:
        import ray

        ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
        alive = [n for n in ray.nodes() if n["Alive"]]
        record["ray_nodes"] = len(alive)
        record["ray_node_manager_ports"] = sorted(n["NodeManagerPort"] for n in alive)
        record["ray_auth_mode"] = os.environ.get("RAY_AUTH_MODE")
        ray.shutdown()
    if args.qe_health:
        record["qe"] = qe_health()
    if args.token_file:
        Path(args.token_file).write_text(os.environ.get("QE_SCORER_TOKEN", ""))
        print(f"stand-in: my scorer token is {os.environ.get('QE_SCORER_TOKEN')}", flush=True)
    with open(run_dir / "stand_in.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    # what offline wandb keeps per run: one dir per run id under $WANDB_DIR/wandb/, else the working dir's, as
    # wandb does (it names it offline-run-<time>-<id>); each attempt appends to its run's record
    wandb_run = Path(os.environ.get("WANDB_DIR") or os.getcwd()) / "wandb" / f"offline-run-{os.environ.get('WANDB_RUN_ID')}"
    wandb_run.mkdir(parents=True, exist_ok=True)
    with open(wandb_run / "attempts.jsonl", "a") as f:
        f.write(json.dumps({"slurm_restart": record["slurm_restart"], "group": record["wandb_run_group"]}) + "\n")
    print(f"stand-in: {json.dumps(record)}", flush=True)

    if args.ray_nodes and record["ray_nodes"] != args.ray_nodes:
        print(f"stand-in: expected {args.ray_nodes} Ray nodes, found {record['ray_nodes']}", flush=True)
        return 4
    if args.hold:
        (run_dir / "stand_in.holding").write_text(str(os.getpid()))
        print("stand-in: holding until stand_in.release", flush=True)
        deadline = time.monotonic() + args.wait_s
        while not (run_dir / "stand_in.release").exists():
            if time.monotonic() > deadline:
                print("stand-in: was not released", flush=True)
                return 3
            time.sleep(0.1)
    if args.exit:
        print(f"stand-in: failing on purpose with exit code {args.exit}", flush=True)
        return args.exit
    if args.train_steps:
        return train_steps(args, run_dir, ckpt, verl, world)
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


def save(ckpt: Path, step: int, world: int) -> None:
    """What verl's _save_checkpoint leaves: the step's shards, then the tracker file."""
    actor = ckpt / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True, exist_ok=True)
    for rank in range(world):
        (actor / f"model_world_size_{world}_rank_{rank}.pt").write_bytes(b"stand-in shard")
    (ckpt / "latest_checkpointed_iteration.txt").write_text(str(step))


def train_steps(args, run_dir: Path, ckpt: Path, verl: dict, world: int) -> int:
    from src.trainer import time_limit

    tracker = ckpt / "latest_checkpointed_iteration.txt"
    start = int(tracker.read_text()) if tracker.exists() else 0
    last = min(args.train_steps, start + args.resumed_steps) if start and args.resumed_steps else args.train_steps
    save_freq = verl["trainer"]["save_freq"]
    restart = int(os.environ.get("SLURM_RESTART_COUNT", 0))
    print(f"stand-in: training steps {start + 1}..{last}", flush=True)
    for step in range(start + 1, last + 1):
        time.sleep(args.step_s)
        with open(run_dir / "stand_in_steps.jsonl", "a") as f:
            f.write(json.dumps({"slurm_restart": restart, "step": step}) + "\n")
        finished = step == last
        # verl's periodic save (trainer_base.py, PPOTrainer.fit)
        periodic = save_freq > 0 and (finished or step % save_freq == 0)
        if periodic:
            save(ckpt, step, world)
        if time_limit.requested(ckpt):
            if not periodic:
                save(ckpt, step, world)
            time_limit.record_saved(ckpt, step, saved_now=not periodic, finished=finished)
            print(f"stand-in: time limit, saved step {step}", flush=True)
            return 0
    print(f"stand-in: trained to step {last}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

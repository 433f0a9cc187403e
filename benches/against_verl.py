"""What the project costs on top of verl: the launcher against verl's own `python -m verl.trainer.main_ppo` on the
same tiny config, back to back, with what each addition costs.

Four runs per round, each `--steps` steps of `experiment=learn_tiny accelerator=cpu` (the taught tiny policy, the
synthetic zh->en task, GRPO, format + sentence BLEU: no QE model, so no scorer service on either side):

    plain    verl.trainer.main_ppo on the project run's own verl config (its snapshot), with a plain reward
             function (benches/plain_reward.py: the format check and sentence BLEU, the same code the project's
             reward calls) and verl's default replay buffer
    +reward  the same with the project's reward function (src/rewards/compute.py: degenerate checks, guards,
             the per-sample components log)
    +guard   the same with the project's replay buffer too (src/trainer/guard.py: the lost-group rule and the
             train-aux reads from TransferQueue each step): the project's verl config as verl runs it
    project  `python -m src.launch` (the plan and pre-launch checks, the snapshot, our TaskRunner entry with its
             time-limit save, the console)

Start-up is the seconds from the command to the first step's end (the project's from its run's timings.json,
the others' from verl's file logger, read as it is written); step time the median of verl's timing_s/step
over the steps after the first. All four use the accelerator's environment (src/cpu_platform: without it verl
does not run on a CPU at all). Prints the ratios against `plain` (goal: start-up <= 1.25, step time <= 1.10),
each phase verl logs, and verl's own timing_s/* per step, so a difference shows where it comes from.

    python benches/against_verl.py                 # 1 round of 8 steps
    python benches/against_verl.py --rounds 3 --steps 10
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benches.launches import learn_tiny_overrides  # noqa: E402
from src.node import startup  # noqa: E402

RUN_TIMEOUT_S = 1200
VARIANTS = ("plain", "+reward", "+guard", "project")
STEP_KEYS = ("timing_s/step", "timing_s/gen", "timing_s/reward", "timing_s/old_log_prob", "timing_s/adv",
             "timing_s/update_actor", "timing_s/update_weights")


def _steps(metrics: Path) -> dict[int, dict]:
    out = {}
    for line in metrics.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out[int(row["step"])] = row["data"]
    return out


def project_run(work: Path, build_dir: Path, steps: int) -> dict:
    """The launcher, to the end of its steps."""
    out = Path(tempfile.mkdtemp(prefix="project-", dir=work))
    env = dict(os.environ, RAY_TMPDIR=tempfile.mkdtemp(prefix="qerl-ray-", dir="/tmp"))
    with open(out / "launch.log", "w") as log:
        code = subprocess.run([sys.executable, "-m", "src.launch", *learn_tiny_overrides(build_dir, out, steps)], cwd=REPO,
                              env=env, stdout=log, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S).returncode
    run_dirs = sorted((out / "runs").glob("*"))
    if code != 0 or not run_dirs:
        raise SystemExit(f"the project's launch failed (exit {code}): {out / 'launch.log'}")
    run_dir = run_dirs[0]
    plan = json.loads((run_dir / "snapshot" / "plan.json").read_text())
    (metrics,) = sorted((Path(plan["checkpoint_dir"]) / "metrics").glob("*.jsonl"))
    phases = startup.read(run_dir)[0]["phases"]
    built = " built in " in (out / "launch.log").read_text(errors="replace")
    return {"phases": phases, "steps": _steps(metrics), "run_dir": str(run_dir), "built": built,
            "log": str(out / "launch.log")}


def _default_sampler(node) -> None:
    """verl's default replay buffer wherever the config chooses one (…sampler.custom_sampler)."""
    if isinstance(node, dict):
        if "custom_sampler" in node:
            node["custom_sampler"] = {"path": None, "name": None}
            node["sampler_kwargs"] = {}
        for value in node.values():
            _default_sampler(value)


def variant_config(project_run_dir: Path, variant: str, out: Path) -> dict:
    """The project run's verl config, changed for `variant` (plain, +reward, +guard)."""
    cfg = yaml.safe_load((project_run_dir / "snapshot" / "verl_config.yaml").read_text())
    fn = cfg["reward"]["custom_reward_function"]
    if variant == "plain":
        kw = fn["reward_kwargs"]
        fn.update(path=str(REPO / "benches" / "plain_reward.py"), name="compute_score",
                  reward_kwargs={"bonus": kw["format"]["bonus"], "floor": kw["format"]["floor"],
                                 "answer_floor": kw["format"]["answer_floor"],
                                 "bleu_weight": kw["train_weights"]["bleu"]})
    if variant in ("plain", "+reward"):
        _default_sampler(cfg)
    cfg["trainer"]["default_local_dir"] = str(out / "checkpoints")
    cfg["trainer"]["logger"] = ["console", "file"]
    return cfg


def verl_run(project_run_dir: Path, variant: str, work: Path) -> dict:
    """verl's own main_ppo on the variant's config, to the end of its steps."""
    out = Path(tempfile.mkdtemp(prefix=f"{variant.strip('+')}-", dir=work))
    (out / "verl_config.yaml").write_text(yaml.safe_dump(variant_config(project_run_dir, variant, out)))
    plan = json.loads((project_run_dir / "snapshot" / "plan.json").read_text())
    metrics = out / "metrics.jsonl"
    env = {**os.environ, **plan["accelerator_env"], "PYTHONPATH": str(REPO), "VERL_FILE_LOGGER_PATH": str(metrics),
           "RAY_TMPDIR": tempfile.mkdtemp(prefix="qerl-ray-", dir="/tmp"), "HF_HUB_OFFLINE": "1",
           "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [plan["trainer_python"], "-m", "verl.trainer.main_ppo", f"--config-path={out}", "--config-name=verl_config",
           f"hydra.run.dir={out / 'hydra'}", "hydra.output_subdir=null"]
    clock = startup.StartupClock(t0=time.time())
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)

    def first_step() -> None:
        while proc.poll() is None and "first_step_end" not in clock.phases:
            if metrics.is_file() and metrics.read_text().strip():
                clock.mark("first_step_end")
            time.sleep(0.2)
    watcher = threading.Thread(target=first_step, daemon=True)
    watcher.start()
    with open(out / "train.log", "w") as log:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        for line in proc.stdout:
            clock.observe(line)
            log.write(line)
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                break
    code = proc.wait()
    watcher.join(timeout=5)
    if code != 0 or not metrics.is_file():
        raise SystemExit(f"verl's main_ppo ({variant}) failed (exit {code}): {out / 'train.log'}")
    return {"phases": dict(clock.phases), "steps": _steps(metrics), "log": str(out / "train.log")}


def summary(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Per variant: the median start-up, step time, each phase and each timing_s/* over the rounds."""
    out = {}
    for variant, rounds in runs.items():
        later = [data for r in rounds for step, data in r["steps"].items() if step > 1]
        phases = sorted({p for r in rounds for p in r["phases"]}, key=startup.PHASES.index)
        out[variant] = {
            "startup_s": statistics.median(r["phases"]["first_step_end"] for r in rounds),
            "phases": {p: statistics.median(r["phases"][p] for r in rounds if p in r["phases"]) for p in phases},
            "per_step": {k: statistics.median(d[k] for d in later if k in d) for k in STEP_KEYS
                         if any(k in d for d in later)},
        }
    return out


def report(s: dict[str, dict], rounds: int, steps: int, load: list[float]) -> str:
    base = s["plain"]
    lines = [f"experiment=learn_tiny accelerator=cpu, {steps} steps, median of {rounds} round(s); 1-minute load "
             f"average {min(load):.2f}-{max(load):.2f} at the runs' starts",
             f"{'':<26}" + "".join(f"{v:>10}" for v in s),
             f"{'start-up (s)':<26}" + "".join(f"{s[v]['startup_s']:10.1f}" for v in s),
             f"{'  ratio to plain':<26}" + "".join(f"{s[v]['startup_s'] / base['startup_s']:10.2f}" for v in s),
             f"{'step time (s, median)':<26}" + "".join(f"{s[v]['per_step']['timing_s/step']:10.2f}" for v in s),
             f"{'  ratio to plain':<26}" + "".join(
                 f"{s[v]['per_step']['timing_s/step'] / base['per_step']['timing_s/step']:10.2f}" for v in s),
             "", "phases (s from the command, median)"]
    for phase in startup.PHASES:
        if any(phase in s[v]["phases"] for v in s):
            lines.append(f"  {phase:<24}" + "".join(
                f"{s[v]['phases'][phase]:10.1f}" if phase in s[v]["phases"] else f"{'-':>10}" for v in s))
    lines.append("per step after the first (s, median of verl's timing_s/*)")
    for key in STEP_KEYS:
        if any(key in s[v]["per_step"] for v in s):
            lines.append(f"  {key:<24}" + "".join(
                f"{s[v]['per_step'][key]:10.2f}" if key in s[v]["per_step"] else f"{'-':>10}" for v in s))
    return "\n".join(lines)


def settle(limit_s: float = 90) -> float:
    """Wait (at most `limit_s`) until the last run's processes have gone quiet: the 1-minute load average
    under 1 on this 2-core machine. Returns the load average then, which the table reports."""
    deadline = time.monotonic() + limit_s
    while os.getloadavg()[0] >= 1.0 and time.monotonic() < deadline:
        time.sleep(5)
    return os.getloadavg()[0]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python benches/against_verl.py")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--work", type=Path, default=None, help="where runs go (default: a temp dir)")
    p.add_argument("--out", type=Path, default=None, help="every run as JSON (default: WORK/against_verl.json)")
    args = p.parse_args(argv)
    if args.steps < 3:
        p.error("--steps must be at least 3: the step time is the median of the steps after the first")
    work = args.work or Path(tempfile.mkdtemp(prefix="qerl-against-verl-"))
    work.mkdir(parents=True, exist_ok=True)
    build_dir = work / "tiny-models"
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    load = []
    while len(runs["project"]) < args.rounds:
        load.append(settle())
        project = project_run(work, build_dir, args.steps)
        if project["built"]:  # the launch that built the tiny models is not counted; the others reuse them
            continue
        # back to back on the project run's own config, each after the machine settled, in a rotated order
        # (the run after a launch's shutdown was seen to be the slower one)
        shift = len(runs["project"]) % (len(VARIANTS) - 1)
        for variant in VARIANTS[shift:-1] + VARIANTS[:shift]:
            load.append(settle())
            runs[variant].append(verl_run(Path(project["run_dir"]), variant, work))
            print(f"{variant}: start-up {runs[variant][-1]['phases']['first_step_end']:.1f} s", flush=True)
        runs["project"].append(project)
        print(f"project: start-up {project['phases']['first_step_end']:.1f} s", flush=True)
    print(report(summary(runs), args.rounds, args.steps, load), flush=True)
    out = args.out or work / "against_verl.json"
    out.write_text(json.dumps(runs, indent=1, default=str) + "\n")
    print(f"runs as JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

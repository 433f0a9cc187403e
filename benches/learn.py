"""Does the loop learn, and by how much more than chance? experiment=learn_tiny over several seeds, and its control.

Runs `python -m src.launch experiment=learn_tiny accelerator=cpu seed=S` for each seed (the taught policy is
built once and reused), then the control (the advantage's sign flipped, tests/loop/flipped_estimator.py)
for the first seed, and prints per run the trained reward's rise (mean of the last `learn.window` steps
minus the first) and the held-out metric's rise (last validation minus the one before training), the mean and
the spread (max - min) across seeds, and the margins experiment=learn_tiny requires. The margins are meant
to sit above the spread and below the smallest rise of a learning run: the numbers to check that against.
The per-step curves go to --out as JSON (benches/RESULTS.md "The loop learns" shows them as tables).

    python benches/learn.py                      # seeds 1 2 3 + control, ~4-5 min each on 2 cores
    python benches/learn.py --seeds 1 2 3 4 5 --no-control --out /tmp/learn.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from src.pipeline import learning  # noqa: E402
from src.record.verl_metrics import read_metrics, val_value  # noqa: E402

CONTROL_MODULES = "src.cpu_platform.register,tests.loop.flipped_estimator"
CONTROL = ["algo.adv_estimator=grpo_flipped", f'accelerator.env.VERL_USE_EXTERNAL_MODULES="{CONTROL_MODULES}"']


def launch(out: Path, build_dir: Path, args: list[str], env_extra: dict) -> tuple[int, float, dict[int, dict]]:
    """One launch: exit code, seconds, verl's metrics rows by step."""
    env = dict(os.environ, RAY_TMPDIR=tempfile.mkdtemp(prefix="qerl-ray-", dir="/tmp"), **env_extra)
    cmd = [sys.executable, "-m", "src.launch", "experiment=learn_tiny", "accelerator=cpu",
           f"model.build_dir={build_dir}", f"paths.output_dir={out}", *args]
    t0 = time.monotonic()
    with open(out.with_suffix(".log"), "w") as log:
        code = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.monotonic() - t0
    (run_dir,) = sorted((out / "runs").glob("*"))
    plan = json.loads((run_dir / "snapshot" / "plan.json").read_text())
    (metrics,) = sorted((Path(plan["checkpoint_dir"]) / "metrics").glob("*.jsonl"))
    return code, seconds, read_metrics(metrics)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python benches/learn.py")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--no-control", action="store_true")
    p.add_argument("--window", type=int, default=5, help="learn.window of experiment=learn_tiny")
    p.add_argument("--val-metric", default="score", help="learn.val_metric of experiment=learn_tiny")
    p.add_argument("--work", type=Path, default=None, help="where runs go (default: a temp dir)")
    p.add_argument("--out", type=Path, default=None, help="the curves as JSON (default: WORK/learn_curves.json)")
    p.add_argument("overrides", nargs="*", help="more launcher overrides for every run")
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="learn-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    out = args.out or work / "learn_curves.json"
    build = work / "build"
    runs = [(f"seed{s}", [f"seed={s}"], {}) for s in args.seeds]
    if not args.no_control:
        runs.append((f"control-seed{args.seeds[0]}", [f"seed={args.seeds[0]}", *CONTROL],
                     {"VERL_USE_EXTERNAL_MODULES": "tests.loop.flipped_estimator"}))
    results = {}
    for name, extra, env in runs:
        code, seconds, metrics = launch(work / name, build, extra + args.overrides, env)
        trained = learning.trained_rise(metrics, args.window, 0.0)
        held = learning.val_rise(metrics, args.val_metric, 0.0)
        steps = sorted(s for s in metrics if learning.TRAINED_METRIC in metrics[s])
        step_times = [metrics[s]["timing_s/step"] for s in steps if "timing_s/step" in metrics[s]]
        results[name] = {
            "exit": code, "seconds": round(seconds), "trained_rise": trained.rise, "held_out_rise": held.rise,
            "median_step_s": statistics.median(step_times) if step_times else None,
            "curve": {s: metrics[s][learning.TRAINED_METRIC] for s in steps},
            "held_out": {s: val_value(metrics[s], args.val_metric) for s in sorted(metrics)
                         if val_value(metrics[s], args.val_metric) is not None},
        }
        print(f"{name:<16} exit {code}  {seconds:4.0f} s  trained rise {trained.rise:+.3f} "
              f"({trained.before:.3f} -> {trained.after:.3f})  held-out {args.val_metric} rise {held.rise:+.3f} "
              f"({held.before:.3f} -> {held.after:.3f})", flush=True)
    learnt = [r for n, r in results.items() if n.startswith("seed")]
    for key in ("trained_rise", "held_out_rise"):
        values = [r[key] for r in learnt]
        print(f"{key:<16} seeds: mean {statistics.mean(values):+.3f}  min {min(values):+.3f}  "
              f"max {max(values):+.3f}  spread (max - min) {max(values) - min(values):.3f}")
    out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"curves: {out}; runs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

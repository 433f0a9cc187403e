"""Every algorithm preset in real steps: one local sweep of `experiment=learn_tiny` over conf/algo/, then a table.

Runs `python -m src.launch --multirun experiment=learn_tiny accelerator=cpu algo=<every preset> seed=<seeds>`
(verl's own trainer on this machine's CPU, the taught tiny policy, format + BLEU reward, learn_tiny's verdict
off), then `python -m src.report <sweep dir>` (the comparison report across the presets, seeds averaged), and
prints per preset, from verl's metrics files:
- steps: the steps trained (of --steps), and whether the job succeeded;
- finite: the policy loss (`actor/pg_loss`) finite on every step;
- own metrics: the `actor/` and `critic/` metrics this preset logs that grpo does not (its loss's own terms);
- rise: the trained reward (`critic/score/mean`) over its last 3 steps minus its first 3, mean over seeds.

    python benches/algorithms.py                         # every preset, 10 steps, seed 1: ~50 min on 2 cores
    python benches/algorithms.py --presets grpo gmpo --seeds 1 2 --steps 12
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from src.record.verl_metrics import read_metrics  # noqa: E402

REWARD = "critic/score/mean"
LOSS = "actor/pg_loss"
WINDOW = 3


def presets() -> list[str]:
    return sorted(p.stem for p in (REPO / "conf" / "algo").glob("*.yaml"))


def sweep(work: Path, names: list[str], seeds: list[int], steps: int, extra: list[str]) -> Path:
    """The local sweep; returns its dir (Hydra's, under paths.output_dir)."""
    env = dict(os.environ, RAY_TMPDIR=tempfile.mkdtemp(prefix="qerl-ray-", dir="/tmp"), WANDB_MODE="offline")
    cmd = [sys.executable, "-m", "src.launch", "--multirun", "experiment=learn_tiny", "accelerator=cpu",
           f"algo={','.join(names)}", f"seed={','.join(map(str, seeds))}", "learn.enable=false",
           f"trainer.total_training_steps={steps}", "trainer.test_freq=-1", "trainer.val_before_train=false",
           f"trainer.save_freq={steps}", f"model.build_dir={work / 'tiny-models'}", f"paths.output_dir={work}",
           *extra]
    with open(work / "sweep.log", "w") as log:
        subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    (summary,) = sorted(work.glob("multirun/*/*/summary.json")) or sorted(work.glob("multirun/*/summary.json"))
    return summary.parent


def job_rows(sweep_dir: Path) -> list[dict]:
    jobs = json.loads((sweep_dir / "summary.json").read_text())
    rows = []
    for job in jobs:
        algo = next(o.split("=", 1)[1] for o in job["overrides"] if o.startswith("algo="))
        metrics: dict[int, dict] = {}
        plan = Path(job["run_dir"]) / "snapshot" / "plan.json"
        if plan.is_file():
            checkpoint_dir = Path(json.loads(plan.read_text())["checkpoint_dir"])
            for path in sorted((checkpoint_dir / "metrics").glob("*.jsonl")):
                for step, row in read_metrics(path).items():
                    metrics.setdefault(step, {}).update(row)
        rows.append({"algo": algo, "state": job["state"], "error": job.get("error"), "metrics": metrics})
    return rows


def summarise(rows: list[dict], steps: int) -> list[dict]:
    baseline = {k for r in rows if r["algo"] == "grpo" for m in r["metrics"].values() for k in m}
    table = []
    for algo in sorted({r["algo"] for r in rows}):
        runs = [r for r in rows if r["algo"] == algo]
        trained = [sorted(s for s, m in r["metrics"].items() if REWARD in m) for r in runs]
        finite = all(math.isfinite(r["metrics"][s].get(LOSS, float("nan"))) for r, t in zip(runs, trained) for s in t)
        rises = []
        for r, t in zip(runs, trained):
            if len(t) >= 2 * WINDOW:
                first = statistics.mean(r["metrics"][s][REWARD] for s in t[:WINDOW])
                last = statistics.mean(r["metrics"][s][REWARD] for s in t[-WINDOW:])
                rises.append(last - first)
        keys = {k for r in runs for m in r["metrics"].values() for k in m}
        own = sorted(k for k in keys - baseline if k.startswith(("actor/", "critic/")))
        table.append({"algo": algo, "succeeded": sum(r["state"] == "succeeded" for r in runs), "runs": len(runs),
                      "steps": min((len(t) for t in trained), default=0), "of": steps,
                      "finite": finite and all(trained), "own": own,
                      "rise": statistics.mean(rises) if rises else None,
                      "error": next((r["error"] for r in runs if r["error"]), None)})
    return table


def markdown(table: list[dict]) -> str:
    lines = ["| preset | jobs ok | steps | loss finite | own metrics | reward rise (last 3 - first 3) | error |",
             "|---|---|---|---|---|---|---|"]
    for t in table:
        rise = f"{t['rise']:+.3f}" if t["rise"] is not None else "-"
        own = ", ".join(f"`{k}`" for k in t["own"]) or "-"
        error = (t["error"] or "")[:160].replace("|", "/")
        lines.append(f"| {t['algo']} | {t['succeeded']}/{t['runs']} | {t['steps']}/{t['of']} | "
                     f"{'yes' if t['finite'] else 'NO'} | {own} | {rise} | {error} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python benches/algorithms.py")
    p.add_argument("--presets", nargs="+", default=None, help="default: every conf/algo preset")
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--work", type=Path, default=None, help="where the sweep goes (default: a temp dir)")
    p.add_argument("overrides", nargs="*", help="more launcher overrides for every run")
    args = p.parse_args(argv)
    names = args.presets or presets()
    if "grpo" not in names:
        names = ["grpo", *names]  # the baseline the "own metrics" column is read against
    work = (args.work or Path(tempfile.mkdtemp(prefix="qerl-algorithms-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    sweep_dir = sweep(work, names, args.seeds, args.steps, args.overrides)
    report = subprocess.run([sys.executable, "-m", "src.report", str(sweep_dir)], cwd=REPO, capture_output=True,
                            text=True)
    table = summarise(job_rows(sweep_dir), args.steps)
    print(markdown(table))
    (work / "algorithms.json").write_text(json.dumps(table, indent=1) + "\n")
    print(f"sweep: {sweep_dir}; comparison report: {report.stdout.strip().splitlines()[-1] if report.stdout else report.stderr[-300:]}")
    print(f"table as JSON: {work / 'algorithms.json'}")
    return 0 if all(t["succeeded"] == t["runs"] and t["finite"] and t["steps"] == t["of"] for t in table) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

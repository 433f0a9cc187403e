"""Launcher speed: wall time of one `dry_run` (whole process, as a user runs it) and of composing +
validating all 24 reward x algo x gpus combinations in one process.

    .venv/bin/python benches/plan.py [--repeats 5]

The dry run is timed with an empty verl cache first (src/verl_config/cache.py: composition and verdict
computed by verl), then --repeats times as a user's later launches run (the cache filled by the
first). The 24 combinations run with an empty cache, as the tests do.
Targets (issue 13, 2-core machine): dry-run median <= 3 s, 24 combinations <= 60 s.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DRY_RUN = ["reward=comet", "algo=dapo", "gpus=3", "model=qwen2.5_7b", "dry_run=true"]


def _timed(args: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def dry_run_seconds(repeats: int) -> tuple[float, list[float]]:
    """(cold, [warm ...]) seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, QE_RL_CACHE_DIR=f"{tmp}/cache")
        args = ["-m", "src.launch", *DRY_RUN, f"paths.output_dir={tmp}/o", f"paths.results_root={tmp}/r"]
        cold = _timed(args, env)
        return cold, [_timed(args, env) for _ in range(repeats)]


def all_combinations_seconds() -> float:
    code = """
import itertools, sys, time
t0 = time.perf_counter()
from src.config import compose_config
from src.plan import build_plan
from src import verl_config
for r, a, g in itertools.product(['comet', 'xcomet_xl', 'word_qe'], ['grpo', 'dapo'], ['2', '3', '4', '8']):
    cfg = compose_config([f'reward={r}', f'algo={a}', f"gpus={g}"])
    verl_config.build(build_plan(cfg, run_dir='r'), cfg)
print(time.perf_counter() - t0)
"""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True,
                             env=dict(os.environ, QE_RL_CACHE_DIR=tmp))
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    cold, dry = dry_run_seconds(args.repeats)
    combos = [all_combinations_seconds() for _ in range(max(1, args.repeats // 2))]
    print(f"load average at start {load:.2f}; dry run: python -m src.launch {' '.join(DRY_RUN)}")
    print(f"dry_run cold (empty verl cache): {cold:.2f} s")
    print(f"dry_run: median {statistics.median(dry):.2f} s  (min {min(dry):.2f}, max {max(dry):.2f}, "
          f"n={len(dry)}; target <= 3 s)")
    print(f"24 combinations compose+validate (empty cache): median {statistics.median(combos):.2f} s "
          f"(n={len(combos)}; target <= 60 s)")


if __name__ == "__main__":
    main()

"""Launcher speed: median wall time of one `dry_run` (whole process, as a user runs it) and of
composing + validating all 24 reward x algo x gpus combinations in one process.

    .venv/bin/python benches/plan.py [--repeats 5]

Targets (issue 2, 2-core machine): dry run <= 3 s, 24 combinations <= 60 s.
"""
import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def dry_run_seconds(repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "src.launch", "reward=xcomet_xl", "gpus=4", "dry_run=true",
                            f"paths.output_dir={tmp}/o", f"paths.results_root={tmp}/r"],
                           cwd=ROOT, check=True, capture_output=True)
            times.append(time.perf_counter() - start)
    return times


def all_combinations_seconds() -> float:
    code = """
import itertools, sys, time
t0 = time.perf_counter()
from src.launch import compose_config
from src.plan import build_plan
from src import verl_config
for r, a, g in itertools.product(['comet', 'xcomet_xl', 'word_qe'], ['grpo', 'dapo'], ['2', '3', '4', '8']):
    cfg = compose_config([f'reward={r}', f'algo={a}', f"gpus='{g}'"])
    verl_config.build(build_plan(cfg, run_dir='r'), cfg)
print(time.perf_counter() - t0)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    dry = dry_run_seconds(args.repeats)
    combos = [all_combinations_seconds() for _ in range(max(1, args.repeats // 2))]
    print(f"dry_run: median {statistics.median(dry):.2f} s  (min {min(dry):.2f}, max {max(dry):.2f}, "
          f"n={len(dry)}; target <= 3 s)")
    print(f"24 combinations compose+validate: median {statistics.median(combos):.2f} s "
          f"(n={len(combos)}; target <= 60 s)")


if __name__ == "__main__":
    main()

"""Launcher speed: wall time of one `dry_run` (whole process, as a user runs it), of composing +
validating all 24 reward x algo x gpus combinations in one process, and of composing every option of every config
group once in one process (as a preset sweep does), with each config file read once per process
(src/config/hydra_internal.py remember_config_files) and, alternated with it, read again by every composition as
Hydra reads it.

    .venv/bin/python benches/plan.py [--repeats 5]
    .venv/bin/python benches/plan.py --against <another checkout> --repeats 10

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
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DRY_RUN = ["reward=comet", "algo=dapo", "gpus=3", "model=qwen2.5_7b", "dry_run=true"]


def _timed(args: list[str], env: dict, root: Path = ROOT) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=root, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def _dry_run(root: Path, tmp: str, name: str) -> Callable[[], float]:
    """One dry run of the checkout at `root`, its own caches and output dir under `tmp`."""
    env = dict(os.environ, QE_RL_CACHE_DIR=f"{tmp}/{name}-cache")
    args = ["-m", "src.launch", *DRY_RUN, f"paths.output_dir={tmp}/{name}-o", f"paths.results_root={tmp}/r"]
    return lambda: _timed(args, env, root)


def dry_run_seconds(repeats: int) -> tuple[float, list[float]]:
    """(cold, [warm ...]) seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        run = _dry_run(ROOT, tmp, "here")
        cold = run()
        return cold, [run() for _ in range(repeats)]


def against_seconds(other: Path, repeats: int) -> dict[str, list[float]]:
    """Warm dry runs of another checkout (`other`, e.g. a `git worktree` of an earlier commit) and of this one,
    alternated round by round (the order flipped every round) after one cold run each: the machine's speed drifts
    by more than a change to the launcher moves a dry run."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = {"other": _dry_run(other, tmp, "other"), "this": _dry_run(ROOT, tmp, "this")}
        for run in runs.values():
            run()
        times: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(repeats):
            for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                times[name].append(runs[name]())
        return times


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


def group_options_seconds(files_read_each_time: bool) -> tuple[float, int]:
    """(seconds, compositions): every option of every config group of conf/ composed on every experiment preset, in
    one process (tests/launcher/test_presets.py's sweep, less verl's checks)."""
    code = f"""
import contextlib, time
from src.config import CONF_DIR, compose_config, hydra_internal
t0 = time.perf_counter()
n = 0
with hydra_internal.config_files_read_each_time() if {files_read_each_time} else contextlib.nullcontext():
    groups = sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name not in ("hydra", "local", "reward_base"))
    for preset in sorted(f.stem for f in (CONF_DIR / "experiment").glob("*.yaml")):
        for group in (g for g in groups if g.name != "experiment"):
            for option in sorted(f.stem for f in group.glob("*.yaml")):
                compose_config([f"experiment={{preset}}", f"{{group.name}}={{option}}"])
                n += 1
print(time.perf_counter() - t0, n)
"""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True,
                             env=dict(os.environ, QE_RL_CACHE_DIR=tmp))
    seconds, count = out.stdout.strip().splitlines()[-1].split()
    return float(seconds), int(count)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", type=Path, help="another checkout: its dry run and this one's, alternated")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    if args.against is not None:
        times = against_seconds(args.against, args.repeats)
        print(f"load average at start {load:.2f}; dry run: python -m src.launch {' '.join(DRY_RUN)}")
        for name, root in (("other", args.against), ("this", ROOT)):
            ts = times[name]
            print(f"{name} ({root}): median {statistics.median(ts):.2f} s  (min {min(ts):.2f}, max {max(ts):.2f}, "
                  f"n={len(ts)})")
        print(f"ratio this/other: {statistics.median(times['this']) / statistics.median(times['other']):.2f}")
        return
    cold, dry = dry_run_seconds(args.repeats)
    combos = [all_combinations_seconds() for _ in range(max(1, args.repeats // 2))]
    once, each_time = [], []
    for _ in range(max(1, args.repeats // 2)):  # alternated: the machine's speed drifts
        once.append(group_options_seconds(files_read_each_time=False))
        each_time.append(group_options_seconds(files_read_each_time=True))
    print(f"load average at start {load:.2f}; dry run: python -m src.launch {' '.join(DRY_RUN)}")
    print(f"dry_run cold (empty verl cache): {cold:.2f} s")
    print(f"dry_run: median {statistics.median(dry):.2f} s  (min {min(dry):.2f}, max {max(dry):.2f}, "
          f"n={len(dry)}; target <= 3 s)")
    print(f"24 combinations compose+validate (empty cache): median {statistics.median(combos):.2f} s "
          f"(n={len(combos)}; target <= 60 s)")
    print(f"every option of every config group composed on every experiment preset ({once[0][1]} compositions): median "
          f"{statistics.median(t for t, _ in once):.2f} s with each config file read once, "
          f"{statistics.median(t for t, _ in each_time):.2f} s read by every composition as Hydra reads them "
          f"(n={len(once)} each, alternated)")


if __name__ == "__main__":
    main()

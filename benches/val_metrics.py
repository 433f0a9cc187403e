"""CPU of verl's validation metrics (verl/trainer/ppo/metric_utils.py process_validation_metrics) with verl's own
bootstrap_metric and with src/trainer/val_bootstrap.py's, on validations of several sizes: N answers a prompt, the
11 number keys our reward logs at a validation. Prints a table; the numbers go to benches/RESULTS.md.

    .venv/bin/python benches/val_metrics.py
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.trainer.val_bootstrap import resampled_at_once  # noqa: E402

KEYS = 11  # score, score_rounded, format_ok, answer, bleu, 4 degenerate flags, 2 guard flags (learn_tiny's val-aux)


def answers(prompts: int, n: int):
    rng = np.random.default_rng(0)
    rows = prompts * n
    infos = {f"key{k}": list(rng.normal(size=rows)) for k in range(KEYS)}
    return ["synth/zh-en"] * rows, [f"u{i // n}" for i in range(rows)], infos


def cpu_seconds(sources, uids, infos) -> float:
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    t0 = time.process_time()
    process_validation_metrics(sources, uids, infos)
    return time.process_time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="48x4,500x4,2000x4", help="PROMPTSxN,... (learn_tiny's is 48x4)")
    args = parser.parse_args()
    print("| prompts x answers | verl's (CPU-s) | resampled at once (CPU-s) | ratio |")
    print("|---|---|---|---|")
    for size in args.sizes.split(","):
        prompts, n = (int(v) for v in size.split("x"))
        data = answers(prompts, n)
        verls = cpu_seconds(*data)
        with resampled_at_once():
            ours = cpu_seconds(*data)
        print(f"| {prompts} x {n} | {verls:.2f} | {ours:.3f} | {verls / ours:.0f}x |", flush=True)


if __name__ == "__main__":
    main()

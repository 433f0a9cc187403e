"""What a CPU-loop step spends its time on: verl's timing_s/* per step of `experiment=learn_tiny accelerator=cpu`,
median over the steps after the first, for one launch per variant (back to back, alternated over rounds), with
the machine's CPU (model, torch's CPU capability) and the cost of one matmul in bf16 and in float32, which is what
decides whether bf16 is worth computing in on this CPU (conf/accelerator/cpu.yaml).

A variant is a name and launcher overrides, `NAME:override,override`; `--checkout DIR` runs every variant from
another checkout of the project too (its own launcher and config, this machine's envs), named `NAME@DIR`.

    python benches/step_time.py --steps 8                                   # this checkout as it is
    python benches/step_time.py --steps 8 --variant "bf16:+verl.actor_rollout_ref.rollout.dtype=bfloat16"
    python benches/step_time.py --steps 8 --checkout /tmp/before --rounds 2
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benches.launches import learn_tiny_overrides, own_temp_env  # noqa: E402
from src.record.verl_metrics import read_metrics  # noqa: E402

KEYS = ("step", "gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "testing")
RUN_TIMEOUT_S = 1800


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def matmul_ms(python: Path) -> str:
    """fwd+bwd of a 128->256 linear over 4096 tokens on one thread (the tiny policy's MLP shape), bf16 and fp32,
    in the CPU loop env's torch."""
    code = ("import time, torch\ntorch.set_num_threads(1)\nout = [torch.backends.cpu.get_cpu_capability()]\n"
            "for dt in (torch.bfloat16, torch.float32):\n"
            "    x = torch.randn(4096, 128, dtype=dt, requires_grad=True); lin = torch.nn.Linear(128, 256).to(dt)\n"
            "    lin(x).sum().backward(); t = time.perf_counter()\n"
            "    for _ in range(5): lin(x).sum().backward()\n"
            "    out.append(f'{dt}'.split('.')[1] + f' {(time.perf_counter() - t) / 5 * 1000:.1f} ms')\n"
            "print('torch CPU capability ' + out[0] + '; linear fwd+bwd: ' + ', '.join(out[1:]))\n")
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env={**os.environ,
                          "OMP_NUM_THREADS": "1"}).stdout.strip()


def one_launch(checkout: Path, overrides: list[str], steps: int, build_dir: Path, work: Path) -> dict[str, float]:
    out = Path(tempfile.mkdtemp(prefix="steps-", dir=work))
    env = own_temp_env()
    cmd = [sys.executable, "-m", "src.launch", *learn_tiny_overrides(build_dir, out, steps, test_freq=steps,
                                                                      save_freq=steps), *overrides]
    with open(out / "launch.log", "w") as log:
        code = subprocess.run(cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=RUN_TIMEOUT_S).returncode
    files = sorted(out.glob("learn/**/metrics/*.jsonl"))
    if code != 0 or not files:
        raise SystemExit(f"launch failed (exit {code}); log: {out / 'launch.log'}")
    rows = read_metrics(files[0])
    later = [rows[s] for s in sorted(rows) if s >= 2]
    return {k: statistics.median(r[f"timing_s/{k}"] for r in later if f"timing_s/{k}" in r)
            for k in KEYS if any(f"timing_s/{k}" in r for r in later)}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python benches/step_time.py")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--variant", action="append", default=[], help="NAME:override,override (default: 'as-is:')")
    p.add_argument("--checkout", type=Path, default=None, help="another checkout to run every variant from too")
    p.add_argument("--work", type=Path, default=None)
    args = p.parse_args(argv)
    variants = [(v.split(":", 1)[0], [o for o in v.split(":", 1)[1].split(",") if o]) for v in args.variant or ["as-is:"]]
    checkouts = [("", REPO)] + ([(f"@{args.checkout}", args.checkout.resolve())] if args.checkout else [])
    work = args.work or Path(tempfile.mkdtemp(prefix="step-time-"))
    work.mkdir(parents=True, exist_ok=True)
    build_dir = work / "build"
    print(f"{cpu_model()}, {os.cpu_count()} cores; {matmul_ms(REPO / '.venv-loop' / 'bin' / 'python')}", flush=True)
    results: dict[str, list[dict]] = {}
    for round_ in range(args.rounds):
        order = [(n + tag, ck, o) for n, o in variants for tag, ck in checkouts]
        for name, checkout, overrides in (order if round_ % 2 == 0 else order[::-1]):
            load = os.getloadavg()[0]
            started = time.monotonic()
            medians = one_launch(checkout, overrides, args.steps, build_dir, work)
            results.setdefault(name, []).append(medians)
            print(f"round {round_ + 1} {name}: {time.monotonic() - started:.0f} s, load {load:.2f} before; "
                  + ", ".join(f"{k} {v:.2f}" for k, v in medians.items()), flush=True)
    print(f"\nmedian s per step over steps 2-{args.steps} (median of {args.rounds} launch(es)):")
    names = list(results)
    print(f"{'timing_s':<16}" + "".join(f"{n:>24}" for n in names))
    for key in KEYS:
        cells = [statistics.median(r[key] for r in results[n] if key in r) if any(key in r for r in results[n])
                 else None for n in names]
        if any(c is not None for c in cells):
            print(f"{key:<16}" + "".join(f"{c:>24.2f}" if c is not None else f"{'-':>24}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

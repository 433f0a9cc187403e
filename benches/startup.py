"""Where start-up goes: the seconds from the command to each phase of a launch, median of N rounds.

Runs `python -m src.launch experiment=E accelerator=cpu` for each experiment, N times, and reads the
launch's `<run dir>/timings.json` (src/node/startup.py: the plan, the QE scorer's health, the training
command, Ray up, verl's dataloader, worker group, actor (FSDP) workers, reward workers, vLLM serving, ready
to fit, the first step's end). A round is stopped with Ctrl-C (SIGINT, as a user stops a run: the launcher
ends training and its services) once its first step has ended: what comes after is not start-up. The
tiny models are built once and reused: a round that built them is run again and not counted.
Each round runs under a temp dir of its own, as the tests' launches do (what a launch caches there is paid again).
Prints one table per experiment (median, min, max per phase; the step between phases), the machine's busy CPU-s
from the command to the first step's end (every process of the launch) and the load average at the start and end
of each round, since the machine's load moves every figure.

    python benches/startup.py                                  # smoke_tiny and learn_tiny, 3 rounds each
    python benches/startup.py --experiments smoke_tiny --rounds 1 --out /tmp/startup.json
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benches.launches import own_temp_env  # noqa: E402
from src.node import startup  # noqa: E402

ROUND_TIMEOUT_S = 900


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy (every core, /proc/stat): a round's share is its difference,
    counted over all of a launch's processes (Ray's, verl's workers, vLLM's, the compilers they start)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def one_round(experiment: str, work: Path, build_dir: Path, extra: list[str]) -> dict:
    """One launch, stopped after its first step: its phases and the load average around it."""
    out = Path(tempfile.mkdtemp(prefix=f"{experiment}-", dir=work))
    env = own_temp_env()
    cmd = [sys.executable, "-m", "src.launch", f"experiment={experiment}", "accelerator=cpu",
           f"model.build_dir={build_dir}", f"paths.output_dir={out}", *extra]
    load_before = os.getloadavg()
    cpu_before, cpu_at_first_step = machine_cpu_s(), None
    with open(out / "launch.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        phases: dict = {}
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1.0)
            run_dirs = sorted((out / "runs").glob("*"))
            launches = startup.read(run_dirs[0]) if run_dirs else []
            phases = launches[0]["phases"] if launches else {}
            if "first_step_end" in phases:
                cpu_at_first_step = machine_cpu_s() - cpu_before
                proc.send_signal(signal.SIGINT)
                break
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    run_dirs = sorted((out / "runs").glob("*"))
    launches = startup.read(run_dirs[0]) if run_dirs else []
    phases = launches[0]["phases"] if launches else {}
    if "first_step_end" not in phases:
        raise SystemExit(f"{experiment}: the launch ended (exit {proc.returncode}) before its first step; "
                         f"log: {out / 'launch.log'}")
    return {"phases": phases, "cpu_s_to_first_step": cpu_at_first_step, "load_before": load_before,
            "load_after": os.getloadavg(), "log": str(out / "launch.log")}


def table(experiment: str, rounds: list[dict]) -> str:
    names = sorted((p for p in startup.PHASES if all(p in r["phases"] for r in rounds)),
                   key=lambda p: statistics.median(r["phases"][p] for r in rounds))  # the scorer's health moves
    lines = [f"{experiment}: seconds from the command, median of {len(rounds)} (min - max); + since the phase before",
             f"{'phase':<22} {'median':>8} {'min':>8} {'max':>8} {'+step':>8}"]
    previous = 0.0
    for name in names:
        values = [r["phases"][name] for r in rounds]
        median = statistics.median(values)
        lines.append(f"{name:<22} {median:8.1f} {min(values):8.1f} {max(values):8.1f} {median - previous:8.1f}")
        previous = median
    cpu = [r["cpu_s_to_first_step"] for r in rounds]
    lines.append(f"{'CPU-s to first step':<22} {statistics.median(cpu):8.1f} {min(cpu):8.1f} {max(cpu):8.1f}"
                 f"   (the machine's busy time, every process)")
    for i, r in enumerate(rounds, 1):
        lines.append(f"round {i}: load average {r['load_before'][0]:.2f} before, {r['load_after'][0]:.2f} after")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python benches/startup.py")
    p.add_argument("--experiments", nargs="+", default=["smoke_tiny", "learn_tiny"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", type=Path, default=None, help="where runs go (default: a temp dir)")
    p.add_argument("--out", type=Path, default=None, help="every round's phases as JSON (default: WORK/startup.json)")
    p.add_argument("overrides", nargs="*", help="more launcher overrides for every launch")
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="qerl-startup-"))
    work.mkdir(parents=True, exist_ok=True)
    build_dir = work / "tiny-models"
    results = {}
    for experiment in args.experiments:
        rounds = []
        while len(rounds) < args.rounds:
            r = one_round(experiment, work, build_dir, args.overrides)
            # a launch that built the tiny models is not counted: the others reuse them, as any launch after the first
            if " built in " not in Path(r["log"]).read_text(errors="replace"):
                rounds.append(r)
        results[experiment] = rounds
        print(table(experiment, results[experiment]), flush=True)
    out = args.out or work / "startup.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"rounds as JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

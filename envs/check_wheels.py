"""Which pins of a lock would be compiled on install: no wheel for the target Python and platform, and an
sdist with sources in a compiled language (C, C++, CUDA, Cython, Rust, Fortran).

  python envs/check_wheels.py envs/lock/train-gpu.txt envs/lock/scorer-gpu.txt   # exit 1 if any

The default GPU install (`make setup PLATFORM=gpu`: envs/lock/train-gpu.txt + scorer-gpu.txt) must need no
compiler (tests/env/test_no_compiler.py); flash-attn is the one such package, an opt-in
(envs/lock/train-gpu-flash-attn.txt). A pin with no wheel but a pure-Python sdist (antlr4-python3-runtime,
jieba, the MeCab dictionaries) is fine: uv builds a py3-none-any wheel with no compiler.
Asks the package index's JSON simple API (PEP 691), one page per package; sdists of wheel-less pins are read
as a stream, nothing is written to disk. Standard library plus packaging (pip vendors it), like check_locks.py.
"""
from __future__ import annotations

import json
import re
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from concurrent.futures import ThreadPoolExecutor
from io import BytesIO
from pathlib import Path, PurePosixPath

try:
    from packaging import tags
    from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
    from packaging.version import Version
except ImportError:  # a bare interpreter: pip always vendors packaging
    from pip._vendor.packaging import tags
    from pip._vendor.packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
    from pip._vendor.packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_locks import read_lock  # noqa: E402  (envs/ is not a package)

INDEX = "https://pypi.org/simple"
# the Python and the platforms the locks are resolved for: envs/lock.sh holds them
_LOCK_SH = (Path(__file__).resolve().parent / "lock.sh").read_text()
PYTHON_VERSION = re.search(r"^PYTHON_VERSION=(\S+)", _LOCK_SH, re.M).group(1)


def lock_platform(platform: str) -> tuple[str, tuple[int, int]]:
    """(arch, glibc) of envs/lock.sh's GPU_PLATFORM (platform "gpu") or PLATFORM ("cpu")."""
    variable = {"gpu": "GPU_PLATFORM", "cpu": "PLATFORM"}[platform]
    match = re.search(rf"^{variable}=(\w+)-manylinux_(\d+)_(\d+)", _LOCK_SH, re.M)
    return match.group(1), (int(match.group(2)), int(match.group(3)))


ARCH, GLIBC = lock_platform("gpu")  # the default install set checked here is the GPU nodes'
# a source file in one of these languages means a compiler at install time
COMPILED_SUFFIXES = frozenset({".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".pyx", ".rs", ".f", ".f90"})


def platform_tags(glibc: tuple[int, int] = GLIBC, arch: str = ARCH) -> list[str]:
    """manylinux platform tags a glibc-`glibc` machine accepts, newest first (PEP 600, and the legacy
    aliases manylinux2014 = 2_17, manylinux2010 = 2_12, manylinux1 = 2_5)."""
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    out = []
    for minor in range(glibc[1], 4, -1):
        out.append(f"manylinux_{glibc[0]}_{minor}_{arch}")
        if minor in legacy:
            out.append(f"{legacy[minor]}_{arch}")
    return out


def supported_tags(python_version: str = PYTHON_VERSION, glibc: tuple[int, int] = GLIBC) -> set[tags.Tag]:
    version = tuple(int(p) for p in python_version.split("."))
    platforms = platform_tags(glibc)
    return set(tags.cpython_tags(version, platforms=platforms)) | set(
        tags.compatible_tags(version, f"cp{version[0]}{version[1]}", platforms=platforms))


# A failed name lookup or a 5xx/429 from the index is retried: CI reaches the registries through resolvers
# that fail a lookup now and then ("Temporary failure in name resolution" ended one full CI run). Waits of
# 1, 2, 4, 8, 16 s: about half a minute before the sixth and last try.
RETRY_WAITS_S = (1, 2, 4, 8, 16)
RETRIED_HTTP_CODES = frozenset({429, 500, 502, 503, 504})


def _transient(error: Exception) -> bool:
    if isinstance(error, urllib.error.HTTPError):  # a subclass of URLError: an answer, retried only if 5xx/429
        return error.code in RETRIED_HTTP_CODES
    return isinstance(error, (urllib.error.URLError, ConnectionError, TimeoutError))


def open_url(url: str | urllib.request.Request, timeout: float):
    """urllib.request.urlopen with retries on transient failures (a lookup, a reset connection, a 5xx);
    a 404 or any other answer fails at once. Returns the open response (a context manager)."""
    for wait in (*RETRY_WAITS_S, None):
        try:
            return urllib.request.urlopen(url, timeout=timeout)
        except Exception as error:  # noqa: BLE001  (narrowed by _transient)
            if wait is None or not _transient(error):
                raise
            time.sleep(wait)


def index_files(name: str, index: str = INDEX) -> list[dict]:
    request = urllib.request.Request(f"{index}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with open_url(request, timeout=120) as response:
        return json.load(response)["files"]


def compiled_sources(url: str, filename: str) -> list[str]:
    """Members of an sdist written in a compiled language (first few), read from the stream."""
    found: list[str] = []
    with open_url(url, timeout=300) as response:
        if filename.endswith(".zip"):
            names = zipfile.ZipFile(BytesIO(response.read())).namelist()
            return [n for n in names if PurePosixPath(n).suffix.lower() in COMPILED_SUFFIXES][:3]
        with tarfile.open(fileobj=response, mode="r|*") as sdist:
            for member in sdist:
                if PurePosixPath(member.name).suffix.lower() in COMPILED_SUFFIXES:
                    found.append(member.name)
                    if len(found) == 3:
                        break
    return found


def sdists(version: str, files: list[dict]) -> list[dict]:
    """The index's files that are sdists of `version` (not yanked)."""
    found = []
    for f in files:
        if f.get("yanked") or not f["filename"].endswith((".tar.gz", ".zip")):
            continue
        try:
            _, sdist_version = parse_sdist_filename(f["filename"])
        except ValueError:  # a legacy file name packaging cannot split
            continue
        if sdist_version == Version(version):
            found.append(f)
    return found


def needs_compiler(name: str, version: str, files: list[dict], supported: set[tags.Tag]) -> str | None:
    """Why `name==version` would be compiled on install, or None when it installs without a compiler."""
    wanted = Version(version)
    for f in files:
        if not f.get("yanked") and f["filename"].endswith(".whl"):
            _, wheel_version, _, wheel_tags = parse_wheel_filename(f["filename"])
            if wheel_version == wanted and wheel_tags & supported:
                return None
    sdists_ = sdists(version, files)
    if not sdists_:
        return f"{name}=={version}: neither a wheel for this platform nor an sdist on the index"
    sources = compiled_sources(sdists_[0]["url"], sdists_[0]["filename"])
    if sources:
        return f"{name}=={version}: no wheel for this platform, its sdist has compiled sources ({', '.join(sources)})"
    return None


def check(locks: list[Path], python_version: str = PYTHON_VERSION, index: str = INDEX) -> list[str]:
    """One line per pin of `locks` that needs a compiler to install on python_version / manylinux x86_64."""
    pins: dict[str, str] = {}
    for lock in locks:
        pins.update(read_lock(lock))
    supported = supported_tags(python_version)
    with ThreadPoolExecutor(16) as pool:  # network-bound: one index page per package
        pages = dict(zip(pins, pool.map(lambda n: index_files(n, index), pins)))
        reasons = pool.map(lambda n: needs_compiler(n, pins[n], pages[n], supported), sorted(pins))
        return [r for r in reasons if r]


def main(argv: list[str]) -> int:
    if not argv or any(a.startswith("-") for a in argv):
        print("usage: check_wheels.py LOCK [LOCK ...]", file=sys.stderr)
        return 2
    problems = check([Path(a) for a in argv])
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

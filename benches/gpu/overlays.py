"""The installs a GPU check carries to a node with no package index, built here, once per lock change.

The GPU node has Python 3.12 with torch 2.11.0+cu130 (the version envs/lock/train-gpu.txt pins) and no
index. Each environment a check needs goes there as an overlay: the lock's pins that the node lacks,
downloaded for that Python and platform (envs/wheelhouse.py), installed into one folder (`pip install
--target`), trimmed of what the check never loads, packed as one xz stream and cut into chunks that the
calls to the node send a few at a time (64 MiB a call, working tree included). benches/gpu/check.py
checks, unpacks and uses them there; benches/gpu/README.md has the order of calls.

  python benches/gpu/overlays.py list [OVERLAY ...]        what each overlay carries and leaves out (no network)
  python benches/gpu/overlays.py build [OVERLAY ...]        download, install, trim, pack into .gpu/ (network)
  python benches/gpu/overlays.py calls CHECK                the calls to the node that send CHECK's overlays

Every rule below says why a pin or a file stays behind. A rule that matches nothing in the lock or the
install is an error, so a lock change cannot leave a stale rule (or a silently larger overlay) behind.
"""
from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "envs"))
sys.path.insert(0, str(ROOT / "benches" / "gpu"))
from check_locks import read_lock  # noqa: E402  (envs/ is not a package)
from check_wheels import lock_platform, platform_tags  # noqa: E402
from wheelhouse import build_wheelhouse, pip  # noqa: E402
from check import CHECKS  # noqa: E402  (benches/gpu/ is not a package either)
from imports import reach  # noqa: E402

# the GPU node's python (benches/gpu/node.txt)
NODE_PYTHON = "3.12"
# what travels lives here, ignored by git (.gitignore); the node's copy of the working tree has it too
GPU_DIR = ROOT / ".gpu"
MANIFEST = "manifest.json"
# one call to the node sends at most 64 MiB, the working tree included, and at most 8 extra paths
CALL_LIMIT_BYTES = 64 << 20
CALL_PATHS = 8
# room left in each call for files of the working tree that change between the plan and the call
CALL_MARGIN_BYTES = 2 << 20
# small enough that the calls fill up (a 14 MiB chunk leaves at most 14 MiB of a call unused)
CHUNK_BYTES = 14 << 20
# xz -9 with two threads: blocks of 3 x 64 MiB, so the 16-core node unpacks them in parallel
XZ = ["xz", "-9", "-T2", "-c"]


@dataclass(frozen=True)
class Overlay:
    name: str
    # the environment it belongs to: one python on the node runs with all of its env's overlays that came
    env: str
    lock: str
    # fnmatch pattern over the lock's (canonical) names -> why it stays behind
    left_out: dict[str, str]
    # when given, only these pins of the lock travel (an overlay split off another for one check)
    only: tuple[str, ...] = ()
    # fnmatch pattern over paths in the installed folder -> why it is deleted
    trimmed: dict[str, str] = field(default_factory=dict)
    # imported on the node right after unpacking, before any GPU work: a missing module fails in seconds
    probe: tuple[str, ...] = ()
    # where the checks' code enters the overlay: benches/gpu/imports.py follows the imports from these (and
    # from the probe) at build time, and a package they reach that nothing holds stops the build
    entry: tuple[str, ...] = ()


# packages of the GPU node's image that an overlay takes from there: torch 2.11.0+cu130
# is the train lock's pin, and the rest are the CUDA libraries and numeric packages that torch and the
# node's scipy/pandas were built with; carrying the lock's copies would shadow them with other builds
NODE_IMAGE = (
    "torch", "torchaudio", "torchvision", "triton", "cuda-bindings", "cuda-core", "cuda-pathfinder",
    "cuda-toolkit", "nvidia-cublas", "nvidia-cuda-cupti", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime",
    "nvidia-cudnn-cu13", "nvidia-cufft", "nvidia-cufile", "nvidia-curand", "nvidia-cusolver", "nvidia-cusparse",
    "nvidia-cusparselt-cu13", "nvidia-ml-py", "nvidia-nccl-cu13", "nvidia-nvjitlink", "nvidia-nvshmem-cu13",
    "nvidia-nvtx", "cupy-cuda13x", "numpy", "pandas", "pyarrow", "scipy", "opencv-python-headless", "pillow",
    "sympy", "mpmath",
)
ON_THE_NODE = ("the node's image has it; the smoke ran on the node's torch, CUDA libraries, numpy, pandas and "
               "pyarrow (benches/gpu/smoke_tiny.md)")
TESTS_ONLY = "the test tools: no test runs on the node"
# the import names of NODE_IMAGE's packages, which the import check counts as there
NODE_IMPORTS = frozenset({
    "torch", "torchvision", "torchaudio", "torchgen", "functorch", "triton", "cuda", "nvidia", "pynvml", "cupy",
    "cupyx", "cupy_backends", "numpy", "pandas", "pyarrow", "scipy", "PIL", "cv2", "sympy", "mpmath"})


def on_the_node(lock: str) -> dict[str, str]:
    return {name: ON_THE_NODE for name in NODE_IMAGE if name in read_lock(ROOT / lock)}


TRAIN = Overlay(
    name="train",
    env="train",
    lock="envs/lock/train-gpu.txt",
    left_out={
        **on_the_node("envs/lock/train-gpu.txt"),
        "cuda-python": "a meta package over cuda-bindings and cuda-core (the node's) for the CuTe DSL, left out below",
        "flashinfer-*": "the plan sets VLLM_USE_FLASHINFER_SAMPLER=0 (src/plan/sampler.py) and the attention "
                        "backend is FA3: vllm imports flashinfer only for those (smoke_tiny.md)",
        "cuda-tile": "flashinfer's, left out above",
        "nvidia-cutlass-dsl*": "FA4 / CuTe-DSL kernels for Blackwell; Hopper runs FA3",
        "quack-kernels": "CuTe-DSL kernels (vllm imports them only for Blackwell paths)",
        "tokenspeed-*": "MLA kernels (DeepSeek attention); the tiny policy is Qwen2",
        "tilelang": "DeepSeek-V3.2 sparse-attention kernels; the tiny policy is Qwen2",
        "z3-solver": "tilelang's, left out above",
        "torch-c-dlpack-ext": "quack-kernels' and tilelang's, left out above",
        "humming-kernels": "quantised-GEMM kernels; the checks run bf16",
        "pyelftools": "humming-kernels', left out above",
        "nvidia-cuda-cccl": "CUDA compiler parts for cuda-tile and humming-kernels, left out above",
        "nvidia-cuda-crt": "CUDA compiler parts for cuda-tile and humming-kernels, left out above",
        "nvidia-cuda-nvcc": "CUDA compiler parts for cuda-tile and humming-kernels, left out above",
        "nvidia-cuda-tileiras": "CUDA compiler parts for cuda-tile and humming-kernels, left out above",
        "nvidia-nvvm": "CUDA compiler parts for cuda-tile and humming-kernels, left out above",
        "numba": "vllm imports numba only for n-gram speculative decoding, which the checks do not use",
        "llvmlite": "numba's, left out above",
        "av": "video decoding for qwen-vl-utils (multimodal data); the checks are text only",
        "torchcodec": "video decoding (multimodal data); the checks are text only",
        "qwen-vl-utils": "multimodal data; the checks are text only",
        "wandb": "the GPU checks log to the console and verl's metrics file (logger=console)",
        "cwevals": "wandb's, left out above",
        "sentry-sdk": "wandb's, left out above",
        "tensorboard*": "not a logger the checks use",
        "py-spy": "a profiler binary nothing imports",
        "pytest*": TESTS_ONLY, "hypothesis": TESTS_ONLY, "execnet": TESTS_ONLY, "iniconfig": TESTS_ONLY,
        "pluggy": TESTS_ONLY,
        "mecab-python3": "sacrebleu's ja-mecab tokenizer, loaded only for Japanese targets; the checks are zh-en",
        "ipadic": "mecab-python3's dictionary, left out above",
    },
    trimmed={
        "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": "FlashAttention 2: Hopper (sm_90) takes FA3",
        "vllm/_moe_C_stable_libtorch.abi3.so": "MoE kernels: the tiny policy is dense (vllm warns and goes on)",
        "vllm/vllm-rs": "the Rust front end, used only with VLLM_USE_RUST_FRONTEND (vllm/envs.py)",
        "vllm/third_party/deep_gemm": "DeepGEMM (FP8 GEMMs of DeepSeek models)",
        "vllm/third_party/fmha_sm100": "Blackwell (sm_100) attention",
        "ray/jars": "Ray's Java workers",
        "ray/rllib": "Ray's RL library; verl uses Ray core",
        "ray/dashboard/client/build/static/js/*.map": "the dashboard's JavaScript source maps",
        "xgrammar/lib": "xgrammar's C++ static library, for linking against it; Python loads libxgrammar_bindings.so",
        "mistral_common/data": "Mistral's tokenizer files, read only for Mistral models",
        "pycountry/locales": "translations of country names; pydantic-extra-types needs only the codes",
        "tests": "verl's and transferqueue's wheels install their test suites as a top-level `tests` package, "
                 "which would shadow this repo's tests/",
        "bin": "console scripts written for this machine's python path; the node runs modules with python -m",
    },
    probe=("vllm", "verl", "ray", "transformers", "xgrammar", "llguidance", "verl.trainer.main_ppo"),
    entry=("vllm.entrypoints.llm", "vllm.entrypoints.openai.api_server", "vllm.v1.engine.core",
           "vllm.v1.engine.async_llm", "vllm.v1.worker.gpu_worker", "vllm.v1.worker.gpu_model_runner",
           "vllm.model_executor.models.qwen2", "vllm.v1.attention.backends.flash_attn",
           "verl.workers.engine_workers", "verl.experimental.agent_loop", "verl.workers.rollout.vllm_rollout",
           "transformers.models.qwen2.modeling_qwen2", "src.launch", "src.trainer", "src.rewards",
           "src.report", "src.pipeline.run"),
)

JA_SEGMENTER = ("fugashi", "unidic-lite")

SCORER = Overlay(
    name="scorer",
    env="scorer",
    lock="envs/lock/scorer-gpu.txt",
    left_out={
        # the scorer lock's torch 2.13.0 is PyPI's CUDA 13 build; the scorer ran on the node's 2.11.0
        **on_the_node("envs/lock/scorer-gpu.txt"),
        "numpy": "the lock's numpy 1.26.4 did not import beside the node's scipy and pandas; the scorer ran on "
                 "the node's numpy 2.5.2 (benches/gpu/README.md)",
        "pytest*": TESTS_ONLY, "execnet": TESTS_ONLY, "iniconfig": TESTS_ONLY, "pluggy": TESTS_ONLY,
        **{name: "in the scorer-ja overlay (250 MB of dictionary): only the span models' warm-up on a Japanese "
                 "segment needs it (src/scorer/backends/comet/words.py), and the smoke's CometKiwi has no spans"
           for name in JA_SEGMENTER},
    },
    trimmed={
        "bin": "console scripts written for this machine's python path; the node runs modules with python -m",
    },
    probe=("comet", "transformers", "sacrebleu", "jieba"),
    entry=("comet.models", "transformers.models.xlm_roberta.modeling_xlm_roberta", "src.scorer.serve"),
)

SCORER_JA = Overlay(
    name="scorer-ja",
    env="scorer",
    lock="envs/lock/scorer-gpu.txt",
    left_out={},
    only=JA_SEGMENTER,
    probe=("fugashi", "unidic_lite"),
)

OVERLAYS = {o.name: o for o in (TRAIN, SCORER, SCORER_JA)}
# the overlays each check's commands run in: check.py's table, which the node reads too
CHECK_OVERLAYS = {check: overlays for check, (overlays, _, _) in CHECKS.items()}


def carried(overlay: Overlay) -> tuple[dict[str, str], dict[str, str]]:
    """(pins carried, pin -> why left out) of the overlay's lock."""
    pins = read_lock(ROOT / overlay.lock)
    keep, out = {}, {}
    for name, version in pins.items():
        rule = next((p for p in overlay.left_out if fnmatch.fnmatchcase(name, p)), None)
        if overlay.only and name not in overlay.only:
            out[name] = f"the {overlay.env} overlay's"
        elif rule is None:
            keep[name] = version
        else:
            out[name] = overlay.left_out[rule]
    return keep, out


def stale_rules(overlay: Overlay) -> list[str]:
    """left_out patterns that match no pin of the lock."""
    names = list(read_lock(ROOT / overlay.lock))
    return [p for p in (*overlay.left_out, *overlay.only) if not any(fnmatch.fnmatchcase(n, p) for n in names)]


def check_rules(overlay: Overlay) -> None:
    stale = stale_rules(overlay)
    if stale:
        raise SystemExit(f"error: left_out rules of overlay {overlay.name} match no pin of {overlay.lock}: "
                         f"{', '.join(stale)}; update OVERLAYS in {Path(__file__).relative_to(ROOT)}")


def trim(site: Path, overlay: Overlay) -> dict[str, int]:
    """Delete the trimmed paths of an installed overlay; pattern -> bytes freed. Raises on a stale pattern."""
    freed = {}
    for pattern, _why in overlay.trimmed.items():
        hits = sorted(p for p in site.glob(pattern))
        if not hits:
            raise SystemExit(f"error: the trim rule {pattern!r} of overlay {overlay.name} matches nothing in its "
                             f"install: the lock changed; update OVERLAYS in {Path(__file__).relative_to(ROOT)}")
        total = 0
        for hit in hits:
            if hit.is_dir() and not hit.is_symlink():
                total += folder_bytes(hit)
                shutil.rmtree(hit)
            else:
                total += hit.stat().st_size
                hit.unlink()
        freed[pattern] = total
    return freed


def strip_debug(site: Path) -> int:
    """`strip --strip-debug` every ELF file: the DWARF sections only, which nothing loads at run time (no
    code, no symbol the dynamic linker or dlsym reads, no CUDA fatbin). Bytes freed: xgrammar's bindings
    and fasttext carry 50 and 16 MB of it."""
    freed = 0
    for path in sorted(site.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                continue
        before = path.stat().st_size
        subprocess.run(["strip", "--strip-debug", str(path)], check=True)
        freed += before - path.stat().st_size
    return freed


def check_imports(overlay: Overlay, gpu_dir: Path = GPU_DIR) -> dict:
    """benches/gpu/imports.py over the built overlay, with the env's overlays built before it and src/:
    a package the checks import at start-up that nothing on the node holds stops the build, named with
    the chain of imports that reaches it."""
    env = [o.name for o in OVERLAYS.values() if o.env == overlay.env]
    folders = [gpu_dir / "build" / name for name in env[: env.index(overlay.name) + 1]] + [ROOT / "src"]
    found = reach([*overlay.probe, *overlay.entry], folders, set(NODE_IMPORTS))
    if found.missing:
        lines = [f"  {top}: {' -> '.join(chain)}" for top, chain in sorted(found.missing.items())]
        raise SystemExit(f"error: overlay {overlay.name}: the checks import packages that nothing on the node "
                         f"holds (left out, or trimmed); carry them or change the rule:\n" + "\n".join(lines))
    return {"modules_followed": found.modules, "files_not_parsed": len(found.unparsed)}


def pack(site: Path, dest: Path, name: str, chunk_bytes: int = CHUNK_BYTES) -> list[dict]:
    """tar | xz the folder `site` and cut the stream into chunks `name`.tar.xz.NN in dest.

    check.py joins the chunks in order and unpacks them with `xz -d | tar -x`; one stream compresses
    better than one per chunk, and a chunk is useless alone anyway (the install needs all of them)."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob(f"{name}.tar.xz.*"):
        old.unlink()
    tar = subprocess.Popen(["tar", "-C", str(site), "--owner=0", "--group=0", "--sort=name", "-cf", "-", "."],
                           stdout=subprocess.PIPE)
    xz = subprocess.Popen(XZ, stdin=tar.stdout, stdout=subprocess.PIPE)
    tar.stdout.close()
    chunks, index = [], 0
    while True:
        data = xz.stdout.read(chunk_bytes)
        if not data:
            break
        path = dest / f"{name}.tar.xz.{index:02d}"
        path.write_bytes(data)
        chunks.append({"file": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        index += 1
    if xz.wait() != 0 or tar.wait() != 0:
        raise SystemExit(f"error: packing {site} failed (tar exit {tar.returncode}, xz exit {xz.returncode})")
    return chunks


def folder_bytes(site: Path) -> int:
    return sum(f.stat().st_size for f in site.rglob("*") if f.is_file() and not f.is_symlink())


def install(wheels: Path, site: Path) -> None:
    """pip install --target for the node's python and platform, from the wheels alone, no compiling."""
    arch, glibc = lock_platform("gpu")
    target = [a for tag in platform_tags(glibc, arch) for a in ("--platform", tag)]
    if site.exists():
        shutil.rmtree(site)
    cmd = pip("install", "--no-deps", "--no-index", "--no-compile", "--only-binary=:all:", "--target", str(site),
              "--python-version", NODE_PYTHON, "--implementation", "cp", *target,
              *sorted(str(w) for w in wheels.glob("*.whl")))
    print("+ pip install --target", site, f"({len(list(wheels.glob('*.whl')))} wheels)", flush=True)
    subprocess.run(cmd, check=True)


def build(overlay: Overlay, gpu_dir: Path = GPU_DIR) -> dict:
    check_rules(overlay)
    keep, out = carried(overlay)
    wheels = gpu_dir / "wheels" / overlay.name
    site = gpu_dir / "build" / overlay.name
    with tempfile.TemporaryDirectory(prefix=f"overlay-{overlay.name}-") as tmp:
        lock = Path(tmp) / "carried.txt"
        lock.write_text("".join(f"{n}=={v}\n" for n, v in sorted(keep.items())))
        if wheels.exists():
            shutil.rmtree(wheels)
        build_wheelhouse([lock], wheels, "gpu", NODE_PYTHON, [])
    # uv's own wheel comes with every wheelhouse (envs/uv.sh installs it on a node); not here
    for uv in wheels.glob("uv-*.whl"):
        uv.unlink()
    install(wheels, site)
    installed = folder_bytes(site)
    freed = trim(site, overlay) if overlay.trimmed else {}
    freed["debug info of ELF files (strip --strip-debug)"] = strip_debug(site)
    followed = check_imports(overlay, gpu_dir)
    chunks = pack(site, gpu_dir / "parts", overlay.name)
    return {"env": overlay.env, "lock": overlay.lock, "python": NODE_PYTHON, "pins_carried": len(keep),
            "pins_left_out": len(out), "installed_bytes": installed, "trimmed_bytes": freed,
            "unpacked_bytes": folder_bytes(site), "xz_bytes": sum(c["bytes"] for c in chunks), "chunks": chunks,
            "probe": list(overlay.probe), "import_check": followed}


def tree_bytes(root: Path = ROOT) -> int:
    """What a call to the node sends besides the chunks: tracked and untracked-not-ignored files."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True).stdout.split(b"\0")
    return sum((root / n.decode()).stat().st_size for n in listed if n and (root / n.decode()).is_file())


def plan_calls(check: str, manifest: dict, tree: int, gpu_dir: Path = GPU_DIR) -> list[dict]:
    """The calls to the node that bring CHECK's chunks, in order: each sends the manifest and as many chunks
    as fit in the call's limit; the last one also runs the check (benches/gpu/check.py run CHECK)."""
    room = CALL_LIMIT_BYTES - tree - CALL_MARGIN_BYTES - len(json.dumps(manifest))
    calls: list[dict] = []
    current: list[dict] = []
    for name in CHECK_OVERLAYS[check]:
        if name not in manifest["overlays"]:
            raise SystemExit(f"error: overlay {name} (needed by check {check}) is not in {gpu_dir / MANIFEST}: "
                             f"run `python benches/gpu/overlays.py build {name}`")
        for chunk in manifest["overlays"][name]["chunks"]:
            if chunk["bytes"] > room:
                raise SystemExit(f"error: chunk {chunk['file']} ({chunk['bytes'] >> 20} MiB) does not fit a call "
                                 f"beside the working tree ({tree >> 20} MiB)")
            if current and (sum(c["bytes"] for c in current) + chunk["bytes"] > room
                            or len(current) + 1 > CALL_PATHS - 1):
                calls.append(current)
                current = []
            current.append(chunk)
    calls.append(current)
    out = []
    for i, chunks in enumerate(calls, 1):
        last = i == len(calls)
        out.append({"call": i, "send": [f".gpu/{MANIFEST}"] + [f".gpu/parts/{c['file']}" for c in chunks],
                    "mib": round((sum(c["bytes"] for c in chunks) + tree) / 2 ** 20, 1),
                    "command": f"python3 benches/gpu/check.py {'run ' + check if last else 'receive'}"})
    return out


def read_manifest(gpu_dir: Path = GPU_DIR) -> dict:
    path = gpu_dir / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {"overlays": {}}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("list", "build"):
        p = sub.add_parser(name)
        p.add_argument("overlays", nargs="*", metavar="OVERLAY", help=f"of {', '.join(OVERLAYS)} (default: all)")
    p = sub.add_parser("pack", help="pack an installed folder as overlay NAME into --gpu-dir (build does this)")
    p.add_argument("name")
    p.add_argument("site", type=Path)
    p.add_argument("--gpu-dir", type=Path, default=GPU_DIR)
    p.add_argument("--chunk-bytes", type=int, default=CHUNK_BYTES)
    p.add_argument("--probe", nargs="*", default=[], help="modules check.py imports after unpacking")
    p.add_argument("--env", help="the environment it belongs to (default: a known overlay's, else NAME)")
    p = sub.add_parser("calls")
    p.add_argument("check", choices=sorted(CHECK_OVERLAYS))
    p.add_argument("--gpu-dir", type=Path, default=GPU_DIR)
    args = parser.parse_args(argv)
    unknown = [o for o in getattr(args, "overlays", []) if o not in OVERLAYS]
    if unknown:
        print(f"error: no overlay {', '.join(unknown)}; the overlays are {', '.join(OVERLAYS)}", file=sys.stderr)
        return 2
    if args.command == "list":
        for name in args.overlays or OVERLAYS:
            overlay = OVERLAYS[name]
            check_rules(overlay)
            keep, out = carried(overlay)
            print(f"overlay {name} ({overlay.lock}, python {NODE_PYTHON}): {len(keep)} pins carried, "
                  f"{len(out)} left out")
            print("  carried: " + " ".join(f"{n}=={v}" for n, v in sorted(keep.items())))
            for pin, why in sorted(out.items()):
                print(f"  left out {pin}: {why}")
            for pattern, why in overlay.trimmed.items():
                print(f"  trimmed {pattern}: {why}")
        return 0
    if args.command == "pack":
        manifest = read_manifest(args.gpu_dir)
        chunks = pack(args.site, args.gpu_dir / "parts", args.name, args.chunk_bytes)
        env = args.env or (OVERLAYS[args.name].env if args.name in OVERLAYS else args.name)
        manifest["overlays"][args.name] = {"env": env, "unpacked_bytes": folder_bytes(args.site), "chunks": chunks,
                                           "xz_bytes": sum(c["bytes"] for c in chunks), "probe": args.probe}
        (args.gpu_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"overlay {args.name}: {len(chunks)} chunks in {args.gpu_dir / 'parts'}")
        return 0
    if args.command == "calls":
        manifest = read_manifest(args.gpu_dir)
        for call in plan_calls(args.check, manifest, tree_bytes(), args.gpu_dir):
            print(json.dumps(call))
        return 0
    manifest = read_manifest()
    for name in args.overlays or OVERLAYS:
        manifest["overlays"][name] = build(OVERLAYS[name])
        # written after each overlay, so a failed second build keeps the first one's record
        (GPU_DIR / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        o = manifest["overlays"][name]
        print(f"overlay {name}: {o['pins_carried']} pins, {o['installed_bytes'] >> 20} MiB installed, "
              f"{o['unpacked_bytes'] >> 20} MiB after trimming, {o['xz_bytes'] / 2 ** 20:.1f} MiB xz in "
              f"{len(o['chunks'])} chunks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

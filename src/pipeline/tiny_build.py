"""What experiment=smoke_tiny and experiment=learn_tiny run on, built at launch (a model with `model.build_dir`).

`prepare` is called by the launcher after the plan and verl's validation (a refused config builds
nothing) and before the first check that reads the files (the data checks and preflight; a dry run
builds nothing: the plan reads shapes and paths from config, never the files). Each part is built once
and reused when its marker says it is complete:
- the tiny policy (`python -m src.tiny_models policy`, train env);
- the tiny QE checkpoints (`python -m src.tiny_models qe`, in the scorer env: unbabel-comet), when the
  run calls a QE model;
- with data=synth_zh_en (both experiments; synth_terms_zh_en: its terminology variant, experiment=
  learn_terms_tiny): the synthetic task (`python -m src.tiny_models task`), its train/val/teaching parquet
  files (`python -m src.data.prepare`, with the tiny tokenizer) and the taught policy (`python -m
  src.tiny_models teach`: the base policy taught the task on its teaching prompts) at `model.path`. Other data is the user's own, prepared beforehand.
Each runs as its own process: the builders need the other environment or torch, which the launcher
never imports. One launch at a time builds in one build dir (an flock on a lock file): the jobs of a sweep, or two
launches sharing `model.build_dir`, would otherwise build the same tree at once; the second waits, then reuses.
The lock file lies beside the build dir, not in it: a build refused before it wrote anything leaves no build dir.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple

from src.config import CODE_ROOT

from .errors import RunError

QE_DIR = "qe"  # under model.build_dir; conf/scorer/tiny.yaml names the checkpoints in it
BASE_POLICY = "policy"  # under model.build_dir: the untaught policy the taught one starts from
class Task(NamedTuple):
    label: str  # the experiment its build lines name
    dir: str  # its TSV files, under model.build_dir
    task_flags: tuple[str, ...]  # `python -m src.tiny_models task`'s
    teach_flags: tuple[str, ...]  # `python -m src.tiny_models teach`'s


# data.name of the synthetic task's prompts (conf/data/synth_*.yaml) -> its Task: the task (experiment=learn_tiny,
# smoke_tiny) and its terminology variant (experiment=learn_terms_tiny, src/tiny_models/task.py write_terms), taught
# longer: at the teacher's 80 steps a third of its sampled held-out answers kept the format, and most of those
# wrote the colour of neither the corpus nor the client, which left GRPO too few answers to
# rank (benches/RESULTS.md "The term reward trains")
TASKS = {"synth_zh_en": Task("learn_tiny", "learn/task", (), ()),
         "synth_terms_zh_en": Task("learn_terms_tiny", "learn_terms/task", ("--terms",), ("--steps", "240"))}
TEACH_PARQUET = "teach.parquet"  # beside data.train_files
MARKER = "tiny_build.json"  # src/tiny_models/atomic.py writes it last into a complete tree
LOCK_SUFFIX = ".lock"  # <parent>/.<build dir name>.lock: held (flock) by the launch building there
BUILD_TIMEOUT_S = 1800
# policy build flags <- the model group's shape keys (src/tiny_models/policy.py PolicySpec)
POLICY_SHAPE = {"num_layers": "--num-layers", "hidden_size": "--hidden-size",
                "intermediate_size": "--intermediate-size", "num_attention_heads": "--num-attention-heads",
                "num_kv_heads": "--num-kv-heads", "vocab_size": "--vocab-size"}
BLOCK_SIZE_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.block_size"


def _task(composed: dict) -> bool:
    """The synthetic task's data (experiment=smoke_tiny and learn_tiny, with or without its verdict): the task,
    its prompts and the taught policy are built. Not learn.enable: a run of the task with the verdict off (the
    smoke, the loop's reward-path tests) must still train the taught policy, never a fresh one built where
    model.path points."""
    return composed["data"]["name"] in TASKS


def _what(composed: dict) -> str:
    return "smoke_tiny" if composed.get("smoke") else TASKS.get(composed["data"]["name"], TASKS["synth_zh_en"]).label


def _run_step(what: str, args: list[str], environ: dict) -> str:
    """One build step as its own process (cwd: the code, so `-m src...` finds it; offline). Returns the
    line before its last (the builders print their status there and the tree's path last). RunError
    with the step's last error line when it fails."""
    env = dict(environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    try:
        proc = subprocess.run(args, cwd=CODE_ROOT, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunError(f"building the {what} failed ({exc}); command: {' '.join(args)}") from None
    if proc.returncode != 0:
        lines = [l for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
        last = next((l for l in reversed(lines) if l.startswith("error")), lines[-1] if lines else "no output")
        raise RunError(f"building the {what} failed: {last.strip()[:400]} (command: {' '.join(args)})")
    out = [l for l in proc.stdout.splitlines() if l.strip()]
    return out[-2] if len(out) > 1 else (out[-1] if out else "")


def _marker(path: Path) -> dict | None:
    try:
        return json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _prompts(composed: dict, policy: Path, environ: dict) -> str:
    """Train/val/teaching parquet through src.data.prepare, with the tiny tokenizer, from the task's zh->en
    files as they are (task.py splits them); rebuilt when the pairs, the template, the prompt limit or the
    tokenizer change."""
    data = composed["data"]
    train, val = Path(data["train_files"]), Path(data["val_files"])
    task = Path(composed["model"]["build_dir"]) / TASKS[data["name"]].dir
    sources = {"teach": task / "teach.tsv", "train": task / "train.tsv", "val": task / "val.tsv"}
    key = {"tsv": {k: _sha(v) for k, v in sources.items()}, "template": data["template"],
           "max_prompt_tokens": data["max_prompt_length"], "tokenizer": _marker(policy),
           "files": [str(train), str(val)]}
    if _marker(train.parent) == key and train.is_file() and val.is_file():
        return "reused"
    (train.parent / MARKER).unlink(missing_ok=True)
    outs = {"train": train, "val": val, "teach": train.with_name(TEACH_PARQUET)}
    for what, tsv in sources.items():
        args = [sys.executable, "-m", "src.data.prepare", "--input", str(tsv), "--name", data["name"],
                "--template", data["template"], "--tokenizer", str(policy),
                "--max-prompt-tokens", str(data["max_prompt_length"]),
                "--split", "val" if what == "val" else "train", "--out", str(outs[what]), "--overwrite"]
        _run_step(f"{what} prompts", args, environ)
    (train.parent / MARKER).write_text(json.dumps(key, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return "built"


def _steps(plan, composed: dict, environ: dict) -> list[tuple[str, Path, Callable[[], str]]]:
    model = composed["model"]
    build_dir = Path(model["build_dir"])
    task = _task(composed)
    policy = build_dir / BASE_POLICY if task else Path(model["path"])
    block = (plan.verl_passthrough or {}).get(BLOCK_SIZE_KEY, 16)
    max_positions = max(4096, plan.max_prompt_length + plan.max_response_length)
    train_files = Path(composed["data"]["train_files"])
    py = sys.executable
    steps = [("tiny policy", policy, lambda: _run_step(
        "tiny policy", [py, "-m", "src.tiny_models", "policy", str(policy),
                        *[a for k, flag in POLICY_SHAPE.items() for a in (flag, str(model[k]))],
                        "--max-position-embeddings", str(max_positions), "--block-size", str(block)], environ))]
    if plan.scorer_models:
        steps.append(("tiny QE checkpoints", build_dir / QE_DIR, lambda: _run_step(
            "tiny QE checkpoints (scorer env)", [composed["scorer"]["python"], "-m", "src.tiny_models", "qe",
                                                 str(build_dir / QE_DIR)], environ)))
    if not task:
        return steps  # the data is the user's own
    kind = TASKS[composed["data"]["name"]]
    steps.append(("task", build_dir / kind.dir, lambda: _run_step(
        "synthetic task", [py, "-m", "src.tiny_models", "task", str(build_dir / kind.dir), *kind.task_flags], environ)))
    steps.append(("prompts", train_files.parent, lambda: _prompts(composed, policy, environ)))
    # model.path may name the untaught policy itself (a run that needs answers that all break the format)
    if Path(model["path"]) != policy:
        steps.append(("taught policy", Path(model["path"]), lambda: _run_step(
            "taught policy", [py, "-m", "src.tiny_models", "teach", str(policy), model["path"],
                              "--data", str(train_files.with_name(TEACH_PARQUET)), *kind.teach_flags], environ)))
    return steps


def prepare(plan, composed: dict, environ: dict | None = None) -> None:
    """Build (or reuse) what a model with `model.build_dir` runs on; nothing for a real model. RunError
    (one line) when a build fails."""
    if not composed["model"].get("build_dir"):
        return
    environ = dict(os.environ if environ is None else environ)
    what = _what(composed)
    with one_builder(Path(composed["model"]["build_dir"]), what):
        for part, where, build in _steps(plan, composed, environ):
            t0 = time.perf_counter()
            try:
                said = build()
            except RunError as exc:
                raise RunError(f"{what}: {exc}", exc.code) from None
            status = "reused" if "reused" in said.split(":")[0] else "built"
            print(f"{what}: {part} {status} in {time.perf_counter() - t0:.0f} s: {where}", flush=True)


def lock_file(build_dir: Path) -> Path:
    return build_dir.parent / f".{build_dir.name}{LOCK_SUFFIX}"


@contextlib.contextmanager
def one_builder(build_dir: Path, what: str):
    """Holds the build dir's lock while the parts are built or checked. flock, not a pid file: the kernel releases
    it when the holder ends, however it ends (a killed launch leaves no stale lock behind), and it holds across
    the nodes of a shared file system that supports it (NFSv4, Lustre with flock)."""
    try:
        build_dir.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_file(build_dir), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise RunError(f"{what}: cannot build in model.build_dir={build_dir} ({exc.strerror or exc}); "
                       f"set model.build_dir= to a directory this user can write") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"{what}: another launch is building in {build_dir}; waiting for it, then reusing what it "
                  f"built", flush=True)
            t0 = time.perf_counter()
            fcntl.flock(fd, fcntl.LOCK_EX)
            print(f"{what}: waited {time.perf_counter() - t0:.0f} s for the other build", flush=True)
        yield
    finally:
        os.close(fd)

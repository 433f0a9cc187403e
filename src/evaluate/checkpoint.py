"""What `checkpoint=` points at, and the HF model directory vLLM loads from it.

verl 0.9.1 saves FSDP checkpoints as `<checkpoint dir>/global_step_N/actor/` with
`model_world_size_W_rank_R.pt` shards, `fsdp_config.json` (W) and `huggingface/` (config and
tokenizer; the full HF model too when `checkpoint.save_contents` includes `hf_model`), and writes
`latest_checkpointed_iteration.txt` into the checkpoint dir. Accepted, most specific first:

    an HF model dir        config.json + weights: used as is
    an actor dir           shards: merged with verl's own merger (below), or its huggingface/ if complete
    global_step_N          its actor/
    the checkpoint dir     global_step_<latest_checkpointed_iteration.txt>/actor

The merge is `python -m verl.model_merger merge --backend fsdp --local_dir <actor> --target_dir <tmp>`
run as a subprocess (verl's CLI is its stable interface; the merger loads every shard into CPU
memory, and a subprocess gives that memory back before vLLM starts), into a temp dir renamed into
place, so an interrupted merge never looks like a finished one and a finished one is reused. A LoRA run's
checkpoint comes out of verl's merger as the base weights and the adapter beside them: the adapter is merged
into the weights before the rename (src/evaluate/lora_merge.py).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from src.data.safe_write import os_reason, publish_dir

from . import lora_merge
from .options import UsageError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
SHARD_RE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
LATEST_FILE = "latest_checkpointed_iteration.txt"
MERGED_DIRNAME = "merged_hf"


class MergeError(RuntimeError):
    pass


@dataclass(frozen=True)
class ResolvedCheckpoint:
    kind: str                  # "hf" | "fsdp"
    path: Path                 # the HF dir (hf) or the actor dir (fsdp)
    world_size: int | None = None


def is_hf_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and any((path / name).is_file() and (path / name).stat().st_size > 0
                                                    for name in WEIGHT_FILES)


def _shards(actor: Path) -> dict[int, set[int]]:
    found: dict[int, set[int]] = {}
    for f in actor.iterdir():
        m = SHARD_RE.match(f.name)
        if m:
            found.setdefault(int(m[1]), set()).add(int(m[2]))
    return found


def _fsdp_actor(actor: Path) -> ResolvedCheckpoint:
    shards = _shards(actor)
    config = actor / "fsdp_config.json"
    try:
        world = int(json.loads(config.read_text())["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"checkpoint: {config} is missing or has no world_size (verl writes it with the shards)") \
            from None
    missing = sorted(set(range(world)) - shards.get(world, set()))
    if missing:
        raise UsageError(f"checkpoint: {actor} lacks model_world_size_{world}_rank_R.pt for R in "
                         f"{missing[:8]} (fsdp_config.json says world_size {world}); an incomplete copy?")
    if not (actor / "huggingface" / "config.json").is_file():
        raise UsageError(f"checkpoint: {actor}/huggingface/config.json is missing (verl saves the model config "
                         f"and tokenizer there; the merger needs them)")
    return ResolvedCheckpoint("fsdp", actor, world)


def resolve_checkpoint(checkpoint: str | Path) -> ResolvedCheckpoint:
    path = Path(checkpoint)
    if not path.exists():
        raise UsageError(f"checkpoint: no such path: {path}")
    if not path.is_dir():
        raise UsageError(f"checkpoint: {path} is not a directory (an HF model dir or verl's global_step_N/actor)")
    if is_hf_model_dir(path):
        return ResolvedCheckpoint("hf", path)
    if (path / LATEST_FILE).is_file():
        step = (path / LATEST_FILE).read_text().strip()
        path = path / f"global_step_{step}"
        if not path.is_dir():
            raise UsageError(f"checkpoint: {LATEST_FILE} names step {step} but {path} does not exist")
    if (path / "actor").is_dir():
        path = path / "actor"
    if _shards(path) or (path / "fsdp_config.json").exists():
        hf = path / "huggingface"
        if is_hf_model_dir(hf):  # saved with checkpoint.save_contents including hf_model: nothing to merge
            return ResolvedCheckpoint("hf", hf)
        return _fsdp_actor(path)
    raise UsageError(f"checkpoint: {checkpoint} is neither an HF model dir (config.json + weights) nor a verl "
                     f"checkpoint (global_step_N/actor with model_world_size_*_rank_*.pt)")


def merge_command(actor: Path, target: Path, python: str = sys.executable) -> list[str]:
    """verl 0.9.1's FSDP merger (verl/model_merger/__main__.py) for one actor dir."""
    return [python, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor),
            "--target_dir", str(target)]


def merged_dir_for(resolved: ResolvedCheckpoint, merged_dir: str | None) -> Path:
    return Path(merged_dir) if merged_dir else resolved.path / MERGED_DIRNAME


def merge_target_problem(resolved: ResolvedCheckpoint, merged_dir: str | None,
                         option: str = "merged_dir") -> str | None:
    """Why the merge could not be written (checked before anything runs), or None: the target is a
    finished merge (reused), or new in a writable dir. An existing dir that is not a finished merge is
    not ours to replace (`merged_dir=~/thesis` must not delete the thesis). `option`: what the command
    calls the target dir, for the message."""
    from src.data.safe_write import writable_dir_problem

    if resolved.kind == "hf":
        return None
    target = merged_dir_for(resolved, merged_dir)
    if is_hf_model_dir(target):
        return None
    if target.exists() or target.is_symlink():
        return (f"{option}: {target} exists but is not a finished merge (config.json + weights); evaluate "
                f"never replaces it: remove it yourself or give another {option}=")
    problem = writable_dir_problem(target.parent)
    return f"{option}: cannot create {target}: {problem} (give {option}= elsewhere)" if problem else None


def hf_model_dir(resolved: ResolvedCheckpoint, merged_dir: str | None = None, log=print) -> Path:
    """The HF dir to generate with: the checkpoint itself, an earlier merge, or a fresh merge."""
    if resolved.kind == "hf":
        return resolved.path
    target = merged_dir_for(resolved, merged_dir)
    if is_hf_model_dir(target):
        log(f"using the merged model in {target}")
        return target
    problem = merge_target_problem(resolved, merged_dir)  # checked up front too; here for other callers
    if problem:
        raise MergeError(problem)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".merging", dir=target.parent))
    command = merge_command(resolved.path, tmp)
    log(f"merging {resolved.world_size} FSDP shards: {' '.join(command)}")
    try:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0 or not is_hf_model_dir(tmp):
            tail = " | ".join(l for l in done.stderr.strip().splitlines()[-3:]) or "no output"
            raise MergeError(f"verl's model merger failed (exit {done.returncode}) on {resolved.path}: {tail}")
        if (tmp / lora_merge.ADAPTER_DIR).is_dir():
            # a LoRA run's checkpoint: verl's merger left the adapter beside the base weights
            log(f"merging the LoRA adapter into the base weights: python -m src.evaluate.lora_merge {tmp}")
            done = subprocess.run([sys.executable, "-m", "src.evaluate.lora_merge", str(tmp)], capture_output=True,
                                  text=True)
            if done.returncode != 0 or (tmp / lora_merge.ADAPTER_DIR).exists() or not is_hf_model_dir(tmp):
                tail = " | ".join(l for l in done.stderr.strip().splitlines()[-3:]) or "no output"
                raise MergeError(f"merging the LoRA adapter of {resolved.path} failed (exit {done.returncode}): "
                                 f"{tail}")
        try:
            # claimed with an exclusive mkdir: a dir that appeared meanwhile is never replaced
            publish_dir(tmp, target, unique=False)
        except FileExistsError:
            if not is_hf_model_dir(target):
                raise MergeError(f"merged_dir: {target} appeared during the merge and is not a finished merge; "
                                 f"left as it is") from None
    except OSError as exc:
        raise MergeError(f"cannot write the merged model to {target}: {os_reason(exc)}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target

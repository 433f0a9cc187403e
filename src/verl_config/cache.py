"""Two pure steps of a launch, remembered: verl's composed config and verl's verdict on it.

Why: of a 13 s dry run on a 2-core machine, 9 s are verl's validate_config importing torch,
tensordict and transformers (`python -X importtime`), and about 1 s is Hydra composing verl's
ppo_trainer files. Both are pure functions of their inputs, so each is keyed by all of them and
reused:
- composition: the override list + the installed verl (version and install path; its config
  files ship with it);
- verdict: the resolved verl config + the installed verl + our own check code (CHECK_CODE).
Only passes are stored: a refusal re-runs verl and prints verl's own reason every time. verl's
warnings on a pass (need_critic's "Disabled critic", its platform probe) are not shown by the
launcher, cached or not (src/verl_config/ppo_trainer.py validate says why).

    QE_RL_CACHE_DIR      where entries live (default: $XDG_CACHE_HOME/qe_rl or ~/.cache/qe_rl)
    QE_RL_VERL_CACHE=0   compose and validate with verl every time (e.g. while editing verl in
                         place: the key has verl's version and install path, not its file contents);
                         the run name's baseline (src/pipeline/baseline_cache.py) is computed every time too
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Optional

from omegaconf import DictConfig, OmegaConf

ENV_DIR = "QE_RL_CACHE_DIR"
ENV_SWITCH = "QE_RL_VERL_CACHE"
# bump when the stored format changes (2: no warnings stored)
FORMAT = 2
# our code that takes part in the verdict (src/verl_config/ppo_trainer.py validate): an edit to any of them
# must re-run verl. Paths relative to the code root.
CHECK_CODE = ("src/verl_config/ppo_trainer.py", "src/verl_config/checks.py", "src/verl_config/cache.py",
              "src/rewards/credit/launch.py", "src/rewards/credit/estimator.py", "src/rewards/normalise.py")
_ROOT = Path(__file__).resolve().parents[2]


def cache_dir(kind: str = "verl") -> Optional[Path]:
    """Where entries of `kind` live (verl's here; src/pipeline/baseline_cache.py keeps its own beside them);
    None when the cache is switched off."""
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "off", "false", "no"):
        return None
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR]) / kind
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "qe_rl" / kind


def verl_identity() -> str:
    """The installed verl as a key holds it: its version and where it is (its config files ship with it)."""
    spec = importlib.util.find_spec("verl")  # finds the package without importing it (torch)
    origin = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else "?"
    return f"verl {importlib.metadata.version('verl')} at {origin}"


def _hash(kind: str, *parts: bytes) -> str:
    h = hashlib.sha256(f"{kind} format {FORMAT}\n{verl_identity()}\n".encode())
    for part in parts:
        h.update(part + b"\0")
    return h.hexdigest()


def composition_key(override_list: list[str]) -> str:
    return _hash("composition", json.dumps(override_list).encode())


# what stands for the run's checkpoint dir in a verdict's key
CHECKPOINT_DIR = "<checkpoint dir>"


def verdict_key(cfg: DictConfig) -> str:
    code = [rel.encode() + b"\0" + (_ROOT / rel).read_bytes() for rel in CHECK_CODE]
    # resolved, so an interpolation that would resolve differently is a different config
    resolved = OmegaConf.to_container(cfg, resolve=True)
    body = json.dumps(resolved, sort_keys=True, default=str)
    # The checkpoint dir, and the output paths the plan puts under it (profiler, validation generations), differ
    # for every launch of the same config (the smoke's and learn_tiny's carry the launch time), so no launch
    # found the verdict of the one before. Neither verl's validate_config (verl/utils/config.py) nor our checks
    # read those paths: the key holds a placeholder for them.
    ckpt = (resolved.get("trainer") or {}).get("default_local_dir")
    if isinstance(ckpt, str) and ckpt:
        body = body.replace(json.dumps(ckpt)[1:-1], CHECKPOINT_DIR)
    return _hash("verdict", *code, body.encode())


def composed(override_list: list[str], compose: Callable[[list[str]], DictConfig]) -> DictConfig:
    """verl's composed config for these overrides: from the cache, or `compose` and store it.
    Stored unresolved (interpolations as verl wrote them), as JSON (a YAML parse of verl's config
    costs more than composing it), and read back in struct mode, as Hydra returns it."""
    path = entry(composition_key(override_list))
    body = read_entry(path)
    if body is not None and isinstance(body.get("config"), dict):
        cfg = OmegaConf.create(body["config"])
        OmegaConf.set_struct(cfg, True)
        return cfg
    cfg = compose(override_list)
    store_entry(path, {"format": FORMAT, "verl": verl_identity(),
                  "config": OmegaConf.to_container(cfg, resolve=False)})
    return cfg


def validated(cfg: DictConfig, run_verl: Callable[[DictConfig], None]) -> bool:
    """Run `run_verl` (which raises on a refusal) unless a pass with the same key is stored.
    Returns True when the verdict was stored."""
    path = entry(verdict_key(cfg))
    body = read_entry(path)
    if body is not None and body.get("verdict") == "pass":
        return True
    run_verl(cfg)
    store_entry(path, {"format": FORMAT, "verl": verl_identity(), "verdict": "pass"})
    return False


def entry(key: str, kind: str = "verl") -> Optional[Path]:
    """The file of the entry `key` of `kind`; None when the cache is switched off."""
    folder = cache_dir(kind)
    return None if folder is None else folder / f"{key}.json"


def read_entry(path: Optional[Path], fmt: int = FORMAT) -> Optional[dict]:
    """The entry, or None when absent, switched off, of another format or unreadable (then it is computed
    again and overwritten)."""
    if path is None or not path.is_file():
        return None
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and body.get("format") == fmt else None


def store_entry(path: Optional[Path], body: dict) -> None:
    """Atomic (a reader sees the whole entry or none); a cache that cannot be written is skipped: the launch does
    not fail for it. So is a body JSON would not give back as it was (a value it cannot hold; a tuple, which comes
    back a list; an int key, which comes back a string): a reader would get another config or identity."""
    if path is None:
        return
    try:
        text = json.dumps(body)
    except (TypeError, ValueError):
        return
    if json.loads(text) != body:
        return
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:  # a full disk: no half-written file left beside the entries
            Path(tmp).unlink(missing_ok=True)

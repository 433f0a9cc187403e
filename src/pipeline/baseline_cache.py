"""The identity a run's name is read against (src/pipeline/lineage.py baseline_identity), remembered on disk.

Why: that baseline is a Hydra composition of its own, a plan and verl's config (about a quarter of a dry run's
time on a 2-core machine), and it is the same for every run of one experiment preset, model, reward, algo, GPU
count, seed and accelerator: a sweep's jobs, a relaunch, a resume and most of the tests' launches read the same
few. It is a pure function of what the key holds:
- its override lines and the GPU size the launcher read;
- the code and config that compose and plan it: every file of src/, conf/ and hydra_plugins/ of the code this
  process runs, by content (an edit anywhere there reads the baseline again);
- the environment variables conf/ reads (`oc.env:NAME`: where models, data and results live), and the checkout
  (`project_root`);
- the installed verl (its config files give verl's defaults), Hydra and OmegaConf.
A baseline whose config loads reward plugins (files anywhere, reward.plugins) is never stored; neither is one that
did not plan (it is computed again, and any error it met is met again).

Entries live beside verl's (src/verl_config/cache.py: QE_RL_CACHE_DIR, and QE_RL_VERL_CACHE=0 switches both off).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import re
from pathlib import Path
from typing import Callable, Optional

from src.config import CODE_ROOT, PROJECT_ROOT
from src.verl_config import cache

# bump when the stored format or what the key holds changes
FORMAT = 1
# the trees whose files compose and plan a config
CODE_TREES = ("src", "conf", "hydra_plugins")
_ENV_READ = re.compile(r"oc\.env:([A-Za-z_][A-Za-z0-9_]*)")


@functools.lru_cache(maxsize=4)
def code_fingerprint(code_root: Path = CODE_ROOT) -> tuple[str, tuple[str, ...]]:
    """(a hash of every file of CODE_TREES under `code_root`, the environment variables conf/ reads). Once per
    process: a launch does not edit its own code."""
    h = hashlib.sha256()
    env_names: set[str] = set()
    for tree in CODE_TREES:
        for path in sorted((code_root / tree).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            body = path.read_bytes()
            h.update(str(path.relative_to(code_root)).encode() + b"\0" + body + b"\0")
            if tree == "conf":
                env_names.update(_ENV_READ.findall(body.decode("utf-8", "replace")))
    return h.hexdigest(), tuple(sorted(env_names))


def key(base: tuple[str, ...], gpu_memory_gb: Optional[float], code_root: Path = CODE_ROOT,
        environ: Optional[dict] = None) -> str:
    environ = os.environ if environ is None else environ
    code, env_names = code_fingerprint(code_root)
    versions = {name: importlib.metadata.version(name) for name in ("hydra-core", "omegaconf")}
    body = {"format": FORMAT, "base": list(base), "gpu_memory_gb": gpu_memory_gb, "code": code,
            "env": {name: environ.get(name) for name in env_names}, "checkout": str(PROJECT_ROOT),
            "verl": cache.verl_identity(), "versions": versions}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def remembered(base: tuple[str, ...], gpu_memory_gb: Optional[float],
               compute: Callable[[], tuple[Optional[tuple], bool]]) -> Optional[tuple]:
    """The baseline identity's items for `base`: stored, or `compute()` -> (items or None, whether they may be
    stored), stored when they may."""
    path = cache.entry(key(base, gpu_memory_gb), kind="baseline")
    body = cache.read_entry(path, FORMAT)
    if body is not None and isinstance(body.get("identity"), list):
        return tuple((k, v) for k, v in body["identity"])
    items, storable = compute()
    if items is not None and storable:   # stored only as JSON gives it back (cache.store_entry)
        cache.store_entry(path, {"format": FORMAT, "identity": [list(item) for item in items]})
    return items

"""--from-snapshot runs the snapshot's own verl config again: replayed, not rebuilt.

Why replay: verl_config.yaml is the exact file verl ran. Rebuilding it from the composed config
with today's code gives today's verl config for that composed config, which is another training
config whenever the code that maps ours onto verl's changed since: a snapshot of the first
launcher rebuilt today would get a reward function, a reward manager and a replay-buffer guard it
never had (tests/fixtures/snapshots/). A reproduction must run what the original ran, so the stored
file is the source and only these change:
- the run's names and paths (src/pipeline/lineage.py RUN_NAMES_AND_PATHS), which are this run's;
- this repository's modules that verl's config names and that moved since, named by today's path
  (src/record/identity.py STABLE_CODE_NAMES keeps their first name, so the run id is unchanged);
- keys today's verl has and the stored file lacks (a newer verl): filled from verl's own defaults
  and reported, since verl reads them.
The result passes verl's own validation (verl_config.validate) before anything runs, like a new run,
and the code of ours it names must still take it (named_code_problem).
"""
from __future__ import annotations

import ast
import copy
import importlib
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from src import verl_config
from src.record import identity


@dataclass(frozen=True)
class Replay:
    """The snapshot's verl config, ready for this code and this verl (still with the original's names)."""
    verl: dict
    renamed: list[tuple[str, str]] = field(default_factory=list)          # (old module, today's)
    verl_filled: list[tuple[str, Any]] = field(default_factory=list)      # (dotted key, verl's default)

    @property
    def has_reward_function(self) -> bool:
        """False for snapshots of the first launcher (9cbfe4f), written before the project's reward
        function existed: verl then scores with its built-in default_compute_score, which raises
        NotImplementedError for every data source but its own benchmarks
        (verl/utils/reward_score/__init__.py), so such a run cannot train past its first rollout."""
        return bool(((self.verl.get("reward") or {}).get("custom_reward_function") or {}).get("path"))

    def config(self) -> DictConfig:
        """A fresh DictConfig of it, validated by verl (raises on a refusal, as verl_config.build does)."""
        cfg = OmegaConf.create(copy.deepcopy(self.verl))
        verl_config.validate(cfg)
        return cfg


def prepare(stored: dict) -> Replay:
    moved = {old: new for new, old in identity.STABLE_CODE_NAMES.items()}
    renamed: set[tuple[str, str]] = set()

    def rename(node):
        if isinstance(node, dict):
            return {k: rename(v) for k, v in node.items()}
        if isinstance(node, list):
            return [rename(v) for v in node]
        if isinstance(node, str) and node in moved:
            renamed.add((node, moved[node]))
            return moved[node]
        return node

    verl = rename(stored)
    defaults = verl_defaults()
    filled: list[tuple[str, Any]] = []
    verl = _fill(verl, defaults, "", filled)
    return Replay(verl=verl, renamed=sorted(renamed), verl_filled=filled)


def named_code_problem(verl: dict) -> str | None:
    """Why the code this project gives verl cannot take the replayed config, or None. The verl
    config names our code by module path (a reward function, a reward manager, a replay buffer, an
    agent loop manager): each module must still exist with the name it is asked for, and the
    recorded reward kwargs must still parse with the named reward module's own parser
    (`settings_from`, src/rewards/compute.py). Without this the first rollout on the GPU node would
    find out. Modules are found and read, not run (most of them import verl and torch), except the
    reward module, whose parser is pure (the reward workers run it on every call)."""
    for where, module, attr in _named_code(verl):
        spec = _find(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return f"{where} names the module {module}, which today's code does not have (moved or removed)"
        if attr is not None and attr not in _top_level_names(Path(spec.origin)):
            return f"{where} names {module}.{attr}, which today's code does not have (renamed or removed)"
    reward = ((verl.get("reward") or {}).get("custom_reward_function") or {})
    path = str(reward.get("path") or "")
    if path.startswith(PKG) and reward.get("reward_kwargs") is not None:
        parse = getattr(importlib.import_module(_module(path)), "settings_from", None)
        if parse is not None:
            try:
                parse(reward["reward_kwargs"])
            except (ValueError, TypeError, KeyError) as exc:
                return (f"reward.custom_reward_function.reward_kwargs as recorded are refused by today's "
                        f"{_module(path)} ({type(exc).__name__}: {exc})")
    return None


PKG = "pkg://"


def _module(pkg_path: str) -> str:
    # verl accepts pkg://a.b and pkg://a/b (verl/utils/import_utils.py, load_module)
    return pkg_path[len(PKG):].replace("/", ".")


def _named_code(verl: dict, prefix: str = ""):
    """(key, module, attribute or None) for each module of this project the config names: a
    `{path: pkg://src..., name: X}` pair (a reward manager names its class one level up, beside
    `module: {path, name}`, whose name is the alias verl loads the module under), or a dotted
    `src.a.b.Class` value (agent_loop_manager_class)."""
    for key, value in verl.items():
        where = f"{prefix}{key}"
        if isinstance(value, dict):
            module = value.get("module")
            if isinstance(module, dict) and str(module.get("path") or "").startswith(PKG + "src"):
                yield f"{where}.module.path", _module(module["path"]), value.get("name") or None
                value = {k: v for k, v in value.items() if k != "module"}
            elif str(value.get("path") or "").startswith(PKG + "src"):
                yield f"{where}.path", _module(value["path"]), value.get("name") or None
            yield from _named_code(value, f"{where}.")
        elif isinstance(value, str) and re.fullmatch(r"src(\.\w+)+", value):
            module, _, attr = value.rpartition(".")
            yield where, module, attr


def _find(module: str):
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def _top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def verl_defaults() -> dict:
    """verl's own ppo_trainer config as installed today, resolved (no key of this project's)."""
    cfg = verl_config.compose([])
    return OmegaConf.to_container(cfg, resolve=True)


def _fill(stored: dict, defaults: dict, prefix: str, filled: list) -> dict:
    out = dict(stored)
    for key, value in defaults.items():
        if key not in stored:
            out[key] = copy.deepcopy(value)
            filled.append((prefix + key, value))
        elif isinstance(value, dict) and isinstance(stored[key], dict):
            out[key] = _fill(stored[key], value, f"{prefix}{key}.", filled)
    return out

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
The result passes verl's own validation (verl_config.validate) before anything runs, like a new run.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
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

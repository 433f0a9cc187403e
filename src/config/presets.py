"""The conf/algo presets as files: what a preset sets, and the name a run's dirs and wandb give its algorithm.

A run that changes the estimator or the policy loss of its preset trains another algorithm than the preset's
name says; `label` then names both (`algo=grpo algo.adv_estimator=rloo` -> `grpo+rloo`), in the Hydra run
dir (conf/config.yaml, resolver `algo_label`), the checkpoint dir and wandb (src/plan/run_plan.py).
"""
from __future__ import annotations

import copy
import functools
from dataclasses import MISSING as NO_DEFAULT
from dataclasses import fields
from typing import Any, Optional

from .paths import CONF_DIR
from .schema import AlgoSchema

# algo keys that pick verl's functions: the estimator (verl/trainer/ppo/core_algos.py get_adv_estimator_fn)
# and the policy loss (get_policy_loss_fn)
LABEL_KEYS = ("adv_estimator", "loss_mode")
ABSENT = object()


def preset_values(name: str) -> Optional[dict]:
    """conf/algo/<name>.yaml as a plain dict (None: no such preset, e.g. a hand-set algo.name)."""
    path = CONF_DIR / "algo" / f"{name}.yaml"
    if not path.is_file():
        return None
    stat = path.stat()
    # every composition asks (the `algo_label` resolver); a copy, so no caller changes what the next one reads
    return copy.deepcopy(_read_preset(str(path), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=64)
def _read_preset(path: str, mtime_ns: int, size: int) -> dict:
    # keyed by the file's mtime and size too: an edited preset is read again
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def schema_default(key: str) -> Any:
    """AlgoSchema's default of a top-level key (ABSENT: the yaml must set it)."""
    for f in fields(AlgoSchema):
        if f.name == key:
            if f.default_factory is not NO_DEFAULT:  # type: ignore[misc]
                return f.default_factory()  # type: ignore[misc]
            return ABSENT if f.default is NO_DEFAULT or f.default == "???" else f.default
    return ABSENT


def at(tree: Any, dotted: str) -> Any:
    """tree[a][b] for "a.b"; ABSENT where a part is missing."""
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return ABSENT
        tree = tree[part]
    return tree


def preset_value(preset: Optional[dict], key: str) -> Any:
    """The preset's value of algo.<key> (dotted), the schema's default where the file leaves it out."""
    value = at(preset or {}, key)
    return schema_default(key) if value is ABSENT else value


def label(name: str, values: dict) -> str:
    """The algorithm's name in dirs and wandb: the preset's, plus each LABEL_KEYS value of `values` (the
    run's algo keys) that is not the preset's."""
    preset = preset_values(str(name))
    if preset is None:
        return str(name)
    changed = [str(values[k]) for k in LABEL_KEYS if k in values and values[k] != preset_value(preset, k)]
    return "+".join([str(name), *changed])

"""The one place that touches `hydra._internal` (Hydra 1.3.2): everything else uses Hydra's public API.

Two things have no public form:
- a config loader over an arbitrary config dir while a Hydra app is already running (the public
  `initialize_config_dir` refuses a second GlobalHydra): used to compose verl's own `ppo_trainer`
  from the installed verl's files, and by a Slurm job to compose from its code snapshot's conf/;
- the exact job list Hydra's BasicSweeper makes of a sweep (the pre-launch check must plan the
  same jobs the sweeper will launch, in the same order).
A Hydra upgrade that moves these breaks this module only; tests/launcher/test_config.py runs each.
"""
from __future__ import annotations

from typing import Any


def config_loader(config_dir: str) -> Any:
    """A Hydra ConfigLoader whose primary config dir is `config_dir` (plus Hydra's own configs and
    the installed search-path plugins, as for a Hydra app started there)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path

    return ConfigLoaderImpl(config_search_path=create_config_search_path(config_dir))


def compose_dir(config_dir: str, config_name: str, overrides: list[str]):
    """`config_name` from `config_dir` with `overrides`, without the `hydra` node (a DictConfig in
    struct mode, as Hydra's compose returns it)."""
    from hydra.types import RunMode
    from omegaconf import open_dict

    loader = config_loader(config_dir)
    cfg = loader.load_configuration(config_name=config_name, overrides=overrides, run_mode=RunMode.RUN)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def sweep_jobs(overrides: list) -> list[list[str]]:
    """Each job's override strings, from parsed overrides (hydra.core.override_parser Override
    objects), as BasicSweeper.split_arguments makes them: later overrides of a key win, sweeps
    expand to their cartesian product in key order."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]

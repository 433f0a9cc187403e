"""The one place that touches `hydra._internal` (Hydra 1.3.2): everything else uses Hydra's public API.

Five things have no public form:
- a config loader over an arbitrary config dir while a Hydra app is already running (the public
  `initialize_config_dir` refuses a second GlobalHydra): used to compose verl's own `ppo_trainer`
  from the installed verl's files, and by a Slurm job to compose from its code snapshot's conf/;
- the exact job list Hydra's BasicSweeper makes of a sweep (the pre-launch check must plan the
  same jobs the sweeper will launch, in the same order).
- applying config overrides to a config composed before (`compose_on_choices`), which Hydra does
  inside every composition (ConfigLoaderImpl._apply_overrides_to_config) but offers no call for;
- telling a Hydra app the run mode its config sets (`mode_known`), which it otherwise composes the whole
  config for before composing it again to run;
- reading each config file once per process (`remember_config_files`): Hydra's file source parses a file's YAML
  again for every composition that includes it.
A Hydra upgrade that moves these breaks this module only; tests/launcher/test_config.py and
test_config_files_read_once.py run each.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import os
import pickle
from pathlib import Path
from typing import Any, Callable, Optional

# config files whose parse is remembered (conf/ and verl's trainer configs hold a few hundred)
MAX_FILES = 4096
# the Hydra whose FileConfigSource.load_config (hydra/_internal/core_plugins/file_config_source.py) the remembering
# one copies
FILE_SOURCE_OF = "1.3.2"
# each FileConfigSource class given the remembering read -> Hydra's own load_config of it: a class is given it once
# (config_files_read_each_time puts Hydra's back for a while, which no later call undoes)
_HYDRAS_LOAD_CONFIG: dict = {}


def config_loader(config_dir: str) -> Any:
    """A Hydra ConfigLoader whose primary config dir is `config_dir` (plus Hydra's own configs and
    the installed search-path plugins, as for a Hydra app started there)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path

    remember_config_files()
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


@functools.lru_cache(maxsize=4096)
def _parsed(line: str):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    [override] = OverridesParser.create().parse_overrides([line])
    return override


@functools.lru_cache(maxsize=8)
def _repository(config_dir: str):
    """The config repository Hydra's loader reads `config_dir` through."""
    return config_loader(config_dir).repository


def compose_on_choices(config_dir: str, overrides: list[str],
                       composed_choices: Callable[[tuple[str, ...]], Any]) -> Optional[Any]:
    """The composition of `overrides`, built the way Hydra builds it, from `composed_choices(lines)`: the
    config composed with only the override lines that choose config groups (a caller remembers it per
    tuple of lines; it is copied here, never changed). Hydra composes the defaults list from those
    lines alone, sets struct mode, then applies every other override to the result in order
    (hydra/_internal/config_loader_impl.py _load_configuration_impl -> _apply_overrides_to_config); a
    copy of the remembered composition gets the same call, and each line's parse is remembered too.
    Hydra tells a group choice from a config override by whether the key names a config group and the
    value is not a dict (hydra/_internal/defaults_list.py Overrides); so does this. None for a sweep or
    a `hydra.` key: compose those through Hydra whole.

    Why: Hydra recomposes every file of the defaults list and parses every line with its grammar for each
    composition, and a test or a sweep's pre-launch check composes the same choices for many GPU counts,
    seeds or loss settings; with verl's 80-line override lists the grammar is most of the cost."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    parsed = [_parsed(line) for line in overrides]
    if any(o.is_sweep_override() or o.is_hydra_override() for o in parsed):
        return None
    repository = _repository(config_dir)
    choices, config = [], []
    for line, override in zip(overrides, parsed):
        if repository.group_exists(override.key_or_group) and not isinstance(override.value(), dict):
            choices.append(line)
        else:
            config.append(override)
    # copied through pickle, which OmegaConf supports node for node (flags, types, interpolations): 3x faster than
    # copy.deepcopy on these trees (5 ms against 17 ms for verl's ppo_trainer here), and a test run copies hundreds
    cfg = pickle.loads(pickle.dumps(composed_choices(tuple(choices))))
    # an Override holds its parsed value: a copy each, as a fresh parse would give
    ConfigLoaderImpl._apply_overrides_to_config(copy.deepcopy(config), cfg)
    return cfg


def sweep_jobs(overrides: list) -> list[list[str]]:
    """Each job's override strings, from parsed overrides (hydra.core.override_parser Override
    objects), as BasicSweeper.split_arguments makes them: later overrides of a key win, sweeps
    expand to their cartesian product in key order."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


@contextlib.contextmanager
def mode_known(mode: Any):
    """Within the block, a Hydra app takes `mode` for the `hydra.mode` its config sets. Hydra composes the whole
    config (MULTIRUN mode, sweeps unchecked) only to read that value before it composes the config again to run
    (hydra/_internal/utils.py _run_hydra -> hydra/_internal/hydra.py Hydra.get_mode, None when the composition
    fails); a caller that composed the same overrides already (the launcher's pre-launch check) hands it over:
    one composition of a launch's four fewer (about a sixth of a dry run here)."""
    from hydra._internal.hydra import Hydra

    composed_for_it = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: mode
    try:
        yield
    finally:
        Hydra.get_mode = composed_for_it


def remember_config_files() -> bool:
    """From now on in this process, Hydra's file config source parses each config file's YAML once: a later
    composition that includes the file gets its own copy of the config OmegaConf.load made of it. Idempotent;
    False (nothing changed) under another Hydra than the one whose file source this copies (FILE_SOURCE_OF).

    Why: Hydra's CachingConfigRepository remembers a file only within one composition, and a composition reads
    every file of its defaults list again (the YAML parse is pure Python: OmegaConf's SafeLoader subclass). A
    preset sweep composes hundreds of choices of the same few dozen files; the parse was 11% of
    tests/launcher/test_presets.py's samples (benches/RESULTS.md "Config files parsed once").

    A file is known by its real path with its inode, size, modification and change times, so an edited or replaced
    file is read again (one whose modification time was set back too: the change time moves with any write); its
    header (`# @package`) is remembered with it. What a composition changes is the config built for it, never what
    is remembered (tests/launcher/test_config_files_read_once.py checks both)."""
    import hydra
    from hydra.core.plugins import Plugins

    if hydra.__version__ != FILE_SOURCE_OF:
        return False
    # Hydra's plugin scan runs its core plugins' modules again (hydra/core/plugins.py _scan_all_plugins:
    # exec_module on the module already imported), which defines a new FileConfigSource: the one it then
    # registers and reads through. Scanned first (once a process; every composition needs it), that class is patched
    Plugins.instance()
    from hydra._internal.core_plugins.file_config_source import FileConfigSource

    if FileConfigSource not in _HYDRAS_LOAD_CONFIG:
        _HYDRAS_LOAD_CONFIG[FileConfigSource] = FileConfigSource.load_config
        FileConfigSource.load_config = _load_config_remembered
    return True


def read_config_files(config_dir: str) -> int:
    """Every YAML file under `config_dir` read into what remember_config_files keeps, as a composition would read
    it: for a process that forks commands (tests/launch_server.py), so that each fork finds them read. The count."""
    from hydra._internal.core_plugins import file_config_source

    if not remember_config_files():
        return 0
    source = file_config_source.FileConfigSource(provider="read_config_files", path=config_dir)
    names = sorted(str(p.relative_to(config_dir)) for p in Path(config_dir).rglob("*.yaml"))
    for name in names:
        source.load_config(name)
    return len(names)


def config_files_remembered() -> int:
    """How many config files (each version of one) this process has read and remembered."""
    return _parse.cache_info().currsize


@contextlib.contextmanager
def config_files_read_each_time():
    """Within the block, Hydra's file source reads a file each time, as Hydra does: to compare the two (the tests,
    benches/plan.py). Where remembering is not installed (another Hydra), the block changes nothing."""
    if not remember_config_files():
        yield
        return
    # imported after the plugin scan remember_config_files makes: the class Hydra reads through (see there)
    from hydra._internal.core_plugins.file_config_source import FileConfigSource

    FileConfigSource.load_config = _HYDRAS_LOAD_CONFIG[FileConfigSource]
    try:
        yield
    finally:
        FileConfigSource.load_config = _load_config_remembered


def _load_config_remembered(self, config_path: str):
    """FileConfigSource.load_config (Hydra 1.3.2), its header and YAML parse remembered per file."""
    from hydra.plugins.config_source import ConfigResult

    full_path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
    try:
        stat = os.stat(full_path)
    except OSError:
        return _HYDRAS_LOAD_CONFIG[type(self)](self, config_path)  # Hydra's own error for a missing file
    parsed = _parse((full_path, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns))
    if parsed is None:  # not a YAML mapping, list or string: Hydra's own error
        return _HYDRAS_LOAD_CONFIG[type(self)](self, config_path)
    header, loaded = parsed
    # a new config each time, through pickle, which OmegaConf supports node for node: 4x faster than building it
    # from the parse again (OmegaConf.create), which itself takes less than the YAML parse
    return ConfigResult(config=pickle.loads(loaded), path=f"{self.scheme()}://{self.path}", provider=self.provider,
                        header=dict(header))


@functools.lru_cache(maxsize=MAX_FILES)
def _parse(file: tuple) -> Optional[tuple[dict, bytes]]:
    """(header, the config OmegaConf.load makes of it, pickled) of the file (real path, inode, size, mtime, ctime), read
    as Hydra 1.3.2's file source reads it; None where OmegaConf.load would refuse what it holds."""
    import yaml
    from hydra.plugins.config_source import ConfigSource
    from omegaconf import OmegaConf
    from omegaconf._utils import get_yaml_loader

    with open(file[0], encoding="utf-8") as f:
        header = ConfigSource._get_header_dict(f.read(512))
        f.seek(0)
        obj = yaml.load(f, Loader=get_yaml_loader())
    if obj is not None and not isinstance(obj, (list, dict, str)):
        return None
    return header, pickle.dumps(OmegaConf.create() if obj is None else OmegaConf.create(obj))

"""`+sweep=<name>` loads sweeps/<name>.yaml: the repo's sweeps/ dir is the config group `sweep`.

Hydra maps a group to a directory of the same name under a search-path root; the repo keeps its
sweep definitions in sweeps/ (plural, beside conf/), so this source answers `sweep/...` from
sweeps/ and nothing else. The dir is the one beside this file, so a Slurm job running from its
code snapshot (src/code_snapshot.py) reads the sweeps as they were at submission.
"""
from pathlib import Path
from typing import List, Optional

from hydra._internal.core_plugins.file_config_source import FileConfigSource
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult
from hydra.plugins.search_path_plugin import SearchPathPlugin

GROUP = "sweep"
SWEEPS_DIR = "sweeps"


def _on_disk(config_path: str) -> Optional[str]:
    """'sweep/x.yaml' -> 'sweeps/x.yaml'; None for anything outside the group."""
    path = config_path.strip("/")
    if path == GROUP:
        return SWEEPS_DIR
    if path.startswith(GROUP + "/"):
        return SWEEPS_DIR + path[len(GROUP):]
    return None


class SweepsConfigSource(FileConfigSource):
    """A file source rooted at the repo, that only exposes sweeps/ as the group `sweep`."""

    @staticmethod
    def scheme() -> str:
        return "qe-rl-sweeps"

    def load_config(self, config_path: str) -> ConfigResult:
        on_disk = _on_disk(config_path)
        if on_disk is None:
            raise ConfigLoadError(f"SweepsConfigSource: no config {config_path}")
        return super().load_config(on_disk)

    def available(self) -> bool:
        return super().is_group(SWEEPS_DIR)

    def is_group(self, config_path: str) -> bool:
        on_disk = _on_disk(config_path)
        return on_disk is not None and super().is_group(on_disk)

    def is_config(self, config_path: str) -> bool:
        on_disk = _on_disk(config_path)
        return on_disk is not None and on_disk != SWEEPS_DIR and super().is_config(on_disk)

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        on_disk = _on_disk(config_path)
        folder = Path(self.path) / on_disk if on_disk is not None else None
        if folder is None or not folder.is_dir():
            return []
        names = set()
        for entry in folder.iterdir():
            if entry.is_file() and entry.suffix == ".yaml" and results_filter in (None, ObjectType.CONFIG):
                names.add(entry.stem)
            elif entry.is_dir() and entry.name != "__pycache__" and results_filter in (None, ObjectType.GROUP):
                names.add(entry.name)
        return sorted(names)


class SweepsSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path) -> None:
        repo = Path(__file__).resolve().parents[2]
        search_path.append(provider="qe-rl-sweeps", path=f"{SweepsConfigSource.scheme()}://{repo}")

"""`+sweep=<name>` loads sweeps/<name>.yaml: the repo's sweeps/ dir is the config group `sweep`.

Hydra maps a group to a directory of the same name under a search-path root; the repo keeps its
sweep definitions in sweeps/ (plural, beside conf/), so this source answers `sweep/...` from
sweeps/ and nothing else. The dir is the one beside this file, so a Slurm job running from its
code snapshot (src/record/code_snapshot.py) reads the sweeps as they were at submission.
Built on Hydra's public ConfigSource (hydra/plugins/config_source.py), reading files the way its
FileConfigSource does: the `# @package` header from the first lines, the body with OmegaConf.
"""
from pathlib import Path
from typing import List, Optional

from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

GROUP = "sweep"
SWEEPS_DIR = "sweeps"


class SweepsConfigSource(ConfigSource):
    """The repo's sweeps/ dir, exposed as the group `sweep` (path: the repo root)."""

    @staticmethod
    def scheme() -> str:
        return "qe-rl-sweeps"

    def _on_disk(self, config_path: str) -> Optional[Path]:
        """'sweep/x.yaml' -> <repo>/sweeps/x.yaml; None for anything outside the group."""
        path = config_path.strip("/")
        if path != GROUP and not path.startswith(GROUP + "/"):
            return None
        return Path(self.path) / (SWEEPS_DIR + path[len(GROUP):])

    def load_config(self, config_path: str) -> ConfigResult:
        on_disk = self._on_disk(self._normalize_file_name(config_path))
        if on_disk is None or not on_disk.is_file():
            raise ConfigLoadError(f"SweepsConfigSource: no config {config_path}")
        text = on_disk.read_text(encoding="utf-8")
        return ConfigResult(config=OmegaConf.create(text), path=f"{self.scheme()}://{self.path}",
                            provider=self.provider, header=ConfigSource._get_header_dict(text[:512]))

    def available(self) -> bool:
        return (Path(self.path) / SWEEPS_DIR).is_dir()

    def is_group(self, config_path: str) -> bool:
        on_disk = self._on_disk(config_path)
        return on_disk is not None and on_disk.is_dir()

    def is_config(self, config_path: str) -> bool:
        on_disk = self._on_disk(self._normalize_file_name(config_path))
        return on_disk is not None and on_disk.is_file()

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        folder = self._on_disk(config_path)
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

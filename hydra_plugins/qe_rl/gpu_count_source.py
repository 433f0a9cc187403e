"""`gpus=N` for any integer N, not only the shipped conf/gpus/{2,3,4,8}.yaml.

Hydra resolves a group option to a file, so `gpus=5` would fail with "Could not find
'gpus/5'". This config source answers `gpus/<int>` with `{per_node: <int>}` after the file
source has had its turn (shipped files win). It accepts any integer, even 0 or negative, so
that src/plan.py can refuse those with one clear line instead of Hydra's lookup error. It
lists nothing, so enumerating the group still gives exactly the shipped files.
"""
import re
from typing import List, Optional

from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

GROUP = "gpus"
_OPTION = re.compile(rf"^{GROUP}/(-?\d+)(\.yaml)?$")


class GpuCountConfigSource(ConfigSource):
    @staticmethod
    def scheme() -> str:
        return "qe-rl-gpus"

    def load_config(self, config_path: str) -> ConfigResult:
        match = _OPTION.match(config_path)
        if match is None:
            raise ConfigLoadError(f"GpuCountConfigSource: no config {config_path}")
        return ConfigResult(
            config=OmegaConf.create({"per_node": int(match.group(1))}),
            path=f"{self.scheme()}://{self.path}",
            provider=self.provider,
            header={"package": GROUP},
        )

    def available(self) -> bool:
        return True

    def is_group(self, config_path: str) -> bool:
        return config_path.rstrip("/") == GROUP

    def is_config(self, config_path: str) -> bool:
        return _OPTION.match(config_path) is not None

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        return []


class GpuCountSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path) -> None:
        search_path.append(provider="qe-rl-gpus", path=f"{GpuCountConfigSource.scheme()}://")

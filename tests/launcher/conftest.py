import pytest

from src.config import compose_config


@pytest.fixture
def isolated_paths(tmp_path):
    """Overrides that keep every file a run writes inside tmp_path."""
    out = tmp_path / "out"
    return out, [f"paths.output_dir={out}/outputs", f"paths.results_root={out}/results",
                 f"paths.data_root={tmp_path}/data", f"paths.model_root={tmp_path}/models"]


@pytest.fixture
def compose():
    return compose_config

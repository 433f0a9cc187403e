"""The options of the project's Hydra config groups, as Hydra lists them, and the subsets the launcher
tests sweep."""
from __future__ import annotations

from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from src.config import CONF_DIR

# the presets whose reward side differs (the reward manager and its kwargs): every other preset changes only
# the estimator and loss, which test_algo_presets.py sweeps on its own
MANAGER_ALGOS = ["grpo", "dapo"]
# the GPU counts the README promises (gpus is a plain integer key: any count is planned)
GPUS = ["2", "3", "4", "8"]


def group_options(group: str) -> list[str]:
    """The options of config group `group` (conf/<group>/*.yaml), as Hydra's config loader lists them."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return GlobalHydra.instance().config_loader().get_group_options(group)

"""Custom OmegaConf resolvers used by conf/.

Registered idempotently and called wherever a config is composed (the launcher, the pre-launch
check, tests, and Slurm jobs that compose their own config), not only at import time.
"""
from omegaconf import OmegaConf

from . import presets
from .paths import PROJECT_ROOT


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("project_root"):
        OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT))
    if not OmegaConf.has_resolver("algo_label"):
        # the run dir names the algorithm as the checkpoint dir does (src/config/presets.py label)
        OmegaConf.register_new_resolver("algo_label", lambda name, estimator, loss: presets.label(
            name, {"adv_estimator": estimator, "loss_mode": loss}))

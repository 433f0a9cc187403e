"""Custom OmegaConf resolvers used by conf/.

Registered idempotently and called wherever a config is composed (the launcher, the pre-launch
check, tests, and Slurm jobs that compose their own config), not only at import time.
"""
from omegaconf import OmegaConf

from .paths import PROJECT_ROOT


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("project_root"):
        OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT))

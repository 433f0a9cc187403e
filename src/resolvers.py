"""Custom OmegaConf resolvers used by conf/.

Registered idempotently and called wherever a config is composed (the launcher, the pre-launch
check, tests, and Slurm jobs that compose their own config), not only at import time.
"""
from pathlib import Path

from omegaconf import OmegaConf

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def register_resolvers() -> None:
    # the checkout this code runs from; a Slurm job runs from its code snapshot, so this
    # follows the code, not the cwd
    if not OmegaConf.has_resolver("project_root"):
        OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT))

"""Custom OmegaConf resolvers used by conf/, and where the code and the checkout are.

Registered idempotently and called wherever a config is composed (the launcher, the pre-launch
check, tests, and Slurm jobs that compose their own config), not only at import time.
"""
import json
from pathlib import Path

from omegaconf import OmegaConf

# The code this process runs: the checkout, or a Slurm job's copy of it made at submission
# (src/code_snapshot.py), so a queued job runs the code and conf/ of the moment it was submitted.
CODE_ROOT = Path(__file__).resolve().parent.parent
# The file a code snapshot carries to say which checkout it was copied from.
CODE_SNAPSHOT_MARKER = "CODE_SNAPSHOT.json"


def _checkout_root(code_root: Path) -> Path:
    marker = code_root / CODE_SNAPSHOT_MARKER
    if marker.is_file():
        return Path(json.loads(marker.read_text(encoding="utf-8"))["checkout"])
    return code_root


# The user's checkout: data, models, results and outputs live under it (conf/paths). A job running
# from a code snapshot still writes where the user's checkout would.
PROJECT_ROOT = _checkout_root(CODE_ROOT)


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("project_root"):
        OmegaConf.register_new_resolver("project_root", lambda: str(PROJECT_ROOT))

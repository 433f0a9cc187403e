"""Where the code, its conf/ and the user's checkout are.

The code this process runs is the checkout, or a Slurm job's copy of it made at submission
(src/record/code_snapshot.py), so a queued job runs the code and conf/ of the moment it was
submitted; data, models, results and outputs stay under the user's checkout either way.
"""
import json
from pathlib import Path

# The code this process runs (the dir holding src/ and conf/).
CODE_ROOT = Path(__file__).resolve().parents[2]
# conf/ of that code: a Slurm job composes from its code snapshot's conf/
CONF_DIR = CODE_ROOT / "conf"
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

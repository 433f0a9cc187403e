"""The temp dir every xdist worker of one pytest run shares (what one session builds once for all of them)."""
from __future__ import annotations

import os
from pathlib import Path


def run_temp_dir(tmp_path_factory) -> Path:
    """pytest's temp dir of this run: under xdist each worker's basetemp (`pytest-N/popen-gwK`) has it as its
    parent; without xdist it is the basetemp itself."""
    base = Path(tmp_path_factory.getbasetemp())
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base

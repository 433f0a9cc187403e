"""A single run's dir, claimed before the run starts: created by this launch, never shared with another.

A run dir's name has its start time in seconds (conf/config.yaml hydra.run.dir, from_snapshot's
`<time>_from_<run>`), and a run dir holds one run (src/record/snapshot.py reuse refuses a second one). Two
launches of different configs started in the same second (two dry runs side by side; a dry run after a quick
refusal; a dry run that takes under a second on a fast machine) would be given one dir, and the second refused
with "use a new run dir". Each gets its own: the second `-2`, the next `-3`.
"""
from __future__ import annotations

from pathlib import Path

from src.data.safe_write import claim_dir


def claim(base: Path) -> Path:
    """`base`, created now; `base-2`, `base-3`, ... when another launch created it first."""
    return claim_dir(base, unique=True)

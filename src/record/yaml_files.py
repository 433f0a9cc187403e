"""YAML the project reads back: snapshots (composed.yaml, overrides.yaml, verl_config.yaml) and Hydra's
multirun.yaml.

Parsed with libyaml's C parser where PyYAML was built with it (the wheels for Linux are), which gives what
`yaml.safe_load` gives (the same safe constructors and resolvers, only the scanner and parser in C) about 6x
faster: a snapshot's verl config of about 1,000 keys takes 6 ms instead of 39 ms, and the report reads one
for every run of a sweep.
"""
from __future__ import annotations

from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str) -> Any:
    """As yaml.safe_load(text)."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader, C or Python

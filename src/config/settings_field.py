"""`setting(...)`: a config schema field that carries its facts (doc line, interval, example, verl key),
read back by src/config/schema.py settings(); shared by the schema's modules (schema.py, reward_schema.py)."""
from __future__ import annotations

from dataclasses import field
from typing import Any, Optional

from omegaconf import MISSING


def setting(default: Any = MISSING, *, doc: str, interval: Optional[str] = None, example: Optional[str] = None,
            note: str = "", verl: Optional[str] = None):
    """A config field with its facts. `interval`: where a number must lie, as a user reads it
    ("(0, inf)", "[0, 1]"; integer and null-ness come from the field's type), with `example` the value a
    refusal suggests and `note` what it adds (" (-1: never)"); `verl`: the verl key (under verl's
    ppo_trainer) that holds this value in the run's verl config."""
    if (interval is None) != (example is None):
        raise ValueError("setting(): an interval needs its example and an example its interval")
    return field(default=default, metadata={"doc": doc, "interval": interval, "example": example, "note": note,
                                            "verl": verl})

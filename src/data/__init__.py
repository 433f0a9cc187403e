"""Parallel text -> verl parquet (`python -m src.data.prepare`) and the prompt templates.

The reward function needs only the templates' response formats; importing this package pulls in no
tokenizer or parquet code.
"""

from .templates import (
    TEMPLATES,
    THINK_TAG,
    THINK_TRANSLATE,
    TRANSLATE_ONLY,
    TRANSLATE_TAG,
    build_prompt,
    expected_format,
)

__all__ = [
    "TEMPLATES",
    "THINK_TAG",
    "THINK_TRANSLATE",
    "TRANSLATE_ONLY",
    "TRANSLATE_TAG",
    "build_prompt",
    "expected_format",
]

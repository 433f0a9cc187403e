"""Data: parallel text -> verl parquet (`python -m src.data.prepare`) and the prompt templates (importing it loads no tokenizer).
May import: nothing else of src (the reward function and the report read its templates).
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

"""UsageError, the evaluation's bad input: its own module so that options.py can read significance.py's
defaults while significance.py refuses bad input with the same error (neither imports the other)."""
from __future__ import annotations


class UsageError(ValueError):
    """Bad input: the message is one line saying what is wrong (printed as `evaluate: error: ...`)."""

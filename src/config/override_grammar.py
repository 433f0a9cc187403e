"""Hydra's override grammar (hydra/grammar/OverrideLexer.g4, Hydra 1.3.2), for values we write and values users type.

An unquoted override value may hold letters, digits and a few symbols only: a path with a
non-ASCII character (`/data/数据`), a quote, `~`, `=`, brackets or a comma is a lexer error or
turns into something else (a comma makes a sweep). A quoted value holds any text. Every override
we build for another Hydra program (verl's entry, src/node/training.py) goes through `quote`, and
a user's override that Hydra's lexer refuses gets the quoted form in its error line (`hint`).
"""
from __future__ import annotations

import re

# a run of backslashes right before a quote: in a quoted value each such backslash is doubled and
# the quote escaped (Hydra's "escaped quotes" rule); backslashes elsewhere stay as they are
_BACKSLASHES_BEFORE_QUOTE = re.compile(r"(\\*)'")
_TRAILING_BACKSLASHES = re.compile(r"(\\+)$")


def quote(value: str) -> str:
    """`value` as a single-quoted Hydra override value that parses back to exactly `value`."""
    text = _BACKSLASHES_BEFORE_QUOTE.sub(lambda m: m.group(1) * 2 + "\\'", value)
    # backslashes before the closing quote would escape it
    text = _TRAILING_BACKSLASHES.sub(lambda m: m.group(1) * 2, text)
    return f"'{text}'"


def override(key: str, value: str) -> str:
    """`key='value'`: one override whose value is taken literally (a path, a name)."""
    return f"{key}={quote(value)}"


def is_grammar_error(exc: BaseException) -> bool:
    """Hydra's lexer or parser refused an override's text (not its key or value)."""
    from hydra.errors import OverrideParseException

    text = str(exc)
    return isinstance(exc, OverrideParseException) or any(
        s in text for s in ("token recognition error", "mismatched input", "extraneous input", "no viable alternative"))


def hint(overrides: list[str]) -> str | None:
    """For the first override Hydra's grammar refuses: the same override with its value quoted
    (None when every override parses, or the quoted form would not parse either)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for line in overrides:
        try:
            parser.parse_override(line)
            continue
        except Exception:  # noqa: BLE001 - any refusal of the grammar: try the quoted form
            pass
        key, sep, value = line.partition("=")
        if not sep:
            return None
        fixed = f"{key}={quote(value)}"
        try:
            parser.parse_override(fixed)
        except Exception:  # noqa: BLE001 - the key itself is not valid: no quoted form helps
            return None
        return f"quote the value for Hydra's override grammar, on the command line: {_shell(fixed)}"
    return None


def _shell(text: str) -> str:
    """`text` as one shell word: in double quotes where nothing inside is special to the shell."""
    import shlex

    return f'"{text}"' if not re.search(r'[$`"\\!]', text) else shlex.quote(text)

"""Strict response parsing: the format the prompt template asked for, or a named failure.

`think_translate` (templates base, chat): `<think>...</think><translate>...</translate>`, each tag
exactly once and in that order. `translate_only` (template rl): `<translate>...</translate>` once,
and no think tags. With `strict_outside`, only whitespace may stand before the first tag, between
`</think>` and `<translate>`, and after `</translate>` (MT-R1-Zero-style: a model that chats around
its answer does not get the format reward).

Linear in the response length (a few `str.count`/`str.find`), so huge responses cost nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

from src.data.templates import (
    THINK_CLOSE,
    THINK_OPEN,
    THINK_TRANSLATE,
    TRANSLATE_CLOSE,
    TRANSLATE_ONLY,
    TRANSLATE_OPEN,
)

# format_error values (logged as a string, so verl's metrics skip it)
OK = ""
MISSING_TAG = "missing_tag"
REPEATED_TAG = "repeated_tag"
TAG_ORDER = "tag_order"
UNEXPECTED_THINK = "unexpected_think"
TEXT_OUTSIDE_TAGS = "text_outside_tags"


@dataclass(frozen=True)
class Parsed:
    ok: bool
    translation: str  # stripped text inside <translate>; "" when the format failed
    error: str = OK
    # where `translation` starts in the response (characters): token-level credit maps the
    # scorer's offsets into the translation back onto the response (src/rewards/credit)
    start: int = 0


def _fail(error: str) -> Parsed:
    return Parsed(ok=False, translation="", error=error)


def parse_response(response: str, expected: str, strict_outside: bool = True) -> Parsed:
    """Parse `response` for the format `expected` (src.data.templates.expected_format)."""
    if expected == THINK_TRANSLATE:
        tags = (THINK_OPEN, THINK_CLOSE, TRANSLATE_OPEN, TRANSLATE_CLOSE)
    elif expected == TRANSLATE_ONLY:
        if THINK_OPEN in response or THINK_CLOSE in response:
            return _fail(UNEXPECTED_THINK)
        tags = (TRANSLATE_OPEN, TRANSLATE_CLOSE)
    else:
        raise ValueError(f"unknown response format {expected!r}")

    counts = [response.count(t) for t in tags]
    if any(c == 0 for c in counts):
        return _fail(MISSING_TAG)
    if any(c > 1 for c in counts):
        return _fail(REPEATED_TAG)
    positions = [response.find(t) for t in tags]
    if positions != sorted(positions):
        return _fail(TAG_ORDER)

    open_at, close_at = positions[-2], positions[-1]
    if strict_outside:
        outside = [response[:positions[0]], response[close_at + len(TRANSLATE_CLOSE):]]
        if expected == THINK_TRANSLATE:
            outside.append(response[positions[1] + len(THINK_CLOSE):open_at])
        if any(part.strip() for part in outside):
            return _fail(TEXT_OUTSIDE_TAGS)
    inner = response[open_at + len(TRANSLATE_OPEN):close_at]
    lead = len(inner) - len(inner.lstrip())
    return Parsed(ok=True, translation=inner.strip(), start=open_at + len(TRANSLATE_OPEN) + lead)

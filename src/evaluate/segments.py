"""From a generated response to the text that is scored, parsed exactly as the reward parses it.

The reward's strict parser (src/rewards/parsing.py) decides `format_ok`; with extract=lenient a
broken response is still scored on its last `<translate>` part (src.data.templates.translation_of,
what the report pages show), so a model that chats around a good translation is not scored as if it
had produced nothing; with extract=strict it is scored as an empty translation. extract=raw scores the
response as it is (whitespace at its ends trimmed): a base instruct model answers without tags and an
outside system's file holds translations only, so the reward's format says nothing about them and
`format_ok` is None, not a rate of 0% or 100%.
"""
from __future__ import annotations

from dataclasses import dataclass

from src.data.templates import expected_format, translation_of
from src.rewards.parsing import parse_response


@dataclass(frozen=True)
class Extracted:
    translation: str
    format_ok: bool | None  # None: not judged (extract=raw)
    format_error: str   # parsing.py's names: missing_tag, repeated_tag, ... ("" when ok)


def extract_translation(response: str, template: str, mode: str = "lenient") -> Extracted:
    if mode == "raw":
        return Extracted(response.strip(), None, "")
    parsed = parse_response(response, expected_format(template))
    if parsed.ok:
        return Extracted(parsed.translation, True, "")
    lenient = translation_of(response) if mode == "lenient" else None
    return Extracted(lenient or "", False, parsed.error)

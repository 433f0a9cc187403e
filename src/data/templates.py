"""Prompt templates for zh<->en translation RL, and the response format each one asks for.

Three templates (the reward function parses responses with `expected_format(template)`):

- `base`: R1-Zero style plain text (instructions, `User:` line with the source, `Assistant:`),
  as one user message. For base models: they learn the format from the text alone.
- `chat`: the same instructions as a system message; the user message carries the source. The
  model's chat template (applied by verl at rollout time) frames them.
- `rl`: no reasoning, only `<translate>...</translate>`; one user message.

and each of them with the segment's required terms (`base_terms`, `chat_terms`, `rl_terms`): the same prompt with
one line before the source's, "Required terminology: 机器学习 -> machine learning; ...", where the row has terms
(a row without terms gets the plain prompt). The terms are the row's extra_info["terms"] (src/data/terms.py); the
same data prepared with the plain template is the run without terms in its prompt (its terms still measured).

verl applies the tokenizer's chat template to every prompt (RLHFDataset filters lengths and the
agent loop renders the prompt that way), so every template returns a chat list of
{role, content} messages.
"""

from __future__ import annotations

import re

THINK_TAG = "think"
TRANSLATE_TAG = "translate"
THINK_OPEN, THINK_CLOSE = f"<{THINK_TAG}>", f"</{THINK_TAG}>"
TRANSLATE_OPEN, TRANSLATE_CLOSE = f"<{TRANSLATE_TAG}>", f"</{TRANSLATE_TAG}>"

THINK_TRANSLATE = "think_translate"
TRANSLATE_ONLY = "translate_only"

# The project's languages, one list: the codes src.data.prepare accepts (and names in prompts), and the
# languages the wrong-language guard identifies among by default (reward.guards.wrong_language.languages:
# null, filled from here at launch by src/rewards/group_kwargs.py). Each must be one py3langid knows
# (checked at every launch the guard is on) and have its script in src/rewards/languages.py SCRIPTS.
LANGUAGE_NAMES = {
    "zh": "Chinese",
    "en": "English",
    "de": "German",
    "fr": "French",
    "ja": "Japanese",
    "ru": "Russian",
    "cs": "Czech",
    "es": "Spanish",
    "it": "Italian",
    "pt": "Portuguese",
    "nl": "Dutch",
    "ko": "Korean",
}

_THINK_INSTRUCTIONS = (
    "The Assistant first thinks about the reasoning process in the mind and then provides the user "
    "with the final translation. The reasoning process and the final translation are enclosed within "
    f"{THINK_OPEN} {THINK_CLOSE} and {TRANSLATE_OPEN} {TRANSLATE_CLOSE} tags, respectively, i.e., "
    f"{THINK_OPEN} reasoning process here {THINK_CLOSE} {TRANSLATE_OPEN} final translation here "
    f"{TRANSLATE_CLOSE}."
)

# The source always ends the last user message, right after this line. `parse_prompt` relies on it
# to recover the source from a decoded prompt (verl's validation dumps keep only the prompt text).
_SOURCE_LEAD = "Translate the following {src_name} text into {tgt_name}:\n"

_PLAIN_FORMATS = {"base": THINK_TRANSLATE, "chat": THINK_TRANSLATE, "rl": TRANSLATE_ONLY}
# the templates that give the model the row's terms: <plain>_terms
TERMS_SUFFIX = "_terms"
_FORMATS = {**_PLAIN_FORMATS, **{f"{t}{TERMS_SUFFIX}": f for t, f in _PLAIN_FORMATS.items()}}
TEMPLATES = tuple(_FORMATS)
_TERMS_LEAD = "Required terminology: "


class UnknownTemplateError(ValueError):
    pass


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def expected_format(template: str) -> str:
    """`"think_translate"` (`<think>..</think><translate>..</translate>`) or `"translate_only"`."""
    try:
        return _FORMATS[template]
    except KeyError:
        raise UnknownTemplateError(f"unknown template {template!r} (known: {', '.join(TEMPLATES)})") from None


def gives_terms(template: str) -> bool:
    """Whether the template puts the row's terms into its prompt."""
    expected_format(template)
    return template.endswith(TERMS_SUFFIX)


def terms_line(terms) -> str:
    """The prompt's line of required terms (each with .src and .tgt), "" for none."""
    if not terms:
        return ""
    return _TERMS_LEAD + "; ".join(f"{t.src} -> {t.tgt}" for t in terms) + "\n"


def build_prompt(template: str, src_text: str, src_lang: str, tgt_lang: str, terms=()) -> list[dict[str, str]]:
    """The chat messages for one source sentence; `terms` (src/data/terms.py Term) go into a *_terms template's."""
    expected_format(template)  # raises on unknown names
    names = {"src_name": language_name(src_lang), "tgt_name": language_name(tgt_lang)}
    request = (terms_line(terms) if gives_terms(template) else "") + _SOURCE_LEAD.format(**names) + src_text
    template = template.removesuffix(TERMS_SUFFIX)
    if template == "base":
        text = (
            "A conversation between User and Assistant. The User asks for a translation from "
            f"{names['src_name']} to {names['tgt_name']}, and the Assistant translates it. "
            f"{_THINK_INSTRUCTIONS}\nUser: {request}\nAssistant:"
        )
        return [{"role": "user", "content": text}]
    if template == "chat":
        system = (
            "You are a translation assistant. The User asks for a translation from "
            f"{names['src_name']} to {names['tgt_name']}. {_THINK_INSTRUCTIONS}"
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": request}]
    # rl
    text = (
        f"Translate the {names['src_name']} text below into {names['tgt_name']}. Reply with the "
        f"translation only, enclosed within {TRANSLATE_OPEN} {TRANSLATE_CLOSE} tags.\n{request}"
    )
    return [{"role": "user", "content": text}]


_TRAILERS = ("\nAssistant:", "\nassistant\n", "\nassistant")
_LEAD_RE = re.compile(r"Translate the following (?P<src>[^\n]+?) text into (?P<tgt>[^\n]+?):\n")


def parse_prompt(prompt_text: str) -> tuple[str, str, str] | None:
    """Best-effort recovery of (source, src_lang, tgt_lang) from a decoded prompt, as in verl's
    validation dumps (chat template rendered, special tokens removed). None when the prompt was not
    built by these templates."""
    matches = list(_LEAD_RE.finditer(prompt_text))
    if not matches:
        return None
    m = matches[-1]  # the source comes after the last lead line
    src = prompt_text[m.end():]
    for trailer in _TRAILERS:
        idx = src.rfind(trailer)
        if idx >= 0:
            src = src[:idx]
            break
    codes = {name: code for code, name in LANGUAGE_NAMES.items()}
    return src.strip(), codes.get(m["src"], m["src"]), codes.get(m["tgt"], m["tgt"])


def translation_of(response: str) -> str | None:
    """The text inside the last <translate>...</translate> of a response (an unclosed last tag
    runs to the end); None without the tag. Lenient on purpose: it is for display, the reward
    function's format check decides what counts."""
    start = response.rfind(TRANSLATE_OPEN)
    if start < 0:
        return None
    body = response[start + len(TRANSLATE_OPEN):]
    end = body.find(TRANSLATE_CLOSE)
    return (body[:end] if end >= 0 else body).strip()

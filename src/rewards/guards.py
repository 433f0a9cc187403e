"""Guards: cheap checks for the ways a policy games a QE reward that the degenerate checks
(src/rewards/degenerate.py: empty, source copy, wrong script, 4x length) let through.

    wrong_language   the right script but the wrong language (French for an English target,
                     Japanese for a Chinese one): language ID (py3langid, the langid.py fork; its
                     139-language model ships in the wheel; or the anchors' fastText model,
                     OpenLID-v2 or GlotLID, from reward.guards.wrong_language.model), restricted
                     to `languages`, on the answer without names and numbers
    repetition       a loop shorter than 4x: the share of the answer's tokens inside an n-gram seen
                     before in the answer, against the same share in the reference
    code_mix         source-language text left in the answer: tokens in the source's script (zh<->en)
                     or copied from the source (same script), minus what the reference keeps and
                     names/numbers/acronyms (GDP, iPhone, 5G)
    length_coverage  under/over-translation: answer length against the reference's (words, or
                     characters for zh/ja), else against the source times the pair's usual ratio

Each guard is switched and priced on its own (reward.guards.<name>.enable / .penalty); a flagged
answer scores `format.bonus + the lowest penalty that applies` (degenerate penalties included) and
is never sent to the QE service in training. Each check is exempted when the reference itself
fails it, as the degenerate checks are. Costs and the hack set they are tuned on:
benches/guards.py, benches/RESULTS.md ("Reward guards"); tests/fixtures/hack_set.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from src.rewards import lid
from src.rewards.degenerate import ANALYSED_CHARS
from src.rewards.guard_settings import (GUARD_NAMES, CodeMixSettings, GuardSettings, LengthCoverageSettings,
                                        RepetitionSettings, WrongLanguageSettings)
from src.rewards.languages import CYRILLIC, HAN, HANGUL, KANA, LATIN, base_lang, family, unspaced

NAMES = GUARD_NAMES
FLAGS = tuple(f"guard_{n}" for n in NAMES)

# one token: a CJK character (each one a unit: zh/ja have no spaces), a word of an alphabetic
# script, or a number
_TOKEN = re.compile(f"[{HAN}{KANA}]|[{HANGUL}]+|[{LATIN}{CYRILLIC}0-9]+(?:['’\\-.][{LATIN}{CYRILLIC}0-9]+)*")
_CJK_CHAR = re.compile(f"[{HAN}{KANA}{HANGUL}]")
_LATIN_WORD = re.compile(f"[{LATIN}]")

# Usual target units per source unit when there is no reference (words for alphabetic targets,
# characters for zh/ja), measured on WMT-style news: an English sentence has about 0.65 words per
# Chinese character of its source, a Chinese one about 1.5 characters per English word.
# Chinese characters a name or word kept in Latin letters stands for, in a zh/ja length
LATIN_WORD_CHARS = 2
PAIR_RATIO = {("zh", "en"): 0.65, ("en", "zh"): 1.5, ("ja", "en"): 0.5, ("en", "ja"): 2.0}


@dataclass(frozen=True)
class Guards:
    """Which guards fired; None for a guard that is off (not computed, logged as None)."""
    wrong_language: bool | None = None
    repetition: bool | None = None
    code_mix: bool | None = None
    length_coverage: bool | None = None

    def fired(self) -> tuple[str, ...]:
        return tuple(n for n in NAMES if getattr(self, n))

    @property
    def any(self) -> bool:
        return bool(self.fired())

    def flags(self) -> dict[str, float | None]:
        """As reward components: 1.0 fired, 0.0 not, None off (means give rates per step)."""
        return {f"guard_{n}": (None if getattr(self, n) is None else float(getattr(self, n))) for n in NAMES}

    def penalty(self, s: GuardSettings) -> float | None:
        """The lowest penalty of the guards that fired, None when none did."""
        applied = [getattr(s, n).penalty for n in self.fired()]
        return min(applied) if applied else None


# ----------------------------------------------------------------------------------------------
# tokens
# ----------------------------------------------------------------------------------------------
def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text[:ANALYSED_CHARS])


def _is_cjk(tok: str) -> bool:
    return bool(_CJK_CHAR.match(tok))


def _script(tok: str) -> str:
    if _is_cjk(tok):
        return "cjk"
    if _LATIN_WORD.search(tok):
        return "latin"
    if tok[:1].isdigit():
        return "number"
    return "cyrillic"


def _name_like(tok: str) -> bool:
    """Kept as is in any language: numbers and words with digits (5G, COVID-19), acronyms (GDP,
    NASA), inner capitals (iPhone, eBay)."""
    if any(ch.isdigit() for ch in tok):
        return True
    letters = [ch for ch in tok if ch.isalpha()]
    if len(letters) >= 2 and all(ch.isupper() for ch in letters):
        return True
    return any(ch.isupper() for ch in tok[1:]) and not tok.isupper()


# ----------------------------------------------------------------------------------------------
# the guards
# ----------------------------------------------------------------------------------------------
def _lid_text(text: str, tgt: str) -> str:
    """The answer without what every language keeps (numbers, acronyms, capitalised names) and,
    for a zh/ja target, without Latin words: what is left says which language it is."""
    kept = []
    for tok in tokens(text):
        if _name_like(tok):
            continue
        if unspaced(tgt) and not _is_cjk(tok):
            continue
        if not _is_cjk(tok) and tok[:1].isupper() and tgt not in ("de",) and kept:
            continue  # a capitalised word inside a sentence: a name (German capitalises nouns)
        kept.append(tok)
    joiner = "" if unspaced(tgt) else " "
    return joiner.join(kept)


def identify(text: str, tgt: str, s: WrongLanguageSettings) -> tuple[str, float] | None:
    """(language, probability) among `s.languages`; None when too little is left to judge."""
    sample = _lid_text(text, tgt)
    if sum(ch.isalpha() for ch in sample) < s.min_letters:
        return None
    if s.model is not None:
        return lid.fasttext_lid(s.model).classify(sample, s.languages)
    return lid.restricted(s.languages).classify(sample)


def _wrong_language(text: str, tgt: str, s: WrongLanguageSettings) -> bool:
    if tgt not in s.languages:
        return False
    got = identify(text, tgt, s)
    return got is not None and got[0] != tgt and got[1] >= s.min_confidence


def _ngram_n(tgt: str) -> int:
    return 4 if unspaced(tgt) else 3


def repeated_share(text: str, n: int) -> float:
    """Share of the tokens inside an n-gram that already occurred earlier in the text."""
    toks = [t.casefold() for t in tokens(text)]
    if len(toks) < n:
        return 0.0
    seen: set[tuple[str, ...]] = set()
    covered = [False] * len(toks)
    for i in range(len(toks) - n + 1):
        gram = tuple(toks[i:i + n])
        if gram in seen:
            for j in range(i, i + n):
                covered[j] = True
        seen.add(gram)
    return sum(covered) / len(toks)


def _repetition(text: str, reference: str, tgt: str, s: RepetitionSettings) -> bool:
    n = _ngram_n(tgt)
    if len(tokens(text)) < s.min_tokens:
        return False
    share = repeated_share(text, n)
    ref_share = repeated_share(reference, n) if reference.strip() else 0.0
    return share >= s.max_share and share - ref_share >= s.margin


def untranslated_share(text: str, source: str, reference: str, src: str, tgt: str) -> tuple[float, int]:
    """(share, count) of the answer's letter tokens that are untranslated source text: in the
    source's script when it differs from the target's (zh->en: Han; en->zh: Latin words), else
    copied from the source; what the reference keeps, name-like tokens and the source's names
    (capitalised inside a sentence: John Smith, New York, kept in Latin letters in a Chinese
    answer) do not count."""
    toks = [t for t in tokens(text) if not t[:1].isdigit()]
    if not toks:
        return 0.0, 0
    ref_toks = {t.casefold() for t in tokens(reference)} | _source_names(source)
    src_script, tgt_script = family(src), family(tgt)
    if src_script and tgt_script and src_script != tgt_script:
        foreign = [t for t in toks if _script(t) == src_script]
    else:
        src_toks = {t.casefold() for t in tokens(source) if len(t) > 3 or _is_cjk(t)}
        foreign = [t for t in toks if t.casefold() in src_toks]
    foreign = [t for t in foreign if t.casefold() not in ref_toks and not _name_like(t)]
    return len(foreign) / len(toks), len(foreign)


_SENTENCE_START = re.compile(r"(?:^|[.!?。！？:;\"“”]\s*)$")


def _source_names(source: str) -> set[str]:
    """Capitalised words of an alphabetic source that do not start a sentence: names."""
    names = set()
    for m in _TOKEN.finditer(source[:ANALYSED_CHARS]):
        tok = m.group()
        if tok[:1].isupper() and not _is_cjk(tok) and not _SENTENCE_START.search(source[:m.start()].rstrip()):
            names.add(tok.casefold())
    return names


def _code_mix(text: str, source: str, reference: str, src: str, tgt: str, s: CodeMixSettings) -> bool:
    # what the reference keeps is not counted (untranslated_share), which is its exemption
    share, count = untranslated_share(text, source, reference, src, tgt)
    return share >= s.max_share and count >= s.min_tokens


def length_units(text: str, lang: str) -> int:
    """Words, or characters for zh/ja, where a word in another script (a name kept in Latin
    letters: Merkel for 默克尔) counts as LATIN_WORD_CHARS characters."""
    toks = tokens(text)
    if not unspaced(lang):
        return len(toks)
    return sum(1 if _is_cjk(t) else LATIN_WORD_CHARS for t in toks)


def coverage_ratio(text: str, source: str, reference: str, src: str, tgt: str) -> float | None:
    """Answer length / expected length: the reference's, else the source's times PAIR_RATIO."""
    got = length_units(text, tgt)
    if reference.strip():
        return (got + 2) / (length_units(reference, tgt) + 2)
    ratio = PAIR_RATIO.get((src, tgt), 1.0 if family(src) == family(tgt) else None)
    if ratio is None or not source.strip():
        return None
    return (got + 2) / (length_units(source, src) * ratio + 2)


def _length_coverage(text: str, source: str, reference: str, src: str, tgt: str,
                     s: LengthCoverageSettings) -> bool:
    if not reference.strip() and not s.without_reference:
        return False
    ratio = coverage_ratio(text, source, reference, src, tgt)
    return ratio is not None and not s.min_ratio <= ratio <= s.max_ratio


def check(translation: str, source: str, reference: str, src_lang: str, tgt_lang: str,
          s: GuardSettings) -> Guards:
    """Every guard that is on (each is computed, so each is logged); off ones are None."""
    src, tgt = base_lang(src_lang), base_lang(tgt_lang)
    reference = reference or ""
    has_ref = bool(reference.strip())
    out: dict[str, bool] = {}
    if s.on("wrong_language"):
        out["wrong_language"] = _wrong_language(translation, tgt, s.wrong_language) and not (
            has_ref and _wrong_language(reference, tgt, s.wrong_language))
    if s.on("repetition"):
        out["repetition"] = _repetition(translation, reference, tgt, s.repetition)
    if s.on("code_mix"):
        out["code_mix"] = _code_mix(translation, source, reference, src, tgt, s.code_mix)
    if s.on("length_coverage"):
        out["length_coverage"] = _length_coverage(translation, source, reference, src, tgt, s.length_coverage)
    return Guards(**out)

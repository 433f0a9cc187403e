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
    term_stuffing    the term reward gamed (docs/terminology.md): a required term repeated beyond the
                     source's count, or an answer made mostly of required terms; in a run that trains on
                     reward.weights.term

A guard is one class registered here (src/rewards/guard_registry.py: its name, its Settings with a doc
line per key, its check) and one yaml entry (reward.guards.<name>, conf/reward_base/default.yaml); the
launcher's config schema is made from the class. Import guards, their settings and the verdicts from
this module: importing it registers the built-in ones.

Each guard is switched and priced on its own (reward.guards.<name>.enable / .penalty); a flagged
answer scores `format.bonus + the lowest penalty that applies` (degenerate penalties included) and
is never sent to the QE service in training. Each check is exempted when the reference itself
fails it, as the degenerate checks are. Costs and the hack set they are tuned on:
benches/guards.py, benches/RESULTS.md ("Reward guards"); tests/fixtures/hack_set.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from src.data import terms as term_matching
from src.data.templates import LANGUAGE_NAMES
from src.rewards import lid
from src.rewards.degenerate import ANALYSED_CHARS
from src.rewards.guard_registry import (Guard, GuardInput, Guards, GuardSettings, GuardSettingsBase, flag,
                                        launch_kwargs, read_guards, register_guard, registered, run_guards)
from src.rewards.languages import CYRILLIC, HAN, HANGUL, KANA, LATIN, base_lang, family, unspaced
from src.rewards.typed_settings import setting_field
from src.rewards.values import RewardConfigError

# what the rest of src/rewards takes from here (the registry's, with the built-in guards registered)
__all__ = ["Guards", "GuardSettings", "read_guards", "launch_kwargs", "check", "NAMES", "FLAGS"]

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


def guarded_languages(value) -> tuple[str, ...]:
    """reward.guards.wrong_language.languages: null is every language src.data.prepare accepts (the one
    list, src/data/templates.py LANGUAGE_NAMES); a list of one's own as given."""
    return tuple(LANGUAGE_NAMES) if value is None else tuple(value)


@register_guard
class WrongLanguage(Guard):
    """The right script but the wrong language; exempt where the reference is in that language itself."""
    name = "wrong_language"

    @dataclass(frozen=True)
    class Settings(GuardSettingsBase):
        # after reading, never null: null in the config is every language prepare accepts (read)
        languages: tuple[str, ...] | None = setting_field(
            "the languages the identifier chooses among (ISO 639-1 codes, as py3langid names them); the target must "
            "be one. null in the config: every language src.data.prepare accepts")
        min_confidence: float = setting_field("the other language's normalised probability at or above which the "
                                            "answer is flagged", interval="(0, 1]", example="0.5")
        min_letters: int = setting_field("letters left after removing names and numbers below which the answer is "
                                       "not judged")
        model: str | None = setting_field(
            "a fastText LID model (OpenLID-v2, GlotLID .bin; labels mapped by src.rewards.lid.lid_code) instead of "
            "py3langid; null: py3langid (and absent in reward kwargs written before it existed)", default=None)

    def read(self, key, value):
        if key == "languages":
            if isinstance(value, str) or not all(isinstance(x, str) for x in (value or ())):
                raise RewardConfigError(f"reward.guards.{self.name}.languages must be a list of language codes, "
                                        f"got {value!r}")
            return guarded_languages(value)
        if key == "model":
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise RewardConfigError(f"reward.guards.{self.name}.model must be null (py3langid) or the path of a "
                                        f"fastText LID model, got {value!r}")
            return value
        return NotImplemented

    def launch_value(self, key, value, root):
        from pathlib import Path

        if key == "languages":
            # null: the languages prepare accepts, written out (a snapshot replays the same ones)
            return list(guarded_languages(None if value is None else list(value)))
        if key == "model" and isinstance(value, str) and value.strip():
            # absolute, as the QE checkpoints: the reward workers do not run in the launcher's directory
            return str(Path(root or Path.cwd()) / Path(value).expanduser())
        return value

    def check(self, s) -> None:
        if not s.enable:
            return
        if s.model is None and set(s.languages) <= set(LANGUAGE_NAMES):
            # py3langid knows every language prepare accepts (tests/rewards/test_guards.py checks the list against
            # its model): the default languages need no model read, 0.35 s of a 1.4 s dry run
            bad = []
        else:
            from src.rewards.lid import known_languages  # loads the LID model: only when on

            known = set(known_languages(s.model))  # a model that is missing or does not load: one line
            bad = [lang for lang in s.languages if lang not in known]
        identifier = "py3langid" if s.model is None else f"the fastText model {s.model}"
        if bad:
            raise RewardConfigError(f"reward.guards.wrong_language.languages: {bad[0]!r} is not a language the "
                                    f"identifier knows ({identifier}: ISO 639-1 codes such as en, de, zh, ja)")
        if len(s.languages) < 2:
            raise RewardConfigError("reward.guards.wrong_language.languages needs at least two languages")

    def fired(self, x: GuardInput, s) -> bool:
        return _wrong_language(x.translation, x.tgt_lang, s) and not (
            bool(x.reference.strip()) and _wrong_language(x.reference, x.tgt_lang, s))


def identify(text: str, tgt: str, s: WrongLanguage.Settings) -> tuple[str, float] | None:
    """(language, probability) among `s.languages`; None when too little is left to judge."""
    sample = _lid_text(text, tgt)
    if sum(ch.isalpha() for ch in sample) < s.min_letters:
        return None
    if s.model is not None:
        return lid.fasttext_lid(s.model).classify(sample, s.languages)
    return lid.restricted(s.languages).classify(sample)


def _wrong_language(text: str, tgt: str, s: WrongLanguage.Settings) -> bool:
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


@register_guard
class Repetition(Guard):
    """A loop shorter than the degenerate check's 4x length: tokens inside an n-gram seen before in the answer (3
    words, 4 zh/ja characters), against the same share in the reference (legitimate repetition is kept)."""
    name = "repetition"

    @dataclass(frozen=True)
    class Settings(GuardSettingsBase):
        max_share: float = setting_field("the share of the answer's tokens inside a repeated n-gram at or above which "
                                       "it fires", interval="(0, 1]", example="0.3")
        margin: float = setting_field("... and at least this much above the reference's share", interval="(0, 1]",
                                    example="0.2")
        min_tokens: int = setting_field("answers with fewer tokens are not judged")

    def fired(self, x: GuardInput, s) -> bool:
        n = _ngram_n(x.tgt_lang)
        if len(tokens(x.translation)) < s.min_tokens:
            return False
        share = repeated_share(x.translation, n)
        ref_share = repeated_share(x.reference, n) if x.reference.strip() else 0.0
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


@register_guard
class CodeMix(Guard):
    """Source-language text left in the answer (untranslated_share); what the reference keeps is not counted, which
    is its exemption."""
    name = "code_mix"

    @dataclass(frozen=True)
    class Settings(GuardSettingsBase):
        max_share: float = setting_field("the share of the answer's tokens that are untranslated source text at or "
                                       "above which it fires", interval="(0, 1]", example="0.3")
        min_tokens: int = setting_field("... and at least this many such tokens")

    def fired(self, x: GuardInput, s) -> bool:
        share, count = untranslated_share(x.translation, x.source, x.reference, x.src_lang, x.tgt_lang)
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


@register_guard
class LengthCoverage(Guard):
    """Under- or over-translation: the answer's length against the reference's (words, or characters for zh/ja),
    else against the source's times the pair's usual ratio."""
    name = "length_coverage"

    @dataclass(frozen=True)
    class Settings(GuardSettingsBase):
        # 0 < min_ratio < 1 < max_ratio (check)
        min_ratio: float = setting_field("answer length / reference length (in target units) below this fires")
        max_ratio: float = setting_field("... and above this")
        without_reference: bool = setting_field("rows without a reference: judge against the source times the pair's "
                                              "usual ratio (else skip them)")

    def check(self, s) -> None:
        if not 0.0 < s.min_ratio < 1.0 < s.max_ratio:
            raise RewardConfigError(f"reward.guards.length_coverage needs 0 < min_ratio < 1 < max_ratio, got "
                                    f"{s.min_ratio} and {s.max_ratio}")

    def fired(self, x: GuardInput, s) -> bool:
        if not x.reference.strip() and not s.without_reference:
            return False
        ratio = coverage_ratio(x.translation, x.source, x.reference, x.src_lang, x.tgt_lang)
        return ratio is not None and not s.min_ratio <= ratio <= s.max_ratio


@register_guard
class TermStuffing(Guard):
    """Terminology gamed (the term reward, docs/terminology.md): a required target term written more often than its
    source term occurs in the source (or the reference has it), or an answer made mostly of required terms (the
    glossary copied instead of the sentence translated) where neither the source nor the reference is mostly
    terms. Rows without required terms are never flagged. In a run whenever it trains on the term component
    (reward.weights.term), on unless switched off; in no other run."""
    name = "term_stuffing"
    in_every_run = False
    guards_component = "term"

    @dataclass(frozen=True)
    class Settings(GuardSettingsBase):
        max_share: float = setting_field("the share of the answer's characters inside required target terms at or "
                                       "above which it fires (unless the source or reference is as much terms)",
                                       interval="(0, 1]", example="0.6")
        max_extra: int = setting_field("occurrences of a required target term allowed beyond its source term's count "
                                     "in the source (or its count in the reference)")

    def fired(self, x: GuardInput, s) -> bool:
        required = term_matching.present(x.terms, x.source)
        if not required:
            return False
        for t in required:
            allowed = max(term_matching.occurrences(t.src, x.source), term_matching.occurrences(t.tgt, x.reference))
            if term_matching.occurrences(t.tgt, x.translation) - allowed > s.max_extra:
                return True
        share = term_matching.covered_share([t.tgt for t in required], x.translation)
        own = max(term_matching.covered_share([t.src for t in required], x.source),
                  term_matching.covered_share([t.tgt for t in required], x.reference) if x.reference.strip() else 0.0)
        return share >= s.max_share and own < s.max_share


def check(translation: str, source: str, reference: str, src_lang: str, tgt_lang: str,
          s: GuardSettings | None, terms: tuple = ()) -> Guards:
    """Every guard of the run that is on (each is computed, so each is logged); the others None."""
    x = GuardInput(translation, source, reference or "", base_lang(src_lang), base_lang(tgt_lang), tuple(terms))
    return run_guards(x, s)


NAMES = tuple(registered())
FLAGS = tuple(flag(n) for n in NAMES)

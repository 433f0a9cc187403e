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

import os
import re
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from src.rewards.degenerate import _CYRILLIC, _HAN, _HANGUL, _KANA, _LATIN, ANALYSED_CHARS, base_lang
from src.rewards.settings import (GUARD_NAMES, CodeMixSettings, GuardSettings, LengthCoverageSettings, RepetitionSettings,
                                  RewardConfigError, WrongLanguageSettings)

NAMES = GUARD_NAMES
FLAGS = tuple(f"guard_{n}" for n in NAMES)

# one token: a CJK character (each one a unit: zh/ja have no spaces), a word of an alphabetic
# script, or a number
_TOKEN = re.compile(f"[{_HAN}{_KANA}]|[{_HANGUL}]+|[{_LATIN}{_CYRILLIC}0-9]+(?:['’\\-.][{_LATIN}{_CYRILLIC}0-9]+)*")
_CJK_CHAR = re.compile(f"[{_HAN}{_KANA}{_HANGUL}]")
_LATIN_WORD = re.compile(f"[{_LATIN}]")
# the script family of a target language, for which tokens are "the other script"
_SCRIPT_OF = {"zh": "cjk", "ja": "cjk", "ko": "cjk", "ru": "cyrillic", "uk": "cyrillic",
              **{lang: "latin" for lang in ("en", "de", "fr", "es", "it", "pt", "nl", "cs", "pl", "ro")}}
_CJK_TARGETS = ("zh", "ja")  # no spaces: length in characters, n-grams of characters

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
@lru_cache(maxsize=1)
def _identifier():
    # loaded once per reward worker (about 0.5-1.5 s); py3langid/langid.py: LanguageIdentifier
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def known_languages(model: str | None = None) -> list[str]:
    """The codes the identifier knows (settings check reward.guards.wrong_language.languages):
    py3langid's, or those of the fastText model at `model` (which this loads)."""
    return _identifier().labels if model is None else sorted(set(fasttext_lid(model).code_of.values()))


@lru_cache(maxsize=8)
def _restricted(languages: tuple[str, ...]):
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    ident.set_languages(list(languages))
    return ident


# ISO 639-1 code -> ISO 639-3 (the 639-2/T code, as OpenLID-v2 and GlotLID labels name languages)
_ISO_639_1 = dict(pair.split(":") for pair in """
    aa:aar ab:abk ae:ave af:afr ak:aka am:amh an:arg ar:ara as:asm av:ava ay:aym az:aze ba:bak be:bel
    bg:bul bi:bis bm:bam bn:ben bo:bod br:bre bs:bos ca:cat ce:che ch:cha co:cos cr:cre cs:ces cu:chu
    cv:chv cy:cym da:dan de:deu dv:div dz:dzo ee:ewe el:ell en:eng eo:epo es:spa et:est eu:eus fa:fas
    ff:ful fi:fin fj:fij fo:fao fr:fra fy:fry ga:gle gd:gla gl:glg gn:grn gu:guj gv:glv ha:hau he:heb
    hi:hin ho:hmo hr:hrv ht:hat hu:hun hy:hye hz:her ia:ina id:ind ie:ile ig:ibo ii:iii ik:ipk io:ido
    is:isl it:ita iu:iku ja:jpn jv:jav ka:kat kg:kon ki:kik kj:kua kk:kaz kl:kal km:khm kn:kan ko:kor
    kr:kau ks:kas ku:kur kv:kom kw:cor ky:kir la:lat lb:ltz lg:lug li:lim ln:lin lo:lao lt:lit lu:lub
    lv:lav mg:mlg mh:mah mi:mri mk:mkd ml:mal mn:mon mr:mar ms:msa mt:mlt my:mya na:nau nb:nob nd:nde
    ne:nep ng:ndo nl:nld nn:nno no:nor nr:nbl nv:nav ny:nya oc:oci oj:oji om:orm or:ori os:oss pa:pan
    pi:pli pl:pol ps:pus pt:por qu:que rm:roh rn:run ro:ron ru:rus rw:kin sa:san sc:srd sd:snd se:sme
    sg:sag si:sin sk:slk sl:slv sm:smo sn:sna so:som sq:sqi sr:srp ss:ssw st:sot su:sun sv:swe sw:swa
    ta:tam te:tel tg:tgk th:tha ti:tir tk:tuk tl:tgl tn:tsn to:ton tr:tur ts:tso tt:tat tw:twi ty:tah
    ug:uig uk:ukr ur:urd uz:uzb ve:ven vi:vie vo:vol wa:wln wo:wol xh:xho yi:yid yo:yor za:zha zh:zho
    zu:zul""".split())
# the individual languages OpenLID-v2 / GlotLID label where ISO 639-1 names their macrolanguage
# (Mandarin is zh, Standard Arabic ar, Iranian Persian fa, ...)
_MACRO_MEMBERS = {"cmn": "zh", "arb": "ar", "pes": "fa", "prs": "fa", "zsm": "ms", "ekk": "et", "lvs": "lv",
                  "npi": "ne", "khk": "mn", "uzn": "uz", "swh": "sw", "ydd": "yi", "azj": "az", "azb": "az",
                  "als": "sq", "plt": "mg", "gaz": "om", "quy": "qu", "ory": "or", "pbt": "ps", "kmr": "ku",
                  "ckb": "ku"}
_ISO_639_3 = {three: two for two, three in _ISO_639_1.items()} | _MACRO_MEMBERS
FASTTEXT_LABEL = "__label__"


def lid_code(label: str) -> str:
    """A fastText LID label (OpenLID-v2 / GlotLID: __label__eng_Latn, __label__zho_Hans) -> the
    project's code: ISO 639-1 where the language (or its macrolanguage) has one, else the ISO
    639-3 code as the label gives it (yue, wuu: py3langid names these the same); the script is
    dropped (zho_Hans and zho_Hant are both zh)."""
    lang = label.removeprefix(FASTTEXT_LABEL).split("_")[0]
    return _ISO_639_3.get(lang, lang)


class FastTextLID:
    """A fastText LID model, its labels mapped to the project's codes (lid_code)."""

    def __init__(self, path: str, model) -> None:
        self.path, self.model = path, model
        self.code_of = {label: lid_code(label) for label in model.get_labels()}

    def classify(self, text: str, languages: tuple[str, ...]) -> tuple[str, float] | None:
        """(language, probability) among `languages`, as py3langid's set_languages restricts: the
        labels' probabilities summed per code (zho_Hans + zho_Hant), renormalised over `languages`."""
        labels, probs = self.model.predict(" ".join(text.split()), k=-1)  # fastText: one line
        mass = dict.fromkeys(languages, 0.0)
        for label, p in zip(labels, probs):
            code = self.code_of[label]
            if code in mass:
                mass[code] += float(p)
        total = sum(mass.values())
        if total <= 0.0:
            return None
        best = max(mass, key=mass.__getitem__)
        return best, mass[best] / total


_FASTTEXT_MAGIC = 793712314


def _cut_short(path: str) -> str | None:
    """Why a fastText .bin is incomplete, None if it is not. fastText's loader does not fail on a file
    cut short (an interrupted download): it loops inside the dictionary or reads zeros. The layout
    (fastText src/fasttext.cc saveModel: magic, version, Args of 12 int32 + a double, the
    Dictionary's size/nwords/nlabels, ..., then qout and the output matrix last: nlabels x dim
    floats, nwords x dim for word vectors) says from the header how the file must end. A .ftz
    quantized with -qout ends otherwise."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(76)
        if len(head) < 4 or struct.unpack_from("<i", head)[0] != _FASTTEXT_MAGIC:
            return None  # not fastText: its loader says "wrong file format"
        if len(head) < 76:
            return f"{size} bytes, less than its header"
        dim = struct.unpack_from("<i", head, 8)[0]
        nwords, nlabels = struct.unpack_from("<ii", head, 68)
        want = nlabels or nwords
        tail = 17 + 4 * want * dim
        if dim > 0 and want > 0 and size >= 76 + tail:
            f.seek(size - tail)
            qout, rows, cols = struct.unpack("<?qq", f.read(17))
            if not qout and (rows, cols) == (want, dim):
                return None
    return f"its {size} bytes do not end with the {want} x {dim} output matrix its header announces: cut short?"


@lru_cache(maxsize=2)
def fasttext_lid(path: str) -> FastTextLID:
    """The fastText model at `path`, loaded once per process (the launcher's check, each reward
    worker); a missing or unreadable file is one RewardConfigError line."""
    key = "reward.guards.wrong_language.model"
    if not Path(path).is_file():
        raise RewardConfigError(f"{key}: {path} not found; put an OpenLID-v2 or GlotLID fastText .bin there "
                                f"or set it to null (py3langid)")
    incomplete = _cut_short(path)
    if incomplete:
        raise RewardConfigError(f"{key}: {path} is not a complete fastText model ({incomplete}); download it again")
    import fasttext  # the fasttext-numpy2 wheel (envs/train.in)

    try:
        model = fasttext.load_model(path)
        labels = model.get_labels()
    except Exception as exc:  # fastText: ValueError "... has wrong file format!"
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise RewardConfigError(f"{key}: {path} is not a fastText model ({reason})") from None
    if not labels or not all(label.startswith(FASTTEXT_LABEL) for label in labels):
        raise RewardConfigError(f"{key}: {path} is a fastText model without {FASTTEXT_LABEL} labels, not a "
                                f"language identifier such as OpenLID-v2 or GlotLID")
    return FastTextLID(path, model)


def _lid_text(text: str, tgt: str) -> str:
    """The answer without what every language keeps (numbers, acronyms, capitalised names) and,
    for a zh/ja target, without Latin words: what is left says which language it is."""
    kept = []
    for tok in tokens(text):
        if _name_like(tok):
            continue
        if tgt in _CJK_TARGETS and not _is_cjk(tok):
            continue
        if not _is_cjk(tok) and tok[:1].isupper() and tgt not in ("de",) and kept:
            continue  # a capitalised word inside a sentence: a name (German capitalises nouns)
        kept.append(tok)
    joiner = "" if tgt in _CJK_TARGETS else " "
    return joiner.join(kept)


def identify(text: str, tgt: str, s: WrongLanguageSettings) -> tuple[str, float] | None:
    """(language, probability) among `s.languages`; None when too little is left to judge."""
    sample = _lid_text(text, tgt)
    if sum(ch.isalpha() for ch in sample) < s.min_letters:
        return None
    if s.model is not None:
        return fasttext_lid(s.model).classify(sample, s.languages)
    return _restricted(s.languages).classify(sample)


def _wrong_language(text: str, tgt: str, s: WrongLanguageSettings) -> bool:
    if tgt not in s.languages:
        return False
    got = identify(text, tgt, s)
    return got is not None and got[0] != tgt and got[1] >= s.min_confidence


def _ngram_n(tgt: str) -> int:
    return 4 if tgt in _CJK_TARGETS else 3


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
    src_script, tgt_script = _SCRIPT_OF.get(src), _SCRIPT_OF.get(tgt)
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
    if lang not in _CJK_TARGETS:
        return len(toks)
    return sum(1 if _is_cjk(t) else LATIN_WORD_CHARS for t in toks)


def coverage_ratio(text: str, source: str, reference: str, src: str, tgt: str) -> float | None:
    """Answer length / expected length: the reference's, else the source's times PAIR_RATIO."""
    got = length_units(text, tgt)
    if reference.strip():
        return (got + 2) / (length_units(reference, tgt) + 2)
    ratio = PAIR_RATIO.get((src, tgt), 1.0 if _SCRIPT_OF.get(src) == _SCRIPT_OF.get(tgt) else None)
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
    if s.wrong_language.enable:
        out["wrong_language"] = _wrong_language(translation, tgt, s.wrong_language) and not (
            has_ref and _wrong_language(reference, tgt, s.wrong_language))
    if s.repetition.enable:
        out["repetition"] = _repetition(translation, reference, tgt, s.repetition)
    if s.code_mix.enable:
        out["code_mix"] = _code_mix(translation, source, reference, src, tgt, s.code_mix)
    if s.length_coverage.enable:
        out["length_coverage"] = _length_coverage(translation, source, reference, src, tgt, s.length_coverage)
    return Guards(**out)

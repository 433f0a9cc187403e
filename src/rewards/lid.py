"""Language-ID loading: py3langid's identifier (its 139-language model ships in the wheel) and a
fastText LID model (OpenLID-v2, GlotLID) from reward.guards.wrong_language.model, each loaded once
per process, with their labels mapped to the project's codes (src/rewards/languages.py).

The wrong-language guard (src/rewards/guards.py) classifies with them; the guards' settings
(src/rewards/guards.py WrongLanguage.check) load them at launch to check reward.guards.wrong_language.languages.
A missing, cut-short or wrong model file is one RewardConfigError line.
"""
from __future__ import annotations

import os
import struct
from functools import lru_cache
from pathlib import Path

from src.rewards.languages import ISO_639_3
from src.rewards.values import RewardConfigError


@lru_cache(maxsize=1)
def identifier():
    # loaded once per reward worker (about 0.5-1.5 s); py3langid/langid.py: LanguageIdentifier
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def known_languages(model: str | None = None) -> list[str]:
    """The codes the identifier knows (settings check reward.guards.wrong_language.languages):
    py3langid's, or those of the fastText model at `model` (which this loads)."""
    return identifier().labels if model is None else sorted(set(fasttext_lid(model).code_of.values()))


@lru_cache(maxsize=8)
def restricted(languages: tuple[str, ...]):
    """py3langid restricted to `languages` (the wrong_language guard's), once per set and process."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    ident.set_languages(list(languages))
    return ident


FASTTEXT_LABEL = "__label__"


def lid_code(label: str) -> str:
    """A fastText LID label (OpenLID-v2 / GlotLID: __label__eng_Latn, __label__zho_Hans) -> the
    project's code: ISO 639-1 where the language (or its macrolanguage) has one, else the ISO
    639-3 code as the label gives it (yue, wuu: py3langid names these the same); the script is
    dropped (zho_Hans and zho_Hant are both zh)."""
    lang = label.removeprefix(FASTTEXT_LABEL).split("_")[0]
    return ISO_639_3.get(lang, lang)


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

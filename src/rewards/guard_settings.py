"""reward.guards' settings (the worker side): one dataclass per guard, the group read from verl's
reward kwargs and checked (`read_guards`), and every guard off for kwargs written before the guards
existed. The checks themselves: src/rewards/guards.py. Stdlib only (the LID model is loaded, lazily,
only to check the languages of a wrong_language guard that is on).
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass
from typing import Any, Mapping

from src.data.templates import LANGUAGE_NAMES
from src.rewards.values import RewardConfigError, number

GUARD_NAMES = ("wrong_language", "repetition", "code_mix", "length_coverage")


@dataclass(frozen=True)
class WrongLanguageSettings:
    enable: bool
    penalty: float
    # the identifier chooses among these (ISO 639-1 codes, as py3langid names them); the target must be one.
    # null in the config: every language src.data.prepare accepts (guarded_languages)
    languages: tuple[str, ...]
    # normalised probability of the other language at or above which the answer is flagged
    min_confidence: float
    # letters left after removing names and numbers below which the answer is not judged
    min_letters: int
    # a fastText LID model (OpenLID-v2, GlotLID .bin; labels mapped by src.rewards.lid.lid_code)
    # instead of py3langid; absent in reward kwargs written before it existed: py3langid, as then
    model: str | None = None


@dataclass(frozen=True)
class RepetitionSettings:
    enable: bool
    penalty: float
    # the share of tokens inside a repeated n-gram (n: 3 words, 4 zh/ja characters) at or above this
    max_share: float
    # ... and at least this much above the reference's share (legitimate repetition is kept)
    margin: float
    min_tokens: int


@dataclass(frozen=True)
class CodeMixSettings:
    enable: bool
    penalty: float
    # the share of the answer's tokens that are untranslated source text at or above this
    max_share: float
    # ... and at least this many such tokens
    min_tokens: int


@dataclass(frozen=True)
class LengthCoverageSettings:
    enable: bool
    penalty: float
    # answer length / reference length (in target units) outside [min_ratio, max_ratio]
    min_ratio: float
    max_ratio: float
    # rows without a reference: judge against the source times the pair's usual ratio (else skip)
    without_reference: bool


@dataclass(frozen=True)
class GuardSettings:
    """reward.guards (conf/reward_base/default.yaml; the checks: src/rewards/guards.py). None: the
    reward kwargs have no settings for that guard (written before it existed): it is off."""
    wrong_language: WrongLanguageSettings | None
    repetition: RepetitionSettings | None
    code_mix: CodeMixSettings | None
    length_coverage: LengthCoverageSettings | None

    def on(self, name: str) -> bool:
        guard = getattr(self, name)
        return guard is not None and guard.enable

    def enabled(self) -> tuple[str, ...]:
        return tuple(n for n in GUARD_NAMES if self.on(n))


GUARD_CLASSES = {"wrong_language": WrongLanguageSettings, "repetition": RepetitionSettings,
            "code_mix": CodeMixSettings, "length_coverage": LengthCoverageSettings}


def read_guards(value: Mapping[str, Any] | None) -> GuardSettings:
    """reward kwargs `guards` -> settings (src/rewards/guards.py). None (a verl config written
    before the guards existed, replayed from a snapshot), or a guard absent from them: that guard off,
    so the replay scores as the original run did."""
    given = dict(value or {})
    unknown = [k for k in given if k not in GUARD_NAMES]
    if unknown:
        raise RewardConfigError(f"reward.guards: unknown guard {unknown[0]!r} (known: {', '.join(GUARD_NAMES)})")
    for name, sub in given.items():
        # `reward.guards.repetition=false` replaces the group by a bool: refused, not read as "every key off"
        if sub is not None and not isinstance(sub, Mapping):
            raise RewardConfigError(f"reward.guards.{name} is a group of settings, got {sub!r}; to turn the guard "
                                    f"off: reward.guards.{name}.enable=false")
    out = {}
    for name, cls in GUARD_CLASSES.items():
        sub = dict(given.get(name) or {})
        fields = cls.__dataclass_fields__
        if not sub:
            out[name] = None
            continue
        missing = [f for f in fields if f not in sub and fields[f].default is MISSING]
        extra = [f for f in sub if f not in fields]
        if missing or extra:
            bad = (f"lacks {missing[0]!r}" if missing else f"has unknown key {extra[0]!r}")
            raise RewardConfigError(f"reward.guards.{name} {bad} (keys: {', '.join(fields)})")
        kw = {}
        for f, v in sub.items():
            key = f"guards.{name}.{f}"
            if f in ("enable", "without_reference"):
                if not isinstance(v, bool):
                    raise RewardConfigError(f"reward.{key} must be true or false, got {v!r}")
                kw[f] = v
            elif f == "languages":
                if isinstance(v, str) or not all(isinstance(x, str) for x in (v or ())):
                    raise RewardConfigError(f"reward.{key} must be a list of language codes, got {v!r}")
                kw[f] = guarded_languages(v)
            elif f == "model":
                if v is not None and (not isinstance(v, str) or not v.strip()):
                    raise RewardConfigError(f"reward.{key} must be null (py3langid) or the path of a fastText "
                                            f"LID model, got {v!r}")
                kw[f] = v
            elif f in ("min_letters", "min_tokens"):
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise RewardConfigError(f"reward.{key} must be an integer >= 0, got {v!r}")
                kw[f] = v
            else:
                kw[f] = number(v, key)
        out[name] = cls(**kw)
    s = GuardSettings(**out)
    check_guards(s)
    return s


def guarded_languages(value) -> tuple[str, ...]:
    """reward.guards.wrong_language.languages: null is every language src.data.prepare accepts (the one
    list, src/data/templates.py LANGUAGE_NAMES); a list of one's own as given."""
    return tuple(LANGUAGE_NAMES) if value is None else tuple(value)


def check_guards(s: GuardSettings) -> None:
    w, r, c, lc = s.wrong_language, s.repetition, s.code_mix, s.length_coverage
    if w is not None and not 0.0 < w.min_confidence <= 1.0:
        raise RewardConfigError(f"reward.guards.wrong_language.min_confidence must be in (0, 1], got {w.min_confidence}")
    if s.on("wrong_language"):
        from src.rewards.lid import known_languages  # loads the LID model: only when on

        known = set(known_languages(w.model))  # a model that is missing or does not load: one line
        bad = [lang for lang in w.languages if lang not in known]
        identifier = "py3langid" if w.model is None else f"the fastText model {w.model}"
        if bad or len(w.languages) < 2:
            raise RewardConfigError(f"reward.guards.wrong_language.languages: {bad[0]!r} is not a language the identifier "
                        f"knows ({identifier}: ISO 639-1 codes such as en, de, zh, ja)" if bad else
                        "reward.guards.wrong_language.languages needs at least two languages")
    shares = ([("repetition.max_share", r.max_share), ("repetition.margin", r.margin)] if r is not None else []) + (
        [("code_mix.max_share", c.max_share)] if c is not None else [])
    for key, share in shares:
        if not 0.0 < share <= 1.0:
            raise RewardConfigError(f"reward.guards.{key} must be in (0, 1], got {share}")
    if lc is not None and not 0.0 < lc.min_ratio < 1.0 < lc.max_ratio:
        raise RewardConfigError(f"reward.guards.length_coverage needs 0 < min_ratio < 1 < max_ratio, got "
                    f"{lc.min_ratio} and {lc.max_ratio}")


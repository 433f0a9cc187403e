"""Error positions of a translation -> penalised character ranges of the whole response.

Runs in verl's reward workers (stdlib only). The scorer answers in *translation* coordinates:
offsets into the MT string it was sent, which is the stripped text between `<translate>` tags
(src/rewards/parsing.py). The response verl decoded has the think block, the tags and the
whitespace around the translation too, so every offset is shifted by `Parsed.start`.

Rules (the hand-labelled table in tests/rewards/test_token_credit_mapping.py checks each):
- offsets are clamped to the translation; a span that ends up empty or lies outside is dropped
  (a truncated MT, or a span the service reported past the end);
- whitespace at either end of a span is trimmed: stock comet 2.2.7 spans start with the space of
  their '▁word' piece (src/scorer/backends/comet/decode.py trim_span does the same on the service; old snapshots
  and other span models may not), and a space alone carries no error;
- severity weight / heaviest weight * `scale` is the penalty of every token the range touches, so
  with the default MQM weights (minor 1, major 5, critical 10) and scale = the training reward's
  answer range (hi - lo), a critical error costs one reward range, a minor one a tenth of it;
- a severity the weights do not name (a unified model's own labels) counts as `bad`, the weight
  of a BAD word (word tags carry no severity);
- ranges may overlap (they are kept as they are); the token rule takes the largest penalty.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from src.rewards.typed_settings import setting_field
from src.scorer.vocabulary import SEVERITIES as SPAN_SEVERITIES

SEQUENCE = "sequence"
TOKEN = "token"
CREDITS = (SEQUENCE, TOKEN)
# the weighted severities: an error span's, and `bad` for a BAD word (word tags carry no severity)
SEVERITIES = SPAN_SEVERITIES + ("bad",)
SOURCES = ("spans", "words")  # error spans with severity, or BAD words (word_tag_source=probs)
# the key compute_score adds to its dict with credit=token (a JSON string: verl averages every
# non-string value it logs)
RESULT_KEY = "credit_ranges"


class CreditConfigError(ValueError):
    """A token-credit setting that cannot work; one line naming the key."""


@dataclass(frozen=True)
class TokenCreditGroup:
    """reward.token_credit as the group sets it (reward.credit=token, docs/token-credit.md): read at launch
    (src/rewards/credit/launch.py), which resolves the scale and the source into CreditSettings for the workers; the
    launcher's Hydra schema is made from it (src/config/reward_schema.py)."""
    severity_weights: Mapping[str, float] = setting_field(
        "MQM severity -> weight (minor, major, critical; bad: BAD words and labels that are none of these); a "
        "penalised token gets -scale x its weight / the heaviest weight")
    scale: float | None = setting_field("penalty of the heaviest severity in reward units; null: the training "
                                        "answer's range (sum of |weight| x clip width)", interval="(0, inf)",
                                        example="1.0")
    weight: float = setting_field("token term weight: A = GRPO advantage + weight x penalty / scale (a critical-error "
                                  "token is pushed down by `weight` advantage units); 0 gives verl's grpo advantages",
                                  interval="[0, inf)", example="1.0")


@dataclass(frozen=True)
class CreditSettings:
    severity_weights: Mapping[str, float]
    # penalty of the heaviest severity, in reward units (> 0)
    scale: float
    source: str

    def penalty(self, severity: str) -> float:
        weights = self.severity_weights
        w = weights.get(severity, weights["bad"])
        return -self.scale * w / max(weights.values())

    @classmethod
    def from_kwargs(cls, kw: Mapping[str, Any]) -> "CreditSettings":
        try:
            raw = dict(kw["severity_weights"])
            scale, source = kw["scale"], str(kw["source"])
        except (KeyError, TypeError) as exc:
            raise CreditConfigError(f"reward kwargs token_credit lacks {exc} (built by src.rewards.credit.launch)") \
                from None
        weights = {}
        for sev in SEVERITIES:
            value = raw.get(sev)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                raise CreditConfigError(f"reward.token_credit.severity_weights.{sev} must be a number >= 0, got "
                                        f"{value!r} (e.g. reward.token_credit.severity_weights.{sev}=5)")
            weights[sev] = float(value)
        unknown = sorted(set(raw) - set(SEVERITIES))
        if unknown:
            raise CreditConfigError(f"reward.token_credit.severity_weights: unknown severity {unknown[0]!r} "
                                    f"(known: {', '.join(SEVERITIES)})")
        if max(weights.values()) <= 0:
            raise CreditConfigError("reward.token_credit.severity_weights are all 0: no token would be penalised "
                                    "(use reward.credit=sequence instead)")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
            raise CreditConfigError(f"reward.token_credit.scale must be a number > 0 or null (the reward's range), "
                                    f"got {scale!r}")
        if source not in SOURCES:
            raise CreditConfigError(f"token credit source must be spans or words, got {source!r}")
        return cls(severity_weights=weights, scale=float(scale), source=source)


def _offset(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value)


def response_ranges(errors: Iterable[Mapping[str, Any]], translation: str, start: int,
                    settings: CreditSettings) -> list[dict]:
    """Scorer spans (`severity`) or BAD words (`tag`) with `start`/`end` into `translation` ->
    [{start, end, severity, penalty}] into the response, sorted by start."""
    out = []
    n = len(translation)
    for err in errors:
        if not isinstance(err, Mapping):
            continue
        if "tag" in err and err.get("tag") != "BAD":
            continue  # word tags: OK words and words the model never saw carry no error
        s, e = _offset(err.get("start")), _offset(err.get("end"))
        if s is None or e is None:
            continue
        s, e = max(0, s), min(n, e)
        while s < e and translation[s].isspace():
            s += 1
        while e > s and translation[e - 1].isspace():
            e -= 1
        if s >= e:
            continue
        severity = "bad" if "tag" in err else str(err.get("severity") or "bad")
        if severity not in settings.severity_weights:
            severity = "bad"
        out.append({"start": start + s, "end": start + e, "severity": severity,
                    "penalty": settings.penalty(severity)})
    out.sort(key=lambda r: (r["start"], r["end"]))
    return out


def encode(ranges: list[dict], response_chars: int, train: bool) -> str:
    """What compute_score returns under RESULT_KEY: the ranges, the length of the response it
    parsed (the agent loop checks it decoded the same text) and whether they count (`train`):
    validation rows carry their ranges for the report, but their rm_scores stay the sequence
    reward, so validation rewards compare across runs and credits."""
    return json.dumps({"chars": response_chars, "train": train, "ranges": ranges}, ensure_ascii=False)


def decode(text: str) -> tuple[int, bool, list[dict]]:
    data = json.loads(text)
    return int(data["chars"]), bool(data["train"]), list(data["ranges"])


# the reward kwargs key (src/rewards/credit/launch.py adds it with reward.credit=token only, so a
# sequence-credit verl config is byte-identical to one built before token credit existed)
KWARGS_KEY = "token_credit"
_CACHE: dict[str, CreditSettings] = {}


def from_reward_kwargs(kwargs: Mapping[str, Any]) -> CreditSettings | None:
    """The token-credit settings in verl's reward kwargs, validated once per process; None when
    the run uses sequence credit."""
    raw = kwargs.get(KWARGS_KEY)
    if raw is None:
        return None
    plain = {"severity_weights": {str(k): v for k, v in dict(raw.get("severity_weights") or {}).items()},
             "scale": raw.get("scale"), "source": raw.get("source")}
    key = json.dumps(plain, sort_keys=True, default=str)
    if key not in _CACHE:
        _CACHE[key] = CreditSettings.from_kwargs(plain)
    return _CACHE[key]

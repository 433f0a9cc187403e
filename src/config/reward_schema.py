"""The types of the `reward` group (conf/reward_base/default.yaml, conf/reward/*.yaml), merged like the
rest of src/config/schema.py: a misspelt key (`reward.guards.wrong_languag.penalty=-2`,
`+reward.formt.bonus=1`) or a value of the wrong type is refused by Hydra at composition, with the key.

The values live in the yaml (`MISSING`: "the group sets it"); what a type cannot say is checked where
the reward is built: a guard's penalty is at most 0 (its interval here, checked by the plan's range
check, src/plan/values.py RANGES), the rest by the reward's own settings (src/rewards/settings.py
RewardSettings, which the reward workers run too and the launcher reads the reward kwargs back through).
Component names are open (reward.plugins registers more): weights and clips are maps, checked
against the registered components there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from omegaconf import MISSING

from .settings_field import setting


def _penalty():
    # a guard lowers the score of an answer it flags: a positive penalty would reward the hack it catches
    return setting(doc="added to format.bonus when the guard flags an answer (the lowest penalty that applies)",
                   interval="(-inf, 0]", example="-1.0")


@dataclass
class WrongLanguageSchema:
    enable: bool = MISSING
    penalty: float = _penalty()
    # null: the languages src.data.prepare accepts (src/data/templates.py LANGUAGE_NAMES)
    languages: Optional[List[str]] = MISSING
    min_confidence: float = MISSING
    min_letters: int = MISSING
    # null: py3langid; else a fastText LID model's path
    model: Optional[str] = MISSING


@dataclass
class RepetitionSchema:
    enable: bool = MISSING
    penalty: float = _penalty()
    max_share: float = MISSING
    margin: float = MISSING
    min_tokens: int = MISSING


@dataclass
class CodeMixSchema:
    enable: bool = MISSING
    penalty: float = _penalty()
    max_share: float = MISSING
    min_tokens: int = MISSING


@dataclass
class LengthCoverageSchema:
    enable: bool = MISSING
    penalty: float = _penalty()
    min_ratio: float = MISSING
    max_ratio: float = MISSING
    without_reference: bool = MISSING


@dataclass
class GuardsSchema:
    """reward.guards: one group per guard (src/rewards/guards.py)."""
    wrong_language: WrongLanguageSchema = field(default_factory=WrongLanguageSchema)
    repetition: RepetitionSchema = field(default_factory=RepetitionSchema)
    code_mix: CodeMixSchema = field(default_factory=CodeMixSchema)
    length_coverage: LengthCoverageSchema = field(default_factory=LengthCoverageSchema)


@dataclass
class FormatSchema:
    bonus: float = MISSING
    floor: float = MISSING
    answer_floor: float = MISSING
    strict_outside: bool = MISSING


@dataclass
class DegenerateSchema:
    empty_penalty: float = MISSING
    source_copy_penalty: float = MISSING
    copy_similarity: float = MISSING
    wrong_script_penalty: float = MISSING
    min_script_share: float = MISSING
    length_ratio_penalty: float = MISSING
    max_length_ratio: float = MISSING


@dataclass
class DiscreteSchema:
    enable: bool = MISSING
    components: List[str] = MISSING
    thresholds: List[float] = MISSING


@dataclass
class SpanSchema:
    reference: bool = MISSING
    word_tag_source: str = MISSING
    word_tag_threshold: float = MISSING


@dataclass
class MetricXSchema:
    reference: bool = MISSING


@dataclass
class ValidationSchema:
    splits: List[str] = MISSING
    weights: Dict[str, float] = MISSING


@dataclass
class ClientSchema:
    timeout_s: float = MISSING
    retries: int = MISSING
    backoff_s: float = MISSING
    max_connections: int = MISSING


@dataclass
class TokenCreditSchema:
    severity_weights: Dict[str, float] = MISSING
    scale: Optional[float] = MISSING
    weight: float = MISSING


@dataclass
class RewardSchema:
    name: str = MISSING
    # off | train | eval: where the span model is used (src/rewards/settings.py MODES)
    mode: str = MISSING
    sentence_models: List[str] = MISSING
    span_model: Optional[str] = MISSING
    validation_models: List[str] = MISSING
    plugins: List[str] = MISSING
    # component -> weight; components are registered classes (src/rewards/components.py, reward.plugins)
    weights: Dict[str, float] = MISSING
    # a negative training weight trains the policy away from what that component rewards (src/rewards/group_kwargs.py)
    allow_negative_weights: bool = setting(
        False, doc="a negative reward.weights.<component> is refused unless this is true (it trains toward answers "
                   "that component scores worse)")
    # component -> [lo, hi]
    clip: Dict[str, List[float]] = MISSING
    format: FormatSchema = field(default_factory=FormatSchema)
    degenerate: DegenerateSchema = field(default_factory=DegenerateSchema)
    guards: GuardsSchema = field(default_factory=GuardsSchema)
    discrete: DiscreteSchema = field(default_factory=DiscreteSchema)
    span: SpanSchema = field(default_factory=SpanSchema)
    metricx: MetricXSchema = field(default_factory=MetricXSchema)
    validation: ValidationSchema = field(default_factory=ValidationSchema)
    round_decimals: int = MISSING
    client: ClientSchema = field(default_factory=ClientSchema)
    # sum | per_component (src/rewards/normalise.py)
    normalise: str = MISSING
    # sequence | token (src/rewards/credit/launch.py)
    credit: str = MISSING
    token_credit: TokenCreditSchema = field(default_factory=TokenCreditSchema)

"""Reward settings, the worker side: the dataclasses verl's reward kwargs are read into, and
`RewardSettings.from_kwargs(kwargs)`, which validates that dict once per reward process.

The kwargs are built at launch from the reward group (src/rewards/group_kwargs.py reward_kwargs),
which reads them back through from_kwargs, so a reward that would fail in the workers is refused
before anything is written. reward.guards' settings: each guard's own class (src/rewards/guards.py,
src/rewards/guard_registry.py).
Stdlib only: the reward workers import it.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Mapping

from src.rewards import components, plugins
from src.rewards.degenerate import DegenerateSettings
from src.rewards.guards import GuardSettings, read_guards
from src.rewards.typed_settings import read_section, setting_field
from src.rewards.values import RewardConfigError, number, number_range
from src.scorer.backends import OWN_METRICS

# The answer components are registered classes (src/rewards/components.py): built-in ones and the
# user's, loaded from reward.plugins (src/rewards/plugins.py) before any weight is read.
MODES = ("off", "train", "eval")
WORD_TAG_SOURCES = ("spans", "probs")


# One typed definition per group (src/rewards/typed_settings.py): the workers read the reward kwargs into these, the
# launcher's Hydra schema is made from them (src/config/reward_schema.py); the values are in
# conf/reward_base/default.yaml. What one field's type cannot say is checked in RewardSettings._check.
@dataclass(frozen=True)
class FormatSettings:
    """reward.format: MT-R1-Zero's format reward (src/rewards/parsing.py)."""
    bonus: float = setting_field("added to the answer's score when the format is right")
    floor: float = setting_field("the format part when the format is broken (the scorer is not called then)")
    answer_floor: float = setting_field("the answer part when the format is broken")
    strict_outside: bool = setting_field("only whitespace may stand before the first tag, between </think> and "
                                         "<translate>, and after </translate>")


@dataclass(frozen=True)
class DiscreteSettings:
    """reward.discrete: the listed components become the share of `thresholds` they reach."""
    enable: bool = setting_field("whether the listed components are made discrete")
    components: tuple[str, ...] = setting_field("the components made discrete (each a component of the run)")
    thresholds: tuple[float, ...] = setting_field("ascending thresholds; a component scores the share of them it "
                                                  "reaches")


@dataclass(frozen=True)
class SpanSettings:
    """reward.span: requests to the span model (XCOMET)."""
    reference: bool = setting_field("send the reference too (XCOMET's reference mode); false: QE mode")
    word_tag_source: str = setting_field("word tags from `spans` (a word is BAD iff it overlaps an error span) or "
                                         "`probs` (P(BAD) > word_tag_threshold)")
    word_tag_threshold: float = setting_field("P(BAD) above which a word is BAD with word_tag_source=probs, in [0, 1)")


@dataclass(frozen=True)
class ClientSettings:
    """reward.client: the reward workers' HTTP client to the QE scoring service (src/rewards/client.py)."""
    timeout_s: float = setting_field("deadline of one request (queueing in the service included), > 0")
    retries: int = setting_field("attempts after the first on connection errors, timeouts, 5xx and 503; then the "
                                 "step fails")
    backoff_s: float = setting_field("first backoff in seconds; doubles each attempt")
    max_connections: int = setting_field("connections per reward worker to the service, >= 1")


@dataclass(frozen=True)
class ValidationGroup:
    """reward.validation: the validation reward (src/rewards/group_kwargs.py writes it into the kwargs as
    validation_splits and validation_weights)."""
    splits: tuple[str, ...] = setting_field("the rows scored with the validation reward: those whose extra_info.split "
                                            "is one of these (every other row is a training row)")
    weights: Mapping[str, float] = setting_field("component -> weight of the validation reward, the same for every "
                                                 "group so runs compare; a component weighted here and not in "
                                                 "reward.weights is a held-out metric")


@dataclass(frozen=True)
class OwnMetricSettings:
    """reward.<metric> of a scorer backend's own metric (reward.metricx: MetricX-24, src.scorer.backends.OWN_METRICS):
    how the reward asks for it; in the kwargs only when the run has that component."""
    reference: bool = setting_field("send the reference too (the backend's reference mode) on rows that have one, in "
                                    "training and validation alike; false: QE mode (source + translation)")


@dataclass(frozen=True)
class RewardSettings:
    reward: str
    mode: str
    # component -> scorer service model name (None: not available); "span" is the span model
    models: Mapping[str, str | None]
    train_weights: Mapping[str, float]
    validation_weights: Mapping[str, float]
    clip: Mapping[str, tuple[float, float]]
    format: FormatSettings
    degenerate: DegenerateSettings
    discrete: DiscreteSettings
    span: SpanSettings
    validation_splits: tuple[str, ...]
    round_decimals: int
    client: ClientSettings
    # files/modules that registered components of the user's (resolved at launch)
    plugins: tuple[str, ...] = ()
    # the guards against gaming the QE reward (all off for kwargs written before they existed)
    guards: GuardSettings | None = None
    # per backend metric of its own (src.scorer.backends.OWN_METRICS): send the reference too (the
    # backend's reference mode) on rows that have one; kwargs `<metric>: {reference: ...}`, there only
    # when the run has that component; False (QE mode) without
    own_reference: Mapping[str, bool] = field(default_factory=dict)

    @property
    def span_at_validation(self) -> bool:
        """mode train|eval: the span model is called (and logged) on validation rows."""
        return self.mode != "off" and self.models.get("span") is not None

    def weights(self, validation: bool) -> Mapping[str, float]:
        return self.validation_weights if validation else self.train_weights

    @classmethod
    def from_kwargs(cls, kw: Mapping[str, Any]) -> "RewardSettings":
        specs = tuple(str(p) for p in kw.get("plugins") or ())
        try:
            names = plugins.component_names(specs)
        except (plugins.PluginError, components.ComponentError) as exc:
            raise RewardConfigError(str(exc)) from None
        # a component not in every run is in this one when the launcher wrote its weight (run_components)
        names = tuple(n for n in names if components.get_component(n).in_every_run
                      or n in dict(kw.get("train_weights") or {}))
        try:
            s = cls(
                reward=str(kw["reward"]),
                mode=str(kw["mode"]),
                models={k: (None if v is None else str(v)) for k, v in dict(kw["models"]).items()},
                train_weights=weights_of(kw["train_weights"], "train_weights", names),
                validation_weights=weights_of(kw["validation_weights"], "validation_weights", names),
                clip=clips_of(kw["clip"], names),
                format=read_section(FormatSettings, kw["format"], "reward.format"),
                degenerate=read_section(DegenerateSettings, kw["degenerate"], "reward.degenerate"),
                discrete=read_section(DiscreteSettings, kw["discrete"], "reward.discrete"),
                span=read_section(SpanSettings, kw["span"], "reward.span"),
                validation_splits=tuple(str(x) for x in kw["validation_splits"]),
                round_decimals=int(kw["round_decimals"]),
                client=read_section(ClientSettings, kw["client"], "reward.client"),
                plugins=specs,
                guards=read_guards(kw.get("guards")),
                own_reference={m: _own_reference(m, kw.get(m)) for m in OWN_METRICS},
            )
        except KeyError as exc:
            raise RewardConfigError(f"reward kwargs lack {exc.args[0]!r} (build them with "
                                    f"src.rewards.group_kwargs.reward_kwargs)") from None
        except TypeError as exc:  # an unknown or missing key in a sub-section
            raise RewardConfigError(f"reward kwargs: {exc}") from None
        s._check()
        return s

    def _check(self) -> None:
        if self.mode not in MODES:
            raise RewardConfigError(f"reward.mode must be off, train or eval, got {self.mode!r}")
        for name, (lo, hi) in self.clip.items():
            if lo > hi:
                raise RewardConfigError(f"reward.clip.{name}: lower bound {lo} is above upper bound {hi}")
        if self.span.word_tag_source not in WORD_TAG_SOURCES:
            raise RewardConfigError(f"reward.span.word_tag_source must be spans or probs, got "
                                    f"{self.span.word_tag_source!r}")
        if not 0.0 <= self.span.word_tag_threshold < 1.0:
            raise RewardConfigError(f"reward.span.word_tag_threshold must be in [0, 1), got "
                                    f"{self.span.word_tag_threshold}")
        unknown = [c for c in self.discrete.components if c not in self.train_weights]
        if unknown:
            raise RewardConfigError(f"reward.discrete.components: unknown {unknown[0]!r} "
                                    f"(known: {', '.join(self.train_weights)})")
        if self.discrete.enable and (not self.discrete.thresholds
                                     or list(self.discrete.thresholds) != sorted(self.discrete.thresholds)):
            raise RewardConfigError("reward.discrete.thresholds must be a non-empty ascending list, got "
                                    f"{list(self.discrete.thresholds)}")
        d = self.degenerate
        if not 0.0 < d.copy_similarity <= 1.0:
            raise RewardConfigError(f"reward.degenerate.copy_similarity must be in (0, 1], got {d.copy_similarity}")
        if not 0.0 <= d.min_script_share <= 1.0:
            raise RewardConfigError(f"reward.degenerate.min_script_share must be in [0, 1], got {d.min_script_share}")
        if d.max_length_ratio <= 1.0:
            raise RewardConfigError(f"reward.degenerate.max_length_ratio must be > 1, got {d.max_length_ratio}")
        if not 0 <= self.round_decimals <= 12:
            raise RewardConfigError(f"reward.round_decimals must be in 0..12, got {self.round_decimals}")
        c = self.client
        if c.timeout_s <= 0 or c.retries < 0 or c.backoff_s < 0 or c.max_connections < 1:
            raise RewardConfigError("reward.client needs timeout_s > 0, retries >= 0, backoff_s >= 0, "
                                    f"max_connections >= 1; got {c}")
        for label, weights in (("train", self.train_weights), ("validation", self.validation_weights)):
            for comp, w in weights.items():
                role = components.get_component(comp).model
                if w != 0.0 and role is not None and self.models.get(role) is None:
                    raise RewardConfigError(_missing_model_message(label, comp, role, w, self.mode))
        if self.mode != "train":
            trained = [c for c, w in self.train_weights.items()
                       if w != 0.0 and components.get_component(c).model == "span"]
            if trained:
                raise RewardConfigError(f"train_weights.{trained[0]} is set but reward.mode={self.mode}: the span "
                                        f"model counts in training only with mode=train")
        if not any(w != 0.0 for w in self.train_weights.values()):
            raise RewardConfigError("the training reward has no answer component (every weight is 0): set "
                                    "reward.weights or reward.validation.weights")


def _missing_model_message(label: str, comp: str, role: str, weight: float, mode: str) -> str:
    key = "reward.weights" if label == "train" else "reward.validation.weights"
    if role == "span":
        return (f"{key}.{comp}={weight} needs the span model: set reward.span_model (and reward.mode=train "
                f"or eval; it is {mode})")
    own = OWN_METRICS.get(role)
    kind = "a reference-based COMET-DA model (e.g. comet_da)" if role == "comet" else \
        f"a {own.label} model (e.g. {own.example_model})" if own else "a QE model such as CometKiwi (e.g. cometkiwi_da)"
    return f"{key}.{comp}={weight} needs {kind} in reward.sentence_models or reward.validation_models"


def _unknown_component(key: str, comp: str, names: tuple[str, ...]) -> RewardConfigError:
    near = difflib.get_close_matches(comp, names, n=1, cutoff=0.6)
    hint = f"did you mean reward.{key}.{near[0]}? " if near else ""
    return RewardConfigError(f"reward.{key}: unknown component {comp!r} ({hint}known: {', '.join(names)}; "
                             f"a component of your own is loaded through reward.plugins)")


def weights_of(value: Any, key: str, names: tuple[str, ...]) -> dict[str, float]:
    """reward.<key> (component -> weight) over `names`, 0.0 for a component not given; an unknown one refused."""
    weights = {c: 0.0 for c in names}
    for comp, w in dict(value).items():
        if comp not in weights:
            raise _unknown_component(key, comp, names)
        weights[comp] = number(w, f"{key}.{comp}")
    return weights


def clips_of(value: Any, names: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """Each component's clip range: reward.clip.<name>, else the class's default."""
    given = dict(value)
    unknown = [c for c in given if c not in names]
    if unknown:
        raise _unknown_component("clip", unknown[0], names)
    return {c: number_range(given[c], f"clip.{c}") if c in given else tuple(components.get_component(c).clip)
            for c in names}


def _own_reference(metric: str, value: Mapping[str, Any] | None) -> bool:
    """reward kwargs `<metric>` of a backend's own metric -> whether it reads the reference; absent
    (no such component in the run): QE mode."""
    return value is not None and read_section(OwnMetricSettings, value, f"reward.{metric}").reference


def score_bounds(s: RewardSettings, validation: bool) -> tuple[float, float]:
    """The lowest and highest score the settings can give (the fuzz tests check against it)."""
    lo_ans = hi_ans = 0.0
    for comp, w in s.weights(validation).items():
        lo, hi = s.clip[comp]
        lo_ans += min(w * lo, w * hi)
        hi_ans += max(w * lo, w * hi)
    d = s.degenerate
    penalties = [d.empty_penalty, d.source_copy_penalty, d.wrong_script_penalty, d.length_ratio_penalty]
    if s.guards is not None:
        penalties += [getattr(s.guards, name).penalty for name in s.guards.enabled()]
    f = s.format
    candidates = [f.floor + f.answer_floor, f.bonus + lo_ans, f.bonus + hi_ans] + [f.bonus + p for p in penalties]
    return min(candidates), max(candidates)

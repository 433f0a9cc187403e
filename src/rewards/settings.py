"""Reward settings: from the reward group (conf/reward/*.yaml) to verl's reward_kwargs and back.

Two sides, one module, so they cannot drift apart:
- launch side: `reward_kwargs(reward_cfg, scorer_models)` turns the composed reward group into the
  plain dict verl passes to `compute_score` as keyword arguments
  (`reward.custom_reward_function.reward_kwargs`). The mode is resolved here (which components
  count in training), so the verl config in the snapshot shows the exact reward that runs.
- worker side: `RewardSettings.from_kwargs(kwargs)` validates that dict once per process.

Nothing here varies per launch (no URL, token or path): a re-run from a snapshot must give a
byte-identical verl config. The service URL and token reach the workers through the environment.
Stdlib only: the reward workers import it.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, Mapping

from src.rewards import components, plugins
from src.scorer.vocabulary import METRICX_METRIC, metric_of

# The answer components are registered classes (src/rewards/components.py): built-in ones and the
# user's, loaded from reward.plugins (src/rewards/plugins.py) before any weight is read.
MODES = ("off", "train", "eval")
WORD_TAG_SOURCES = ("spans", "probs")


class RewardConfigError(ValueError):
    """A reward setting that cannot work; one line naming the key."""


@dataclass(frozen=True)
class FormatSettings:
    bonus: float
    floor: float
    answer_floor: float
    strict_outside: bool


@dataclass(frozen=True)
class DegenerateSettings:
    empty_penalty: float
    source_copy_penalty: float
    copy_similarity: float
    wrong_script_penalty: float
    min_script_share: float
    length_ratio_penalty: float
    max_length_ratio: float


GUARD_NAMES = ("wrong_language", "repetition", "code_mix", "length_coverage")


@dataclass(frozen=True)
class WrongLanguageSettings:
    enable: bool
    penalty: float
    # the identifier chooses among these (ISO 639-1 codes, as py3langid names them); the target must be one
    languages: tuple[str, ...]
    # normalised probability of the other language at or above which the answer is flagged
    min_confidence: float
    # letters left after removing names and numbers below which the answer is not judged
    min_letters: int
    # a fastText LID model (OpenLID-v2, GlotLID .bin; labels mapped by src.rewards.guards.lid_code)
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
    """reward.guards (conf/reward_base/default.yaml; the checks: src/rewards/guards.py)."""
    wrong_language: WrongLanguageSettings
    repetition: RepetitionSettings
    code_mix: CodeMixSettings
    length_coverage: LengthCoverageSettings

    def enabled(self) -> tuple[str, ...]:
        return tuple(n for n in GUARD_NAMES if getattr(self, n).enable)


@dataclass(frozen=True)
class DiscreteSettings:
    enable: bool
    components: tuple[str, ...]
    thresholds: tuple[float, ...]


@dataclass(frozen=True)
class SpanSettings:
    reference: bool
    word_tag_source: str
    word_tag_threshold: float


@dataclass(frozen=True)
class MetricXSettings:
    # send the reference too (MetricX's reference mode) on rows that have one; false: QE mode
    reference: bool


@dataclass(frozen=True)
class ClientSettings:
    timeout_s: float
    retries: int
    backoff_s: float
    max_connections: int


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
    # MetricX-24 requests; in the kwargs only when the run has the metricx component (QE mode without)
    metricx: MetricXSettings = MetricXSettings(reference=False)

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
                train_weights=_weights(kw["train_weights"], "train_weights", names),
                validation_weights=_weights(kw["validation_weights"], "validation_weights", names),
                clip=_clips(kw["clip"], names),
                format=FormatSettings(**{k: _num(v, f"format.{k}") if k != "strict_outside" else bool(v)
                                         for k, v in dict(kw["format"]).items()}),
                degenerate=DegenerateSettings(**{k: _num(v, f"degenerate.{k}")
                                                 for k, v in dict(kw["degenerate"]).items()}),
                discrete=DiscreteSettings(
                    enable=bool(kw["discrete"]["enable"]),
                    components=tuple(str(c) for c in kw["discrete"]["components"]),
                    thresholds=tuple(_num(t, "discrete.thresholds") for t in kw["discrete"]["thresholds"])),
                span=SpanSettings(
                    reference=bool(kw["span"]["reference"]),
                    word_tag_source=str(kw["span"]["word_tag_source"]),
                    word_tag_threshold=_num(kw["span"]["word_tag_threshold"], "span.word_tag_threshold")),
                validation_splits=tuple(str(x) for x in kw["validation_splits"]),
                round_decimals=int(kw["round_decimals"]),
                client=ClientSettings(
                    timeout_s=_num(kw["client"]["timeout_s"], "client.timeout_s"),
                    retries=int(kw["client"]["retries"]),
                    backoff_s=_num(kw["client"]["backoff_s"], "client.backoff_s"),
                    max_connections=int(kw["client"]["max_connections"])),
                plugins=specs,
                guards=_guards(kw.get("guards")),
                metricx=_metricx(kw.get("metricx")),
            )
        except KeyError as exc:
            raise RewardConfigError(f"reward kwargs lack {exc.args[0]!r} (build them with "
                                    f"src.rewards.settings.reward_kwargs)") from None
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
    kind = {"comet": "a reference-based COMET-DA model (e.g. comet_da)",
            METRICX_METRIC: "a MetricX-24 model (e.g. metricx24_xl)"}.get(role, "a QE model such as CometKiwi "
                                                                                 "(e.g. cometkiwi_da)")
    return f"{key}.{comp}={weight} needs {kind} in reward.sentence_models or reward.validation_models"


def _num(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RewardConfigError(f"reward.{key} must be a finite number, got {value!r}")
    return float(value)


def _range(value: Any, key: str) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise RewardConfigError(f"reward.{key} must be [lo, hi], got {value!r}")
    return _num(value[0], key), _num(value[1], key)


def _unknown_component(key: str, comp: str, names: tuple[str, ...]) -> RewardConfigError:
    near = difflib.get_close_matches(comp, names, n=1, cutoff=0.6)
    hint = f"did you mean reward.{key}.{near[0]}? " if near else ""
    return RewardConfigError(f"reward.{key}: unknown component {comp!r} ({hint}known: {', '.join(names)}; "
                             f"a component of your own is loaded through reward.plugins)")


def _weights(value: Any, key: str, names: tuple[str, ...]) -> dict[str, float]:
    weights = {c: 0.0 for c in names}
    for comp, w in dict(value).items():
        if comp not in weights:
            raise _unknown_component(key, comp, names)
        weights[comp] = _num(w, f"{key}.{comp}")
    return weights


def _clips(value: Any, names: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """Each component's clip range: reward.clip.<name>, else the class's default."""
    given = dict(value)
    unknown = [c for c in given if c not in names]
    if unknown:
        raise _unknown_component("clip", unknown[0], names)
    return {c: _range(given[c], f"clip.{c}") if c in given else tuple(components.get_component(c).clip)
            for c in names}


def _metricx(value: Mapping[str, Any] | None) -> MetricXSettings:
    """reward kwargs `metricx` -> settings; absent (no metricx component in the run): QE mode."""
    given = dict(value or {"reference": False})
    if set(given) != {"reference"} or not isinstance(given["reference"], bool):
        raise RewardConfigError(f"reward.metricx must be {{reference: true|false}}, got {given}")
    return MetricXSettings(reference=given["reference"])


_GUARD_CLASSES = {"wrong_language": WrongLanguageSettings, "repetition": RepetitionSettings,
            "code_mix": CodeMixSettings, "length_coverage": LengthCoverageSettings}


def _guards(value: Mapping[str, Any] | None) -> GuardSettings:
    """reward kwargs `guards` -> settings (src/rewards/guards.py). None (a verl config written
    before the guards existed, replayed from a snapshot): every guard off, so the replay scores as
    the original run did."""
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
    for name, cls in _GUARD_CLASSES.items():
        sub = dict(given.get(name) or {})
        fields = cls.__dataclass_fields__
        if not sub:
            sub = {f: _GUARDS_OFF[name][f] for f in fields}
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
                kw[f] = tuple(v)
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
                kw[f] = _num(v, key)
        out[name] = cls(**kw)
    s = GuardSettings(**out)
    _check_guards(s)
    return s


def _check_guards(s: GuardSettings) -> None:
    w, r, c, lc = s.wrong_language, s.repetition, s.code_mix, s.length_coverage
    if not 0.0 < w.min_confidence <= 1.0:
        raise RewardConfigError(f"reward.guards.wrong_language.min_confidence must be in (0, 1], got {w.min_confidence}")
    if w.enable:
        from src.rewards.guards import known_languages  # loads the LID model: only when on

        known = set(known_languages(w.model))  # a model that is missing or does not load: one line
        bad = [lang for lang in w.languages if lang not in known]
        identifier = "py3langid" if w.model is None else f"the fastText model {w.model}"
        if bad or len(w.languages) < 2:
            raise RewardConfigError(f"reward.guards.wrong_language.languages: {bad[0]!r} is not a language the identifier "
                        f"knows ({identifier}: ISO 639-1 codes such as en, de, zh, ja)" if bad else
                        "reward.guards.wrong_language.languages needs at least two languages")
    for key, share in (("repetition.max_share", r.max_share), ("repetition.margin", r.margin),
                       ("code_mix.max_share", c.max_share)):
        if not 0.0 < share <= 1.0:
            raise RewardConfigError(f"reward.guards.{key} must be in (0, 1], got {share}")
    if not 0.0 < lc.min_ratio < 1.0 < lc.max_ratio:
        raise RewardConfigError(f"reward.guards.length_coverage needs 0 < min_ratio < 1 < max_ratio, got "
                    f"{lc.min_ratio} and {lc.max_ratio}")


# every guard off (the settings of a replayed verl config from before the guards)
_GUARDS_OFF = {
    "wrong_language": {"enable": False, "penalty": -1.0, "languages": ["en", "zh"], "min_confidence": 0.9,
                       "min_letters": 12, "model": None},
    "repetition": {"enable": False, "penalty": -1.0, "max_share": 0.3, "margin": 0.2, "min_tokens": 8},
    "code_mix": {"enable": False, "penalty": -1.0, "max_share": 0.2, "min_tokens": 2},
    "length_coverage": {"enable": False, "penalty": -1.0, "min_ratio": 0.6, "max_ratio": 1.8,
                        "without_reference": False},
}


# ----------------------------------------------------------------------------------------------
# launch side
# ----------------------------------------------------------------------------------------------
def sentence_model_components(reward_cfg: Mapping[str, Any], scorer_models: Mapping[str, Any]) -> dict:
    """Model role comet/kiwi/metricx -> scorer model name, from the group's sentence and validation
    models, by the metric its kind gives (src.scorer.vocabulary.metric_of): a model that needs the
    reference is COMET-DA-like (comet), one that does not is QE (kiwi), a MetricX one is metricx.
    comet and kiwi are always keys (None: no such model); metricx only when the group names one, so
    the reward kwargs (verl config, run id) of a group without MetricX stay as they were."""
    out: dict[str, str | None] = {"comet": None, "kiwi": None}
    names = list(dict.fromkeys(list(reward_cfg.get("sentence_models") or [])
                               + list(reward_cfg.get("validation_models") or [])))
    for name in names:
        if name not in scorer_models:
            raise RewardConfigError(f"reward {reward_cfg.get('name')} names scorer model {name!r}, which "
                                    f"conf/scorer does not define (known: {', '.join(sorted(scorer_models))})")
        spec = scorer_models[name]
        comp = metric_of(bool(spec.get("needs_ref")), kind=spec.get("kind"))
        if out.get(comp) is not None:
            raise RewardConfigError(f"reward {reward_cfg.get('name')}: two {comp} models ({out[comp]}, {name}); "
                                    f"keep one in reward.sentence_models/validation_models")
        out[comp] = name
    return out


def reward_kwargs(reward_cfg: Mapping[str, Any], scorer_models: Mapping[str, Any],
                  root: str | Path | None = None) -> dict:
    """The reward group (composed, resolved) -> the kwargs verl passes to compute_score. `root`: the
    checkout that relative reward.plugins paths are read from (default: the working directory)."""
    try:
        specs = plugins.resolve(reward_cfg.get("plugins") or [], Path(root or Path.cwd()))
        names = plugins.component_names(specs)  # the plugins' names must be known to check the weights
    except (plugins.PluginError, components.ComponentError) as exc:
        raise RewardConfigError(str(exc)) from None
    mode = reward_cfg["mode"]
    span_model = reward_cfg.get("span_model") if mode != "off" else None
    models = {**sentence_model_components(reward_cfg, scorer_models), "span": span_model}
    train = _weights(reward_cfg["weights"], "weights", names)
    validation = _weights(reward_cfg["validation"]["weights"], "validation.weights", names)
    _clips(reward_cfg["clip"], names)  # a clip of a component that does not exist would be dropped below
    names = run_components(names, models, train, validation)
    train = {c: w for c, w in train.items() if c in names}
    validation = {c: w for c, w in validation.items() if c in names}
    span_only = {}
    if mode != "train":
        # the span model is not part of the training reward (it is not loaded with mode=off)
        span_only = {c: w for c, w in train.items() if w and components.get_component(c).model == "span"}
        train = {c: (0.0 if c in span_only else w) for c, w in train.items()}
    if not any(train.values()):
        # the policy would learn the format bonus alone, whatever the run's name says it trains on
        raise RewardConfigError(_no_training_weight_message(reward_cfg.get("name"), mode, span_only, validation))
    kw = {
        "reward": reward_cfg["name"],
        "mode": mode,
        "models": models,
        "train_weights": train,
        "validation_weights": validation,
        "clip": {c: [float(x) for x in (reward_cfg["clip"].get(c) or components.get_component(c).clip)]
                 for c in names},
        "format": dict(reward_cfg["format"]),
        "degenerate": dict(reward_cfg["degenerate"]),
        "discrete": {"enable": bool(reward_cfg["discrete"]["enable"]),
                     "components": list(reward_cfg["discrete"]["components"]),
                     "thresholds": list(reward_cfg["discrete"]["thresholds"])},
        "span": dict(reward_cfg["span"]),
        "validation_splits": list(reward_cfg["validation"]["splits"]),
        "round_decimals": int(reward_cfg["round_decimals"]),
        "client": dict(reward_cfg["client"]),
    }
    if specs:  # only then: the verl config (and run id) of a run without plugins stays as it was
        kw["plugins"] = specs
    if METRICX_METRIC in names:  # idem: only a run with MetricX has its settings
        kw["metricx"] = {"reference": (reward_cfg.get("metricx") or {}).get("reference", False)}
    if reward_cfg.get("guards") is not None:
        # a guard that is not a group (reward.guards.X=false) goes through as is: _guards refuses it in one line
        kw["guards"] = {name: ({k: (list(v) if k == "languages" else v) for k, v in dict(sub).items()}
                               if isinstance(sub, Mapping) else sub)
                        for name, sub in dict(reward_cfg["guards"]).items()}
        lid = kw["guards"].get("wrong_language") or {}
        if isinstance(lid.get("model"), str) and lid["model"].strip():
            # absolute, as the QE checkpoints: the reward workers do not run in the launcher's directory
            lid["model"] = str(Path(root or Path.cwd()) / Path(lid["model"]).expanduser())
    RewardSettings.from_kwargs(kw)  # refuse at launch what would fail in the workers
    return kw


def _no_training_weight_message(group: str | None, mode: str, span_only: Mapping[str, float],
                                validation: Mapping[str, float]) -> str:
    """One line: why the training reward has no weighted component, and the two ways out."""
    if span_only:
        why = (f"its weighted components ({', '.join(f'reward.weights.{c}={w:g}' for c, w in span_only.items())}) "
               f"come from the span model, which trains only with reward.mode=train (this run: reward.mode={mode})")
        fix = "set reward.mode=train, or weight a sentence-level component"
    else:
        why = "every reward.weights.* is 0"
        fix = "weight a component"
    example = " ".join(f"reward.weights.{c}={w:g}" for c, w in validation.items() if w) or "reward.weights.kiwi=1"
    return (f"reward {group}: no component has a training weight: {why}, so the policy would learn the format "
            f"bonus alone; {fix}, e.g. {example} (what validation scores)")


def run_components(names: tuple[str, ...], models: Mapping[str, str | None], train: Mapping[str, float],
                   validation: Mapping[str, float]) -> tuple[str, ...]:
    """The components of this run: every one `in_every_run`, and each other one (MetricX) when the
    group names a model for its role (then it is logged at validation: a held-out metric when its
    training weight is 0) or weights it (a missing model is refused by RewardSettings then)."""
    def used(name: str) -> bool:
        comp = components.get_component(name)
        return (comp.in_every_run or train.get(name, 0.0) != 0.0 or validation.get(name, 0.0) != 0.0
                or (comp.model is not None and models.get(comp.model) is not None))

    return tuple(n for n in names if used(n))


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

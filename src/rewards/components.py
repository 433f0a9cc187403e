"""Reward components: one class each, registered by name; reward groups name them in yaml.

A component turns what is known about one translation (source, reference, target language, and
the QE service's answers) into one number. The reward groups weight components by name
(`reward.weights.<name>`, `reward.validation.weights.<name>`), clip each to `reward.clip.<name>`
(default: the class's `clip`), and sum them (src/rewards/combine.py). Everything else follows from
the class: which scorer model the reward asks (`model`, a role: reference-based sentence model,
QE sentence model, span model) and what it asks that model for (`span_outputs`).

Adding one, in a file of your own (no edit of src/), as verl registers reward managers
(verl/workers/reward_manager/registry.py `register`) and torchtune its reward classes:

    from src.rewards.components import ComponentInput, RewardComponent, register_component

    @register_component
    class LengthMatch(RewardComponent):
        name = "length_match"
        def value(self, x: ComponentInput) -> float | None:
            if not x.reference:
                return None                      # not computable: counts at its lower clip bound
            return 1.0 - min(1.0, abs(len(x.translation) / len(x.reference) - 1.0))

and in the config: `reward.plugins=[path/to/length_match.py] reward.weights.length_match=0.5`
(src/rewards/plugins.py loads the file in the launcher, which validates the weights, and in every
reward worker). Imports nothing heavy itself (BLEU loads sacrebleu when first used).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Mapping

from src.data import terms as term_matching
from src.data.terms import Term
from src.scorer.backends import OWN_METRICS, unit_score
from src.scorer.vocabulary import QE_METRIC, REFERENCE_METRIC, SPAN_METRIC

# The roles a component can read a QE model's answer under (reward kwargs `models`):
#   comet    a reference-based sentence model (COMET-DA), from reward.sentence_models/validation_models
#   kiwi     a QE sentence model (CometKiwi), idem
#   <own>    each backend's own metric (src.scorer.backends.OWN_METRICS; reference mode with
#            reward.<own>.reference), idem
#   span     the group's span_model (XCOMET): score, MQM, error spans, word tags
# A sentence model's role is the metric its kind gives (src.scorer.backends KINDS[kind].metric).
MODEL_ROLES = (REFERENCE_METRIC, QE_METRIC, *OWN_METRICS, "span")
# what the span model can be asked for (src/scorer/schema.py `want`)
SPAN_OUTPUTS = ("score", "spans", "word_tags")


@dataclass(frozen=True)
class ComponentInput:
    """One translation and what the QE service answered for it, per model role. A role is absent
    when that model was not asked for this row (not weighted in training, or no reference)."""
    translation: str
    source: str
    reference: str
    tgt_lang: str
    answers: Mapping[str, Mapping] = field(default_factory=dict)  # role -> the service's result dict
    # the row's required terms (extra_info["terms"], src/data/terms.py); () for a row without
    terms: tuple[Term, ...] = ()


class RewardComponent:
    """Subclass and set `name`; override `value` (and the class attributes that apply)."""
    name: ClassVar[str]
    # the QE model role it reads (MODEL_ROLES), None for a component computed here (BLEU)
    model: ClassVar[str | None] = None
    # span model outputs it needs beyond score and spans (e.g. ("word_tags",)); model="span" only
    span_outputs: ClassVar[tuple[str, ...]] = ()
    # default clip range of the normalised value, used unless reward.clip.<name> says otherwise
    clip: ClassVar[tuple[float, float]] = (0.0, 1.0)
    # False: part of a run (a key of its reward kwargs and of every result) only when the group names
    # a model for its role or weights it; a component added after runs were recorded keeps their
    # verl config, run id and logged keys as they were (src/rewards/group_kwargs.py run_components)
    in_every_run: ClassVar[bool] = True

    def value(self, x: ComponentInput) -> float | None:
        """The logged value, or None when it cannot be computed for this row (then a weighted
        component counts at its lower clip bound: the worst value, never a silent neutral one)."""
        raise NotImplementedError

    def normalised(self, value: float) -> float:
        """The logged value on the scale the clip range and weights are given in."""
        return value


_REGISTRY: dict[str, RewardComponent] = {}


class ComponentError(ValueError):
    """A component that cannot be registered or is unknown; one line."""


def register_component(cls: type[RewardComponent]) -> type[RewardComponent]:
    """Class decorator: make `cls` available under `cls.name`. Registering the same class again
    (a module imported twice, by path and by name) is a no-op; another class under a taken name
    is refused."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ComponentError(f"reward component {cls.__qualname__} needs a `name` that is a Python identifier "
                             f"(it becomes a config key, reward.weights.<name>), got {name!r}")
    if cls.model is not None and cls.model not in MODEL_ROLES:
        raise ComponentError(f"reward component {name}: model must be one of {', '.join(MODEL_ROLES)} or None, "
                             f"got {cls.model!r}")
    bad = [o for o in cls.span_outputs if o not in SPAN_OUTPUTS]
    if bad or (cls.span_outputs and cls.model != "span"):
        raise ComponentError(f"reward component {name}: span_outputs {list(cls.span_outputs)} need model='span' "
                             f"and values from {', '.join(SPAN_OUTPUTS)}")
    lo, hi = cls.clip
    if not lo <= hi:
        raise ComponentError(f"reward component {name}: clip {cls.clip} has its lower bound above the upper")
    old = _REGISTRY.get(name)
    if old is not None and (type(old).__module__, type(old).__qualname__) != (cls.__module__, cls.__qualname__):
        raise ComponentError(f"reward component name {name!r} is taken by {type(old).__module__}."
                             f"{type(old).__qualname__}; give {cls.__qualname__} another name")
    _REGISTRY[name] = cls()
    return cls


def get_component(name: str) -> RewardComponent:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ComponentError(f"unknown reward component {name!r} (known: {', '.join(known())}; a component of "
                             f"your own is loaded through reward.plugins)") from None


def known() -> tuple[str, ...]:
    """Registered component names: the built-in ones first, in their order, then plugins'."""
    return tuple(_REGISTRY)


def trained_metrics(weights: Mapping[str, float]) -> list[str]:
    """The metrics an evaluation computes (BLEU, and each QE model's: src.scorer.backends METRICS) that a reward with
    these component weights trains on: a component's own name where it is one (bleu, comet, kiwi, a backend's own),
    the span model's metric (xcomet) for each of its components (xcomet, mqm, ok_ratio). An unknown component (a
    plugin not loaded here) counts for nothing."""
    found = []
    for name, weight in weights.items():
        component = _REGISTRY.get(name)
        if not weight or component is None:
            continue
        metric = SPAN_METRIC if component.model == "span" else name
        if metric not in found:
            found.append(metric)
    return found


# ----------------------------------------------------------------------------------------------
# built-in components (this order is the order of the logged keys)
# ----------------------------------------------------------------------------------------------
def _score(answer: Mapping | None, key: str = "score") -> float | None:
    import math

    value = (answer or {}).get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


@register_component
class Bleu(RewardComponent):
    """Sentence BLEU (0..100, sacrebleu, tokenised per target language), weighted as BLEU/100."""
    name = "bleu"

    def value(self, x: ComponentInput) -> float | None:
        if not x.reference.strip():
            return None
        from src.rewards.bleu import sentence_bleu

        return sentence_bleu(x.translation, x.reference, x.tgt_lang)

    def normalised(self, value: float) -> float:
        return value / 100.0


@register_component
class CometDA(RewardComponent):
    """COMET-DA with the reference (a sentence model that needs it)."""
    name = "comet"
    model = "comet"

    def value(self, x: ComponentInput) -> float | None:
        return _score(x.answers.get("comet"))


@register_component
class Kiwi(RewardComponent):
    """CometKiwi: QE from source and translation."""
    name = "kiwi"
    model = "kiwi"

    def value(self, x: ComponentInput) -> float | None:
        return _score(x.answers.get("kiwi"))


@register_component
class XComet(RewardComponent):
    """The span model's regression score (XCOMET)."""
    name = "xcomet"
    model = "span"

    def value(self, x: ComponentInput) -> float | None:
        return _score(x.answers.get("span"))


@register_component
class Mqm(RewardComponent):
    """MQM from the span model's error spans: (25 - min(25, minor + 5 major + 10 critical)) / 25."""
    name = "mqm"
    model = "span"

    def value(self, x: ComponentInput) -> float | None:
        return _score(x.answers.get("span"), "mqm")


@register_component
class OkRatio(RewardComponent):
    """Share of the translation's words tagged OK (words beyond the encoder's limit are untagged)."""
    name = "ok_ratio"
    model = "span"
    span_outputs = ("word_tags",)

    def value(self, x: ComponentInput) -> float | None:
        words = (x.answers.get("span") or {}).get("word_tags") or []
        tagged = [w.get("tag") for w in words if isinstance(w, dict) and w.get("tag") in ("OK", "BAD")]
        return (sum(1 for t in tagged if t == "OK") / len(tagged)) if tagged else None


class OwnMetricComponent(RewardComponent):
    """A backend's own metric (its descriptor's OwnMetric), read under the role of its name; QE mode
    unless reward.<name>.reference asks for the reference. Logged as the model's raw score, on its
    own scale (an error score: 0 is no error, LOWER IS BETTER). Weighted and clipped as
    src.scorer.backends.unit_score (1 - score/hi for a lower-is-better 0..hi): 0..1, higher is
    better, like the COMET family, so reward.clip.<name> and the weights read as they do for kiwi.
    Linear on purpose: an MQM-like score costs about as much per error (1 point a minor, 5 a major),
    so each error costs the reward the same whatever the rest of the translation scored."""
    in_every_run = False

    def value(self, x: ComponentInput) -> float | None:
        return _score(x.answers.get(self.model))

    def normalised(self, value: float) -> float:
        return unit_score(self.model, value)


# one component per backend metric of its own, named as the metric (a group names a model for it)
for _metric in OWN_METRICS:
    register_component(type(f"{_metric}_component", (OwnMetricComponent,),
                            {"name": _metric, "model": _metric, "__module__": __name__}))


@register_component
class TermSuccess(RewardComponent):
    """Terminology: the share of the row's required terms (those whose source side is in the source) whose target
    side is in the translation (src/data/terms.py matching); None for a row that requires none (weighted, it then
    counts at its lower clip bound for every answer to that prompt alike, which moves no GRPO advantage). In a run
    when weighted, or when the data's template gives terms (src/rewards/launch.py), so a run without terms keeps
    its verl config and logged keys."""
    name = "term"
    in_every_run = False

    def value(self, x: ComponentInput) -> float | None:
        found, required = term_matching.hits(x.terms, x.source, x.translation)
        return found / required if required else None


BUILTIN = known()

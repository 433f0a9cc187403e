"""The function verl 0.9.1 calls for every trajectory: `compute_score`.

Wired by the launcher (src/verl_config/ppo_trainer.py) as
    reward.custom_reward_function.path = pkg://src.rewards.compute, name = compute_score
    reward.custom_reward_function.reward_kwargs = src.rewards.group_kwargs.reward_kwargs(...)
verl merges the reward_kwargs into the call's keyword arguments.

Per response:  parse (template's format) -> cheap degenerate checks and guards -> BLEU + QE service
-> weights and clipping. Format failures and (in training) degenerate or guarded answers never
reach the service.

Validation: verl 0.9.1 has no separate validation reward function, so a row is a validation row
when its `extra_info["split"]` (written by src.data.prepare) is one of `validation.splits`
(val, test). Validation rows get the validation reward (format + CometKiwi + BLEU by default, the
same for every group so runs compare), and every component the group can compute is logged.

The returned dict always has the same keys (verl stacks each key across the batch): numbers, or
None where a component was not computed (verl's validation metrics skip None), plus the strings
`format_error`, `src`, `translation` (exactly the scored text) and `error_spans` (JSON); with
reward.credit=token also `credit_ranges` (JSON, src/rewards/credit/ranges.py); with
reward.normalise=per_component also `reward_parts` (JSON, src/rewards/normalise.py).

The package, module by module:
    parsing.py         strict <think>/<translate> format per prompt template
    degenerate.py      empty, source copy, wrong script, absurd length (no scorer call)
    guards.py          wrong language, repetition, code-mixing, length coverage (no scorer call)
    components.py      the answer components (bleu, comet, kiwi, xcomet, mqm, ok_ratio), a registry
    plugins.py         reward.plugins: the user's components, loaded in every reward process
    bleu.py            sacrebleu sentence BLEU tokenised per target language
    client.py          shared aiohttp client to the QE scoring service (src/scorer)
    qe.py              which models a row needs, their answers as components
    combine.py         discrete thresholds, clipping, weights
    normalise.py       reward.normalise=per_component: the score's parts, each normalised in its group
    settings.py        reward group config -> verl reward_kwargs -> validated settings
    components_log.py  per-sample components for src/report ($QE_REWARD_COMPONENTS_DIR)
    compute.py         compute_score, the function verl calls
    credit/            token-level credit from error spans (reward.credit=token): ranges, token
                       mapping, the grpo_token estimator, verl's agent loop seam
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from omegaconf import Container

from src.data.templates import expected_format
from src.data.terms import Term, parse_terms
from src.rewards import components_log, normalise
from src.rewards.combine import answer_score
from src.rewards.components import ComponentInput, get_component
from src.rewards.credit import ranges as credit_ranges
from src.rewards.degenerate import Degenerate, detect
from src.rewards.guards import Guards, check as check_guards
from src.rewards.parsing import parse_response
from src.rewards.qe import SEVERITIES, QEResult, assess, spans_json
from src.rewards.settings import RewardSettings

_SETTINGS_CACHE: dict[str, RewardSettings] = {}
_SETTINGS_BY_OBJECTS: dict[tuple, tuple[RewardSettings, tuple]] = {}
# Keyword arguments verl's reward managers add themselves (not reward settings).
_VERL_EXTRA_KWARGS = ("reward_router_address", "reward_model_tokenizer")


def _plain(obj: Any) -> Any:
    """OmegaConf containers (verl hands reward_kwargs over as DictConfig values) -> dict/list."""
    if isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return obj
    if hasattr(obj, "items"):
        return {str(k): _plain(v) for k, v in obj.items()}
    if hasattr(obj, "__iter__"):
        return [_plain(v) for v in obj]
    return obj


def _same_objects_key(kwargs: Mapping[str, Any]) -> tuple | None:
    """A key naming the very objects verl hands over, or None when a value is a plain container (which a caller
    may change between calls). verl builds the reward kwargs once per process (verl/trainer/ppo/reward.py
    get_custom_reward_fn: `dict(reward_kwargs)`, its values nodes of the run's config that nothing writes) and
    passes the same objects to every call: their identities stand for their contents."""
    key = []
    for name, value in kwargs.items():
        if isinstance(value, (str, bytes, int, float, bool)) or value is None:
            key.append((name, "=", value))
        elif isinstance(value, Container):
            key.append((name, "id", id(value)))
        else:
            return None
    return tuple(sorted(key, key=lambda item: item[0]))


def settings_from(kwargs: Mapping[str, Any]) -> RewardSettings:
    """Validated settings, parsed once per process and kwargs. Turning verl's config nodes into plain values and
    the key took 1.4 ms a call (most of a BLEU-only reward's time); verl's own objects are now looked up by
    identity, so that happens once per process."""
    same = _same_objects_key(kwargs)
    if same is not None and same in _SETTINGS_BY_OBJECTS:
        return _SETTINGS_BY_OBJECTS[same][0]
    plain = _plain(dict(kwargs))
    key = json.dumps(plain, sort_keys=True, default=str)
    if key not in _SETTINGS_CACHE:
        _SETTINGS_CACHE[key] = RewardSettings.from_kwargs(plain)
    if same is not None:
        # the objects are kept with their settings: an id stays theirs while they live
        _SETTINGS_BY_OBJECTS[same] = (_SETTINGS_CACHE[key], tuple(kwargs.values()))
    return _SETTINGS_CACHE[key]


def _target_lang(data_source: str, extra_info: Mapping[str, Any]) -> str:
    if extra_info.get("tgt_lang"):
        return str(extra_info["tgt_lang"])
    pair = str(extra_info.get("lang_pair") or str(data_source or "").rsplit("/", 1)[-1])
    return pair.split("-", 1)[1] if "-" in pair else ""


def _source_lang(data_source: str, extra_info: Mapping[str, Any]) -> str:
    if extra_info.get("src_lang"):
        return str(extra_info["src_lang"])
    pair = str(extra_info.get("lang_pair") or str(data_source or "").rsplit("/", 1)[-1])
    return pair.split("-", 1)[0] if "-" in pair else ""


def _terms(info: Mapping[str, Any], data_source: str) -> tuple[Term, ...]:
    """The row's required terms (extra_info["terms"], written by src.data.prepare), () for a row without."""
    if info.get("terms") is None:
        return ()
    return parse_terms(info["terms"], _source_lang(data_source, info), _target_lang(data_source, info))


def _clean(text: str) -> str:
    # Lone surrogates cannot be sent as JSON text (the service refuses them); a tokenizer never
    # makes them, fuzzers do.
    return text.encode("utf-8", "replace").decode("utf-8") if isinstance(text, str) else str(text)


async def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                        *, ask_scorer: bool = True, **kwargs: Any) -> dict:
    """`ask_scorer=False` (python -m src.evaluate.inspect_reward --no-scorer; verl never passes it): the QE
    service is not asked, so every component that needs a QE model stays None, and a weighted one
    counts at its lower clip bound (src/rewards/combine.py); everything else is computed as in training."""
    s = settings_from({k: v for k, v in kwargs.items() if k not in _VERL_EXTRA_KWARGS})
    info = dict(extra_info or {})
    if "template" not in info:
        raise ValueError(f"extra_info of a {data_source!r} row has no 'template': prepare the data with "
                         f"python -m src.data.prepare (it writes split, src, tgt_lang and template)")
    validation = str(info.get("split", "")) in s.validation_splits
    source = _clean(str(info.get("src") or ""))
    reference = _clean(str(ground_truth or ""))
    tgt_lang = _target_lang(data_source, info)
    terms = _terms(info, data_source)

    response = _clean(solution_str or "")
    parsed = parse_response(response, expected_format(str(info["template"])), s.format.strict_outside)
    # every component of this run (built-in and plugins'), None until computed: verl stacks each key
    values: dict[str, float | None] = {c: None for c in s.train_weights}
    values.update({f"n_{sev}": None for sev in SEVERITIES})
    degenerate, guards, qe = Degenerate(), Guards.none_of(s.guards), QEResult()
    scored = False  # the answer is answer_score's weighted sum (not a floor or a penalty)
    if not parsed.ok:
        format_part, answer = s.format.floor, s.format.answer_floor
    else:
        format_part = s.format.bonus
        degenerate = detect(parsed.translation, source, reference, tgt_lang, s.degenerate)
        if s.guards is not None and not degenerate.empty:
            guards = check_guards(parsed.translation, source, reference, _source_lang(data_source, info),
                                  tgt_lang, s.guards, terms)
        condemned = degenerate.any or guards.any
        # training short-cuts degenerate and guarded answers; validation still measures the copies,
        # wrong-script and guarded ones, so its metrics describe every well-formed answer of a sane length
        measurable = not (degenerate.empty or degenerate.length_ratio)
        if measurable and (validation or not condemned):
            if ask_scorer:
                qe = await assess(parsed.translation, source, reference, tgt_lang, s, validation)
            row = ComponentInput(parsed.translation, source, reference, tgt_lang, qe.answers, terms)
            for name in s.train_weights:
                component = get_component(name)
                if qe.has(component):
                    values[name] = component.value(row)
            values.update(qe.counts)
        if condemned:
            answer = min(p for p in (degenerate.penalty(s.degenerate) if degenerate.any else None,
                                     guards.penalty(s.guards)) if p is not None)
        else:
            answer, scored = answer_score(values, s, validation), True

    score = format_part + answer
    result = {
        "score": score,
        "score_rounded": round(score, s.round_decimals),
        "format_ok": float(parsed.ok),
        "format_error": parsed.error,
        "answer": answer,
        **values,
        **degenerate.flags(),
        **guards.flags(),
        "src": source,
        "translation": parsed.translation,
        "error_spans": spans_json(qe.spans),
    }
    credit = credit_ranges.from_reward_kwargs(kwargs)  # None: reward.credit=sequence
    if credit is not None:
        errors = [] if not parsed.ok else (qe.words if credit.source == "words" else qe.spans)
        result[credit_ranges.RESULT_KEY] = credit_ranges.encode(
            credit_ranges.response_ranges(errors, parsed.translation, parsed.start, credit), len(response),
            train=not validation)
    if normalise.enabled(kwargs):
        result[normalise.RESULT_KEY] = normalise.encode(
            normalise.parts(values, s, validation, format_part, answer, scored))
    components_log.write(components_log.step_of(info), "val" if validation else "train",
                         {k: v for k, v in result.items() if k != "score_rounded"})
    return result


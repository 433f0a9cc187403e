"""The term component (issue 46, item 4): the share of a row's required terms found in the answer, scored from the
extra_info src.data.prepare writes, through verl's own reward manager; part of a run only when weighted or when the
data's template gives terms, so every other run keeps its verl config; shown by the reward inspector."""
from __future__ import annotations

import json

import pytest

from src.config import compose_config
from src.evaluate.inspect_reward import main as inspect
from src.rewards.launch import reward_launch
from tests.helpers.reward_config import extra_info, kwargs_for
from tests.helpers.verl_reward_harness import manager, run, sample

__all__ = ["tokenizer"]

SRC, REF = "我们的机器学习模型很好。", "Our machine learning model is good."
TERMS = [{"src": "机器学习", "tgt": "machine learning"}]
# BLEU and the term only: no QE model, so no scorer service (as experiment=learn_tiny)
NO_QE = ("reward=comet", "algo=grpo", "reward.sentence_models=[]", "reward.validation_models=[]",
         "reward.weights.kiwi=0", "reward.validation.weights.kiwi=0")


@pytest.mark.parametrize("answer, terms, term", [
    ("Our machine learning model is good.", TERMS, 1.0),
    ("Our ML model is good.", TERMS, 0.0),
    ("Our model is good.", [{"src": "模型", "tgt": "model"}, *TERMS], 0.5),
    # the source does not hold the term: nothing is required
    ("Our model is good.", [{"src": "猫", "tgt": "cat"}], None),
    ("Our model is good.", None, None),
])
def test_the_term_component_through_verls_reward_manager(tokenizer, no_scorer_env, answer, terms, term):
    overrides = (*NO_QE, "reward.weights.term=1")
    info = extra_info(SRC, template="chat_terms", **({} if terms is None else {"terms": terms}))
    response = f"<think>x</think><translate>{answer}</translate>"
    extra = run(manager(tokenizer, *overrides), sample(tokenizer, response, info, REF))["reward_extra_info"]
    assert extra["term"] == term
    bleu = extra["bleu"] / 100
    # a row that requires no term counts the weighted component at its lower clip bound (0), alike for every answer
    assert extra["answer"] == pytest.approx(bleu + (term or 0.0), abs=1e-6)


def test_the_term_component_is_in_a_run_only_when_weighted_or_the_data_gives_terms():
    assert "term" not in kwargs_for("comet")["train_weights"]  # every other run's verl config as it was
    assert kwargs_for("comet", "reward.weights.term=0.5")["train_weights"]["term"] == 0.5
    logged = reward_launch(compose_config(["reward=comet", "data.template=chat_terms"])).kwargs
    assert logged["train_weights"]["term"] == 0.0 and list(logged["clip"]["term"]) == [0.0, 1.0]
    assert "term" not in reward_launch(compose_config(["reward=comet"])).kwargs["train_weights"]


def _inspect(tmp_path, capsys, lines: list[dict], *overrides: str) -> tuple[int, list[dict], str]:
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(l, ensure_ascii=False) + "\n" for l in lines), encoding="utf-8")
    out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}.jsonl"
    rc = inspect(["--input", str(data), "--out", str(out), "--no-scorer", *overrides])
    err = capsys.readouterr().err
    return rc, ([json.loads(l) for l in out.read_text().splitlines()] if rc == 0 else []), err


def test_the_inspector_shows_the_term_component(tmp_path, capsys, no_scorer_env):
    lines = [{"id": "kept", "src": SRC, "ref": REF, "lang_pair": "zh-en", "hyp": REF, "terms": TERMS},
             {"id": "missed", "src": SRC, "ref": REF, "lang_pair": "zh-en", "hyp": "Our ML model is good.",
              "terms": [{"zh": "机器学习", "en": "machine learning"}]}]
    rc, records, err = _inspect(tmp_path, capsys, lines, *NO_QE, "reward.weights.term=1")
    assert rc == 0, err
    assert [r["components"]["term"] for r in records] == [1.0, 0.0]
    rc, _, err = _inspect(tmp_path, capsys, [{**lines[0], "terms": [{"src": "机器学习"}]}], *NO_QE)
    assert rc == 2 and err.count("\n") == 1 and "line 1: \"terms\": a term must have src and tgt keys" in err, err


def test_the_terminology_docs_inspector_example(tmp_path, capsys, no_scorer_env):
    """docs/terminology.md's command, on its fixture: the term component of each line."""
    out = tmp_path / "example.jsonl"
    rc = inspect(["--input", "tests/fixtures/inspect_terms.jsonl", "--out", str(out), "--no-scorer", "reward=comet",
                  "reward.weights.term=1"])
    assert rc == 0, capsys.readouterr().err
    assert [json.loads(l)["components"]["term"] for l in out.read_text().splitlines()] == [1.0, 0.0, None]

"""The pluggable generator's wiring (vLLM stubbed: the train env has none; tests/evaluate/test_cpu_generation.py runs
vLLM's CPU build for real), prompt rendering as verl renders it, and starting the QE service for an evaluation."""
from __future__ import annotations

import sys
import types

import pytest

from src.evaluate.generators import VLLMGenerator
from src.evaluate.vllm_generation import PLAIN_CHAT_TEMPLATE, render_prompt
from src.evaluate.options import UsageError, parse_options
from src.evaluate.qe_metrics import QEInput, score_segments
from src.evaluate.scorer_service import plan_for, started_service
from src.evaluate.testset import read_testset
from src.plan import ScorerModelSpec, ScorerPlan
from tests.evaluate.conftest import same_spans
from tests.helpers.scorer_service import SCORER_PYTHON, TINY_MODELS


def test_plain_template_is_the_one_verl_gets():
    from src.verl_config import VERL_KEYS

    kwargs = dict(VERL_KEYS)["++data.apply_chat_template_kwargs"](None, {"model": {"use_chat_template": False}})
    assert kwargs == {"chat_template": PLAIN_CHAT_TEMPLATE}


def test_vllm_generator_calls(testset, tokenizer, monkeypatch, tmp_path):
    calls = {}

    class LLM:
        def __init__(self, **kwargs):
            calls["engine"] = kwargs

        def get_tokenizer(self):
            return tokenizer

        def generate(self, prompts, params):
            calls["prompts"], calls["params"] = prompts, params
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=f"<translate>{i}</translate>")])
                    for i in range(len(prompts))]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=lambda **kw: kw))
    data, _ = testset
    rows = read_testset(data)
    opts = parse_options([f"data={data}", "checkpoint=/m", "temperature=0.7", "top_p=0.9", "top_k=20",
                          "max_new_tokens=64", "tp=2", "seed=3", "chat_template=true"])
    out = VLLMGenerator(tmp_path / "model", opts).generate(rows)
    assert out == [f"<translate>{i}</translate>" for i in range(len(rows))]
    assert calls["engine"] == {"model": str(tmp_path / "model"), "tensor_parallel_size": 2,
                               "gpu_memory_utilization": 0.85, "seed": 3}
    assert calls["params"] == {"temperature": 0.7, "top_p": 0.9, "max_tokens": 64, "seed": 3, "top_k": 20}
    # chat template on: Qwen's layout with the generation prompt
    assert calls["prompts"][0] == tokenizer.apply_chat_template(rows[0].messages, add_generation_prompt=True,
                                                                tokenize=False)
    assert calls["prompts"][0].endswith("<|im_start|>assistant\n")
    # off (the default, as conf/model): the messages' contents only, as verl renders them
    assert render_prompt(tokenizer, rows[0].messages, False) == "".join(m["content"] for m in rows[0].messages)
    greedy = VLLMGenerator(tmp_path, parse_options([f"data={data}", "checkpoint=/m"])).sampling_kwargs()
    assert greedy == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 1024, "seed": 1}


def test_plan_for_checks_the_models_before_generation(tmp_path):
    opts = parse_options(["data=x.parquet", "generator=file", "responses=r.jsonl", "metrics=bleu,kiwi"])
    cfg = {"python": str(SCORER_PYTHON), "dtype": "bf16", "batch_tokens": 4096, "ready_timeout_s": 60,
           "restarts": 0, "models": {"cometkiwi_da": {"path": str(tmp_path / "missing.ckpt"), "kind": "cometkiwi"}}}
    with pytest.raises(UsageError, match="kiwi: checkpoint of cometkiwi_da not found: .*missing.ckpt"):
        plan_for(opts, cfg)
    with pytest.raises(UsageError, match="no model 'cometkiwi_da' in conf/scorer"):
        plan_for(opts, {**cfg, "models": {}})
    (tmp_path / "missing.ckpt").write_bytes(b"")
    plan = plan_for(opts, cfg, environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert [m.name for m in plan.models] == ["cometkiwi_da"] and plan.dtype == "bf16" and plan.device == "cuda"


def test_the_launchers_scorer_group_composes():
    from src.evaluate.scorer_service import composed_scorer_config

    cfg = composed_scorer_config()
    assert {"comet_da", "cometkiwi_da", "xcomet_xl"} <= set(cfg["models"])
    assert cfg["python"].endswith(".venv-scorer/bin/python")


def test_started_service_scores_like_the_running_one(tiny_comet_dir, scorer_service):
    """A service started here (ScorerProcess) gives the same scores as the shared test service."""
    models = tuple(ScorerModelSpec(name=name, path=str(tiny_comet_dir / "models" / fx), kind=kind, encoder=None)
                   for name, (fx, kind) in TINY_MODELS.items() if name in ("cometkiwi_da", "xcomet_xl"))
    plan = ScorerPlan(placement="cpu", device="cpu", training_gpu_index=None, dtype="fp32", python=str(SCORER_PYTHON),
                      batch_tokens=4096, ready_timeout_s=120, restarts=0, models=models)
    opts = parse_options(["data=x.parquet", "generator=file", "responses=r.jsonl", "metrics=kiwi,xcomet",
                          "xcomet_reference=false"])
    inputs = [QEInput("这只猫坐在垫子上。", "The cat sat on the mat.", "", "en"),
              QEInput("今天天气很好。", "Nice weather.", "", "en")]
    with started_service(plan, log=lambda _: None) as (url, token):
        got = score_segments(url, token, inputs, opts)
    kiwi = scorer_service.results("cometkiwi_da", [{"src": x.src, "mt": x.mt} for x in inputs])
    xcomet = scorer_service.results("xcomet_xl", [{"src": x.src, "mt": x.mt, "lang": "en"} for x in inputs],
                                  want=["score", "spans"])
    for g, k, x in zip(got, kiwi, xcomet):
        assert g["kiwi"] == pytest.approx(k["score"], abs=1e-6)
        assert g["xcomet"] == pytest.approx(x["score"], abs=1e-6) and same_spans(g["spans"], x["spans"])

"""Generation on a machine without a GPU (issue 49, item 7): `python -m src.evaluate ... accelerator=cpu` generates
with vLLM's CPU build in the CPU loop env (.venv-loop), the engine set as the CPU loop's rollouts are
(conf/accelerator/cpu.yaml), on the tiny policy the CPU loop trains (src/tiny_models/policy.py). Real vLLM, no stub:
what reaches the engine shows in what it generates (max_new_tokens bounds each answer, greedy repeats itself,
sampling does not), and a model vLLM cannot load is one line and exit 1 with nothing written.
"""
from __future__ import annotations

import json
import shutil

import pytest

from src.evaluate.cli import EXIT_FAILED, main
from src.evaluate.generators import CpuLoopEnv
from src.evaluate.vllm_generation import render_prompt
from src.tiny_models.policy import ensure_built

MAX_NEW = 12


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu-gen") / "policy"
    ensure_built(out)
    return out


@pytest.fixture(scope="module")
def cpu_env():
    return CpuLoopEnv.composed()


def test_the_engine_gets_the_cpu_loops_settings(cpu_env):
    # one owner: the accelerator group's verl keys for the rollout's vLLM engine
    assert cpu_env.engine_kwargs == {"kv_cache_memory_bytes": 268435456, "distributed_executor_backend": "uni",
                                     "enforce_eager": True}
    assert cpu_env.env["VLLM_TARGET_DEVICE"] == "cpu" and cpu_env.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert cpu_env.python.name == "python" and cpu_env.python.parent.parent.name == ".venv-loop"


def test_a_cpu_evaluation_generates_with_the_loop_envs_vllm(policy, cpu_env, testset, tmp_path, capsys):
    from transformers import AutoTokenizer

    data, _ = testset
    out = tmp_path / "eval"
    code = main([f"checkpoint={policy}", f"data={data}", "accelerator=cpu", "metrics=bleu,chrf",
                 f"max_new_tokens={MAX_NEW}", "extract=raw", f"out={out}"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"generating 7 translations with vLLM (CPU) from {policy}" in err, err
    segments = [json.loads(line) for line in (out / "segments.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model_dir"] == str(policy) and summary["options"]["accelerator"] == "cpu"
    greedy = [s["response"] for s in segments]
    tok = AutoTokenizer.from_pretrained(policy, local_files_only=True)
    lengths = [len(tok(r, add_special_tokens=False)["input_ids"]) for r in greedy]
    # the random policy rarely stops by itself: max_new_tokens reached the engine and bounds every answer
    assert all(0 < n <= MAX_NEW for n in lengths) and MAX_NEW in lengths, lengths

    # the same prompts straight through the loop env: greedy repeats itself, sampling with another seed does not
    from src.evaluate.testset import read_testset
    rows = read_testset(data)
    conversations = [r.messages for r in rows]
    engine = {"model": str(policy), "seed": 1, **cpu_env.engine_kwargs}
    again = cpu_env.generate(engine, {"temperature": 0.0, "max_tokens": MAX_NEW, "seed": 1}, conversations, False)
    sampled = cpu_env.generate(engine, {"temperature": 1.0, "max_tokens": MAX_NEW, "seed": 2}, conversations, False)
    assert again == greedy
    assert sampled != greedy and len(sampled) == len(rows)
    # the prompt is verl's rendering of the row (the plain concatenation when the run uses no chat template)
    assert render_prompt(tok, rows[0].messages, False) == "".join(m["content"] for m in rows[0].messages)


def test_a_model_vllm_cannot_load_is_one_line_and_nothing_written(policy, testset, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(policy, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    data, _ = testset
    out = tmp_path / "eval"
    code = main([f"checkpoint={broken}", f"data={data}", "accelerator=cpu", "metrics=bleu", f"out={out}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_FAILED, err
    assert err[-1].startswith("evaluate: error: vLLM (CPU, ") and "exited with code" in err[-1], err
    assert not out.exists()


def test_accelerator_is_for_vllm_only(testset, capsys):
    data, responses = testset
    assert main([f"data={data}", "generator=file", f"responses={responses}", "accelerator=cpu"]) == 2
    assert "accelerator=cpu says where vLLM generates, and generator=file generates nothing" in capsys.readouterr().err
    assert main([f"data={data}", "checkpoint=/m", "accelerator=tpu"]) == 2
    assert "accelerator='tpu'; choose from gpu, cpu" in capsys.readouterr().err

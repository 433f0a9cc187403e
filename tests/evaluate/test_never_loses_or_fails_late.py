"""Issue 26, evaluation side: no existing directory replaced, no two evaluations in one directory,
unwritable output found before any work, a full disk leaves nothing, umask modes, responses that
belong to another test set, a scorer device this machine lacks, the table at full width."""
from __future__ import annotations

import datetime
import json
import os
import stat
import types

import pytest

from src.evaluate import cli
from src.evaluate.cli import main
from src.evaluate.options import UsageError, parse_options
from src.evaluate.outputs import print_table
from src.evaluate.scorer_service import plan_for
from tests.evaluate.conftest import CASES
from tests.helpers.limited_dirs import full_dir, read_only_dir
from tests.helpers.refusals import assert_one_line_refusal
from tests.helpers.scorer_service import SCORER_PYTHON

EXPECTED = ["scores.csv", "scores.md", "segments.jsonl", "summary.json"]


def _args(testset, *extra):
    data, responses = testset
    return [f"data={data}", "generator=file", f"responses={responses}", "metrics=bleu,chrf", *extra]


def test_default_out_names_never_collide(testset, tmp_path, monkeypatch):
    """Two evaluations started in the same second: before issue 26 the second replaced the first."""
    frozen = datetime.datetime(2026, 1, 2, 3, 4, 5)

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return frozen

    monkeypatch.setattr(cli, "dt", types.SimpleNamespace(datetime=Frozen))
    monkeypatch.setattr("src.config.PROJECT_ROOT", tmp_path)
    assert main(_args(testset)) == 0
    assert main(_args(testset, "limit=2")) == 0
    evals = sorted(p.name for p in (tmp_path / "outputs" / "eval").iterdir())
    assert evals == ["2026-01-02_03-04-05_test", "2026-01-02_03-04-05_test-2"]
    first, second = (tmp_path / "outputs" / "eval" / name / "segments.jsonl" for name in evals)
    assert len(first.read_text().splitlines()) == len(CASES) and len(second.read_text().splitlines()) == 2


def test_out_created_by_someone_else_meanwhile_is_left_alone(testset, tmp_path, monkeypatch, capsys):
    out = tmp_path / "eval"
    real = cli.evaluate

    def evaluate_while_someone_creates_out(prepared):
        result = real(prepared)
        out.mkdir()
        (out / "theirs.txt").write_text("not ours")
        return result

    monkeypatch.setattr(cli, "evaluate", evaluate_while_someone_creates_out)
    assert main(_args(testset, f"out={out}")) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"out: {out} was created by something else during the evaluation; wrote beside it: {out}-2"]
    assert [p.name for p in out.iterdir()] == ["theirs.txt"]
    assert sorted(p.name for p in (tmp_path / "eval-2").iterdir()) == EXPECTED


def test_read_only_out_is_refused_before_any_work(testset, tmp_path, capsys):
    with read_only_dir(tmp_path / "ro") as ro:
        assert main(_args(testset, f"out={ro}/eval")) == 2
        line = assert_one_line_refusal(capsys.readouterr().err,
                                       f"evaluate: error: out: cannot create {ro}/eval: cannot write in {ro}")
        assert "read-only file system" in line or "no write permission" in line
        assert list(ro.iterdir()) == []
    # checked first: a bad test set behind it is not read (nothing before it costs time)
    with read_only_dir(tmp_path / "ro2") as ro:
        assert main([f"data={tmp_path}/nope.parquet", "generator=file", "responses=x", f"out={ro}/e"]) == 2
        assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: out: cannot create")


def test_full_disk_is_one_line_exit_1_and_leaves_nothing(testset, tmp_path, capsys):
    with full_dir(tmp_path / "full") as full:
        assert main(_args(testset, f"out={full}/eval")) == 1
        line = assert_one_line_refusal(capsys.readouterr().err, f"evaluate: error: cannot write {full}/eval: ")
        assert line.endswith("No space left on device; nothing was written")
        assert [p.name for p in full.iterdir()] == ["filler"]


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_output_modes_follow_the_umask(testset, tmp_path, umask):
    old = os.umask(umask)
    try:
        assert main(_args(testset, f"out={tmp_path}/eval")) == 0
    finally:
        os.umask(old)
    out = tmp_path / "eval"
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {n: 0o666 & ~umask for n in EXPECTED}


def test_responses_with_a_duplicate_or_foreign_index_are_refused(testset, tmp_path, capsys):
    data, responses = testset
    lines = responses.read_text(encoding="utf-8").splitlines()
    dup = tmp_path / "dup.jsonl"
    dup.write_text("\n".join(lines + [json.dumps({"index": 3, "response": "another answer"})]) + "\n")
    assert main([f"data={data}", "generator=file", f"responses={dup}", "metrics=bleu", f"out={tmp_path}/o"]) == 2
    assert_one_line_refusal(capsys.readouterr().err,
                            f"evaluate: error: responses: index 3 appears twice in {dup} (lines 4 and 8)")
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text("\n".join(lines + [json.dumps({"index": 99, "response": "x"})]) + "\n")
    assert main([f"data={data}", "generator=file", f"responses={foreign}", "metrics=bleu", f"out={tmp_path}/o"]) == 2
    assert_one_line_refusal(capsys.readouterr().err,
                            f"evaluate: error: responses: index 99 (line 8 of {foreign}) is not in the test set")
    assert not (tmp_path / "o").exists()
    # limit= evaluates the first rows; the responses to the others still belong to the test set
    assert main([f"data={data}", "generator=file", f"responses={responses}", "metrics=bleu", "limit=2",
                 f"out={tmp_path}/o"]) == 0


def _kiwi_cfg(tmp_path):
    ckpt = tmp_path / "kiwi.ckpt"
    ckpt.write_bytes(b"")
    return {"python": str(SCORER_PYTHON), "dtype": "bf16", "batch_tokens": 4096, "ready_timeout_s": 60,
            "restarts": 0, "models": {"cometkiwi_da": {"path": str(ckpt), "kind": "cometkiwi"}}}


def test_scorer_device_defaults_to_what_the_machine_has(tmp_path):
    opts = parse_options(["data=x.parquet", "generator=file", "responses=r.jsonl", "metrics=kiwi"])
    assert opts.scorer_device == "auto"
    plan = plan_for(opts, _kiwi_cfg(tmp_path), environ={"CUDA_VISIBLE_DEVICES": ""})
    assert (plan.device, plan.placement, plan.dtype) == ("cpu", "cpu", "fp32")
    plan = plan_for(opts, _kiwi_cfg(tmp_path), environ={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert (plan.device, plan.placement, plan.dtype) == ("cuda", "dedicated", "bf16")


@pytest.mark.parametrize("device, visible", [("cuda", ""), ("cuda:1", "0")])
def test_a_gpu_this_machine_lacks_is_refused_before_generation(tmp_path, device, visible):
    opts = parse_options(["data=x.parquet", "generator=file", "responses=r.jsonl", "metrics=kiwi",
                          f"scorer_device={device}"])
    with pytest.raises(UsageError, match=rf"scorer_device={device} but this process sees \d GPU"):
        plan_for(opts, _kiwi_cfg(tmp_path), environ={"CUDA_VISIBLE_DEVICES": visible})


def test_cuda_without_a_gpu_is_one_line_from_the_command(testset, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    data, responses = testset
    assert main([f"data={data}", "generator=file", f"responses={responses}", "scorer_device=cuda",
                 f"out={tmp_path}/o"]) == 2
    assert_one_line_refusal(capsys.readouterr().err,
                            "evaluate: error: scorer_device=cuda but this process sees 0 GPU(s)")
    assert not (tmp_path / "o").exists()


def test_table_is_printed_at_full_width_when_stdout_is_not_a_terminal(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    row = {"direction": "zh-en", "segments": 1012, "format_ok": 99.5, "bleu": 23.456, "chrf": 51.234,
           "comet": 0.8512, "kiwi": 0.8123, "xcomet": 0.9012, "xcomet_mqm": 0.9512, "n_minor": 0.412,
           "n_major": 0.123, "n_critical": 0.011}
    print_table([row], title="test.parquet: results/.../actor")
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "direction" in line)
    for name in ("direction", "format ok %", "COMET-DA", "XCOMET MQM", "minor/seg", "critical/seg"):
        assert name in header, header
    body = next(line for line in lines if "zh-en" in line)
    for value in ("1012", "99.5", "23.46", "51.23", "0.8512", "0.8123", "0.9012", "0.9512", "0.412", "0.123", "0.011"):
        assert value in body, body
    assert max(len(line) for line in lines) > 80

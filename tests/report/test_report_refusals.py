"""Issue 26, report side: numbers no run can have, outputs that are files or someone else's, a verl
config that is not YAML, read-only and full output dirs, and a run that stopped before step 1."""
from __future__ import annotations

import os
import stat

import pytest

from src.report.cli import main
from tests.helpers.launches import launch
from tests.helpers.limited_dirs import full_dir, read_only_dir
from tests.helpers.refusals import assert_one_line_refusal

OUTPUTS = sorted(["rewards.png", "step_time.png", "throughput.png", "gpu_wait.png", "held_out.png", "val_samples.html",
                  "summary.md"])


def _exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse's refusals
        return e.code


@pytest.mark.parametrize("flag, value, needle", [
    ("--gpus", "-4", "argument --gpus: must be a positive integer, got -4"),
    ("--gpus", "0", "argument --gpus: must be a positive integer, got 0"),
    ("--prompts-per-step", "0", "must be a positive integer, got 0"),
    ("--samples-per-prompt", "-2", "must be a positive integer, got -2"),
    ("--max-samples-per-step", "0", "must be a positive integer, got 0"),
    ("--gpus", "four", "'four' is not an integer"),
])
def test_numbers_no_run_can_have_are_refused(run_dir, capsys, flag, value, needle):
    assert _exit_code([str(run_dir), flag, value]) == 2
    assert_one_line_refusal(capsys.readouterr().err, "report: error: ", needle)
    assert not (run_dir / "report").exists()


def test_out_that_is_a_file_is_one_line(run_dir, tmp_path, capsys):
    target = tmp_path / "notes.md"
    target.write_text("mine")
    assert main([str(run_dir), "--out", str(target)]) == 2
    assert_one_line_refusal(capsys.readouterr().err, "report: error: ", f"--out {target} is a file, not a directory")
    assert target.read_text() == "mine"


def test_out_holding_other_files_is_not_written_into(run_dir, tmp_path, capsys):
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "summary.md").write_text("# Chapter 4\n")
    assert main([str(run_dir), "--out", str(thesis)]) == 2
    assert_one_line_refusal(capsys.readouterr().err,
                            "report: error: ", f"--out {thesis} holds files a report did not write (summary.md)")
    assert [p.name for p in thesis.iterdir()] == ["summary.md"]
    assert (thesis / "summary.md").read_text() == "# Chapter 4\n"


def test_a_previous_report_is_replaced_whole(run_dir, capsys):
    assert main([str(run_dir)]) == 0
    assert main([str(run_dir), "--gpus", "4"]) == 0
    out = run_dir / "report"
    assert sorted(p.name for p in out.iterdir()) == OUTPUTS
    assert "4 GPUs; tokens per GPU" in (out / "summary.md").read_text()
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".report")]


@pytest.mark.parametrize("text, needles", [
    # the parser's own words after the place: libyaml says "did not find expected ...", PyYAML's Python parser
    # "expected ..." (src/record/yaml_files.py takes the C parser where PyYAML has it)
    ("trainer: {n_gpus_per_node: 2\nnnodes: 1\n", ("is not valid YAML (line 2, column 7): ", "expected ',' or '}'")),
    ("- just\n- a list\n", ("is not a YAML mapping of verl's keys (it holds a list)",)),
])
def test_verl_config_that_is_not_a_yaml_mapping_is_one_line(run_dir, tmp_path, capsys, text, needles):
    cfg = tmp_path / "verl.yaml"
    cfg.write_text(text)
    assert main([str(run_dir), "--verl-config", str(cfg)]) == 2
    assert_one_line_refusal(capsys.readouterr().err, "report: error: ", f"verl config {cfg} ", *needles)
    assert not (run_dir / "report").exists()


def test_verl_config_not_utf8_is_one_line(run_dir, tmp_path, capsys):
    cfg = tmp_path / "verl.yaml"
    cfg.write_bytes("trainer: 训练\n".encode("gbk"))
    assert main([str(run_dir), "--verl-config", str(cfg)]) == 2
    assert_one_line_refusal(capsys.readouterr().err, "report: error: ", f"verl config {cfg} is not UTF-8 text")


def test_read_only_out_is_refused_before_reading_the_run(run_dir, tmp_path, capsys):
    with read_only_dir(tmp_path / "ro") as ro:
        assert main([str(run_dir), "--out", str(ro / "report")]) == 2
        assert_one_line_refusal(capsys.readouterr().err,
                                "report: error: ", f"cannot write the report to {ro}/report: cannot write in {ro}")
        assert list(ro.iterdir()) == []


def test_full_out_is_one_line_and_the_previous_report_stays(run_dir, tmp_path, capsys):
    assert main([str(run_dir), "--out", str(tmp_path / "first")]) == 0
    previous = {p.name: p.read_bytes() for p in (tmp_path / "first").iterdir()}
    with full_dir(tmp_path / "full", keep={f"report/{n}": data for n, data in previous.items()}) as full:
        capsys.readouterr()
        assert main([str(run_dir), "--out", str(full / "report"), "--gpus", "4"]) == 1
        assert_one_line_refusal(capsys.readouterr().err, "report: error: ",
                                f"cannot write the report to {full}/report: ", "No space left on device",
                                "nothing was replaced")
        assert {p.name: p.read_bytes() for p in (full / "report").iterdir()} == previous
        assert sorted(p.name for p in full.iterdir()) == ["filler", "report"]


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_report_modes_follow_the_umask(run_dir, umask):
    old = os.umask(umask)
    try:
        assert main([str(run_dir)]) == 0
    finally:
        os.umask(old)
    out = run_dir / "report"
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask
    assert {stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {0o666 & ~umask}


def test_run_that_stopped_before_step_1_points_to_train_log(tmp_path, capsys):
    """What the launcher leaves when verl dies at start-up: the run dir's snapshot and train.log, and
    the checkpoint dir's metrics/ that VERL_FILE_LOGGER_PATH pointed into, empty."""
    ckpt = tmp_path / "results" / "m" / "seed1"
    (ckpt / "metrics").mkdir(parents=True)
    run = tmp_path / "outputs" / "runs" / "run_a"
    (run / "snapshot").mkdir(parents=True)
    (run / "snapshot" / "verl_config.yaml").write_text(f"trainer:\n  default_local_dir: {ckpt}\n")
    (run / "train.log").write_text("starting verl\nTraceback (most recent call last):\n"
                                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n\n")
    assert main([str(run)]) == 2
    line = assert_one_line_refusal(capsys.readouterr().err, "report: error: ",
                                   f"no training step was logged in {run}: {ckpt}/metrics is empty; training "
                                   f"stopped before its first step, see {run}/train.log",
                                   "(last line: torch.OutOfMemoryError: CUDA out of memory.")
    assert "VERL_FILE_LOGGER_PATH" not in line
    assert not (run / "report").exists()


def test_a_dry_runs_dir_is_called_a_dry_run(tmp_path, capsys):
    """Issue 51 (finding 10): the report of a dry run's dir said `no train.log: not a run directory the
    launcher wrote?`, though the launcher wrote it; the sweep comparison said it right. A real dry run."""
    out = tmp_path / "out"
    dry = launch(["reward=comet", "dry_run=true", f"paths.output_dir={out}/outputs",
                  f"paths.results_root={out}/results", f"paths.data_root={tmp_path}/data",
                  f"paths.model_root={tmp_path}/models"])
    assert dry.returncode == 0, dry.stderr
    (run,) = (out / "outputs" / "runs").iterdir()
    assert main([str(run)]) == 2
    line = assert_one_line_refusal(capsys.readouterr().err, "report: error: ",
                                   f"{run} is a dry run (dry_run=true): planned and snapshotted, never trained",
                                   f"--from-snapshot {run}/snapshot dry_run=false")
    assert "not a run directory" not in line
    assert not (run / "report").exists()

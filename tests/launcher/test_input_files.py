"""Issue 51 (finding 4): the model, data and QE files a run reads were looked for only by a real launch on
the compute node. A dry run notes every one it could not find; a Slurm submission (dry or real) refuses
in one line, before anything is queued, one that this machine sees missing, and notes what it cannot
check from here (a hub id, a path under slurm.node_local_dirs). What a launch builds is never missing.
No Slurm cluster is needed: the files are checked before the submission asks Slurm anything."""
from __future__ import annotations

from pathlib import Path

import pytest

from src.config import compose_config
from src.data.parquet_io import write_parquet_atomic
from src.data.rows import Example, make_row
from src.node import input_files, preflight
from src.pipeline import UsageError, precheck
from src.pipeline.precheck import input_notes
from src.plan import build_plan
from src.plan.inputs import Input, run_inputs
from tests.helpers.launches import files_under, launch

OFFLINE = {"WANDB_MODE": "offline"}


def _data(root: Path) -> list[str]:
    """Train (one step's 48 prompts) and val files under root/data as src.data.prepare writes them; their
    override."""
    example = Example(src="这只猫坐在垫子上。", tgt="The cat sat on the mat.", src_lang="zh", tgt_lang="en")
    for name, split, n in (("train.parquet", "train", 48), ("val.parquet", "val", 1)):
        (root / "data" / "wmt_zh_en").mkdir(parents=True, exist_ok=True)
        write_parquet_atomic([make_row(example, dataset_name="wmt_zh_en", template="base", split=split, index=i)
                              for i in range(n)], root / "data" / "wmt_zh_en" / name)
    return [f"paths.data_root={root}/data"]


def test_a_dry_run_notes_every_file_it_could_not_find(isolated_paths, tmp_path):
    out, paths = isolated_paths
    result = launch(["reward=comet", "dry_run=true", "logger=console"] + paths)
    assert result.returncode == 0, result.stderr[-2000:]
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: ") and " not found at " in line]
    models = tmp_path / "models"
    assert [n.split(" not found at ")[0] for n in notes] == [
        "note: model", "note: train data", "note: val data", "note: QE model cometkiwi_da"], notes
    assert f"not found at {models}/Qwen2.5-3B;" in notes[0]
    assert f"--split val --out {tmp_path}/data/wmt_zh_en/val.parquet" in notes[2]
    assert f"not found at {models}/wmt22-cometkiwi-da/checkpoints/model.ckpt" in notes[3]
    assert all(n.endswith("(a real launch is refused)") for n in notes), notes


def test_what_a_launch_builds_is_not_missing(tmp_path):
    """experiment=smoke_tiny / learn_tiny build their model, QE checkpoints and data at launch
    (src/pipeline/tiny_build.py): a dry run before the first build notes none of them."""
    for experiment in ("smoke_tiny", "learn_tiny"):
        composed = compose_config([f"experiment={experiment}", f"model.build_dir={tmp_path}/never-built",
                                   "dry_run=true"])
        plan = build_plan(composed, run_dir="r")
        inputs = run_inputs(plan, composed["model"]["build_dir"])
        assert inputs and all(i.built for i in inputs), inputs
        assert input_notes(plan, composed) == []
    # the same model outside the build dir is missing
    composed = compose_config(["experiment=smoke_tiny", f"model.build_dir={tmp_path}/b", f"model.path={tmp_path}/m"])
    assert [n.split(" not found")[0] for n in input_notes(build_plan(composed, run_dir="r"), composed)] == ["model"]


def test_a_slurm_submission_refuses_a_missing_model_before_anything_is_queued(isolated_paths, tmp_path):
    """The issue's command: a Slurm sweep with paths.model_root=/nope passed (`Slurm would accept ...`)."""
    out, paths = isolated_paths
    paths = [p for p in paths if not p.startswith(("paths.model_root", "paths.data_root"))] + _data(tmp_path)
    for dry in ("true", "false"):
        with pytest.raises(UsageError) as refused:
            precheck(["hydra/launcher=slurm", "paths.model_root=/nope", f"dry_run={dry}"] + paths, True, OFFLINE,
                     ask_slurm=False)
        assert str(refused.value).startswith("model not found at /nope/Qwen2.5-3B; fix the path"), refused.value
        assert "checked on this machine before submitting" in str(refused.value)
        assert "slurm.node_local_dirs" in str(refused.value)
    # as a user runs it: one line, exit 2, no sweep dir, nothing asked of Slurm (none runs here)
    result = launch(["--multirun", "hydra/launcher=slurm", "paths.model_root=/nope", "dry_run=true",
                     f"hydra.sweep.dir={out}/sweep"] + paths)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: model not found at /nope/Qwen2.5-3B")
    assert files_under(out) == []


def test_a_slurm_submission_refuses_a_missing_qe_checkpoint(tmp_path):
    (tmp_path / "models" / "Qwen2.5-3B").mkdir(parents=True)
    args = ["hydra/launcher=slurm", "reward=comet", "dry_run=true", f"paths.model_root={tmp_path}/models",
            f"paths.output_dir={tmp_path}/out"] + _data(tmp_path)
    with pytest.raises(UsageError, match=r"^QE model cometkiwi_da not found at .*/wmt22-cometkiwi-da/checkpoints/"):
        precheck(args, True, OFFLINE, ask_slurm=False)
    # debug.skip_scorer: no QE service starts, so none of its files is read
    assert precheck(args + ["debug.skip_scorer=true"], True, OFFLINE, ask_slurm=False) == 1


def test_what_this_machine_cannot_check_is_a_note_not_a_refusal(tmp_path, capsys):
    args = ["hydra/launcher=slurm", "reward=comet", "dry_run=true", "paths.model_root=/node-disk/models",
            "paths.data_root=/node-disk/data", "slurm.node_local_dirs=[/node-disk]",
            "scorer.models.cometkiwi_da.path=hf:Unbabel/wmt22-cometkiwi-da", f"paths.output_dir={tmp_path}/out"]
    assert precheck(args, True, OFFLINE, ask_slurm=False) == 1
    notes = capsys.readouterr().out.splitlines()
    assert notes == [
        "note: model /node-disk/models/Qwen2.5-3B is under /node-disk (slurm.node_local_dirs), which only the "
        "compute nodes hold: not checked before submitting, the compute node checks it",
        "note: train data /node-disk/data/wmt_zh_en/train.parquet is under /node-disk (slurm.node_local_dirs), "
        "which only the compute nodes hold: not checked before submitting, the compute node checks it",
        "note: val data /node-disk/data/wmt_zh_en/val.parquet is under /node-disk (slurm.node_local_dirs), "
        "which only the compute nodes hold: not checked before submitting, the compute node checks it",
        "note: QE model cometkiwi_da hf:Unbabel/wmt22-cometkiwi-da is a hub id, resolved from the compute node's "
        "Hugging Face cache: not checked before submitting, the compute node checks it"], notes
    # a sweep's jobs read the same files: each said once
    assert precheck(args[:-1] + ["seed=1,2,3", f"paths.output_dir={tmp_path}/out"], True, OFFLINE,
                    ask_slurm=False) == 3
    assert len(capsys.readouterr().out.splitlines()) == 4


def test_one_wording_on_the_node_in_a_dry_run_and_before_submitting(tmp_path):
    """The node's preflight refuses the first problem with the line a dry run notes and a submission refuses."""
    composed = compose_config(["reward=comet", f"paths.model_root={tmp_path}/m", f"paths.data_root={tmp_path}/d"])
    plan = build_plan(composed, run_dir="r")
    lines = input_files.problems(run_inputs(plan))
    assert len(lines) == 4
    with pytest.raises(preflight.PreflightError) as refused:
        preflight.check_files(plan)
    assert str(refused.value) == lines[0]
    assert input_notes(plan, composed) == [f"{line} (a real launch is refused)" for line in lines]
    # a hub id and what a launch builds are never missing; a path under a node-local dir is unseen
    assert input_files.problem(Input("QE model x", "hf:Org/Name", "qe", "scorer.models.x.path")) is None
    assert input_files.problem(Input("model", str(tmp_path / "nope"), "model", "model.path", built=True)) is None
    assert input_files.unseen_from_here(Input("model", "/local/m", "model", "model.path"), ["/local/"])
    assert input_files.unseen_from_here(Input("model", "/localx/m", "model", "model.path"), ["/local"]) is None

"""Validation rows are recognisable: preflight reads extra_info.split of the configured train and
val parquet files (dry runs included, when the files exist) and refuses, with the fix, a val file
whose rows are not validation rows or a train file whose rows are."""
from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from src.data.parquet_io import write_parquet_atomic
from src.data.rows import Example, make_row
from src.node.preflight import PreflightError, splits_in, check_data_splits
from tests.helpers.launches import files_under, launch

EX = Example(src="这只猫坐在垫子上。", tgt="The cat sat on the mat.", src_lang="zh", tgt_lang="en")
VALIDATION = ("val", "test")


def prepared(path: Path, splits: list[str]) -> Path:
    """Rows exactly as src.data.prepare writes them (its make_row and writer), one per split given."""
    rows = [make_row(EX, dataset_name="wmt_zh_en", template="base", split=s, index=i) for i, s in enumerate(splits)]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(rows, path)
    return path


def hand_made(path: Path, extra_info: dict | None) -> Path:
    """A parquet from another prep script: same columns, but extra_info without split (or none)."""
    row = {"prompt": [{"role": "user", "content": EX.src}], "data_source": "wmt_zh_en/zh-en",
           "reward_model": {"style": "rule", "ground_truth": EX.tgt}}
    if extra_info is not None:
        row["extra_info"] = extra_info
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([row, row]), path)
    return path


class Files:
    def __init__(self, train: Path, val: Path):
        self.train_files, self.val_files = str(train), str(val)


def test_prepared_files_pass(tmp_path):
    check_data_splits(Files(prepared(tmp_path / "t.parquet", ["train"] * 3),
                            prepared(tmp_path / "v.parquet", ["val", "test"])), VALIDATION)


def test_only_the_split_column_is_read(tmp_path):
    p = prepared(tmp_path / "v.parquet", ["val", "val", "test"])
    assert splits_in(p) == {"val": 2, "test": 1}


@pytest.mark.parametrize("val_rows,needle", [
    (["train", "train"], "2 of 2 rows are not marked as validation rows (extra_info.split train: 2"),
    (["val", "train"], "1 of 2 rows are not marked as validation rows"),
])
def test_val_file_with_training_rows_is_refused(tmp_path, val_rows, needle):
    files = Files(prepared(tmp_path / "t.parquet", ["train"]), prepared(tmp_path / "v.parquet", val_rows))
    with pytest.raises(PreflightError) as err:
        check_data_splits(files, VALIDATION)
    assert needle in str(err.value)
    assert "python -m src.data.prepare --split val" in str(err.value)


@pytest.mark.parametrize("extra_info", [None, {"src": EX.src, "template": "base"}])
def test_val_file_without_split_is_refused(tmp_path, extra_info):
    files = Files(prepared(tmp_path / "t.parquet", ["train"]), hand_made(tmp_path / "v.parquet", extra_info))
    with pytest.raises(PreflightError, match="has no extra_info.split column, so its rows would get the training"):
        check_data_splits(files, VALIDATION)


def test_val_file_with_null_split_is_refused(tmp_path):
    files = Files(prepared(tmp_path / "t.parquet", ["train"]),
                  hand_made(tmp_path / "v.parquet", {"split": None, "src": EX.src}))
    with pytest.raises(PreflightError, match=r"extra_info.split <missing>: 2"):
        check_data_splits(files, VALIDATION)


def test_train_file_with_validation_rows_is_refused(tmp_path):
    files = Files(prepared(tmp_path / "t.parquet", ["train", "test"]), prepared(tmp_path / "v.parquet", ["val"]))
    with pytest.raises(PreflightError) as err:
        check_data_splits(files, VALIDATION)
    assert "1 of 2 rows are marked as validation rows (extra_info.split test: 1)" in str(err.value)
    assert "--split train" in str(err.value)


def test_validation_splits_come_from_the_reward_config(tmp_path):
    # a reward config whose validation split is only "test" makes "val" rows training rows
    files = Files(prepared(tmp_path / "t.parquet", ["train"]), prepared(tmp_path / "v.parquet", ["val"]))
    with pytest.raises(PreflightError, match="needs one of \\['test'\\]"):
        check_data_splits(files, ("test",))


def test_unreadable_file_is_one_line(tmp_path):
    bad = tmp_path / "v.parquet"
    bad.write_text("not parquet")
    with pytest.raises(PreflightError, match="is not a readable parquet file"):
        check_data_splits(Files(prepared(tmp_path / "t.parquet", ["train"]), bad), VALIDATION)


def test_missing_files_are_left_to_the_existence_check(tmp_path):
    check_data_splits(Files(tmp_path / "no-train.parquet", tmp_path / "no-val.parquet"), VALIDATION)


def test_dry_run_refuses_a_val_file_of_training_rows(isolated_paths, tmp_path):
    out, paths = isolated_paths
    prepared(tmp_path / "data" / "wmt_zh_en" / "train.parquet", ["train"] * 2)
    val = prepared(tmp_path / "data" / "wmt_zh_en" / "val.parquet", ["train"] * 2)
    result = launch(["reward=comet", "dry_run=true"] + paths)
    assert result.returncode == 2, result.stderr
    # one line: verl's warnings on the config it accepted are not shown (issue 33, finding 15)
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: val data {val}: 2 of 2 rows are not marked"), result.stderr
    assert "python -m src.data.prepare --split val" in lines[0]
    assert files_under(out) == []


def test_dry_run_accepts_prepared_files(isolated_paths, tmp_path):
    out, paths = isolated_paths
    prepared(tmp_path / "data" / "wmt_zh_en" / "train.parquet", ["train"] * 2)
    prepared(tmp_path / "data" / "wmt_zh_en" / "val.parquet", ["val"] * 2)
    result = launch(["reward=comet", "dry_run=true"] + paths)
    assert result.returncode == 0, result.stderr


def test_train_data_smaller_than_one_step(isolated_paths, tmp_path):
    """Issue 33 (finding 7): a dry run whose train data had fewer prompts than one step (40 rows, 48
    prompts per step) exited 0 without a word, and so did a real launch: verl drops the incomplete
    batch and trains 0 steps. The dry run's plan says it; a real launch is refused in one line."""
    out, paths = isolated_paths
    train = tmp_path / "data" / "wmt_zh_en" / "train.parquet"
    prepared(tmp_path / "data" / "wmt_zh_en" / "val.parquet", ["val"])
    missing = launch(["reward=comet", "dry_run=true"] + paths)
    assert missing.returncode == 0, missing.stderr
    assert (f"note: train data not found at {train}; fix the path in conf/local/default.yaml (paths.*) or prepare "
            f"it (python -m src.data.prepare ... --split train --out {train}) (a real launch is refused)"
            in missing.stdout.splitlines())
    prepared(train, ["train"] * 40)
    dry = launch(["reward=comet", "dry_run=true"] + paths)
    assert dry.returncode == 0, dry.stderr
    assert (f"note: train data {train} has 40 prompts, fewer than one step's 48 (data.train_batch_size for G=4)"
            in dry.stdout) and "(a real launch is refused)" in dry.stdout
    before = files_under(out)
    real = launch(["reward=comet"] + paths)
    assert real.returncode == 2 and len(real.stderr.splitlines()) == 1, real.stderr
    assert real.stderr.startswith(f"error: train data {train} has 40 prompts, fewer than one step's 48")
    assert "set batch.prompts_per_step=24 batch.mini_batch_prompts=24" in real.stderr
    assert files_under(out) == before  # nothing written by the refused launch
    enough = launch(["reward=comet", "dry_run=true", "batch.prompts_per_step=24"] + paths)
    assert enough.returncode == 0 and "note: train data" not in enough.stdout, enough.stdout


def test_the_small_data_notes_advice_gives_a_plan_without_the_note(isolated_paths, tmp_path):
    """Issue 51 (finding 2): with 12 train rows the note said `set batch.prompts_per_step=12 or lower`;
    the plan rounded 12 up to the mini batch (24) and the same note came back. What the note says to
    set, set, plans a step the data fills, for two GPU counts."""
    out, paths = isolated_paths
    train = prepared(tmp_path / "data" / "wmt_zh_en" / "train.parquet", ["train"] * 12)
    prepared(tmp_path / "data" / "wmt_zh_en" / "val.parquet", ["val"])
    for gpus in ("4", "3"):
        dry = launch(["reward=comet", "dry_run=true", f"gpus={gpus}"] + paths)
        assert dry.returncode == 0, dry.stderr
        note = next(l for l in dry.stdout.splitlines() if l.startswith(f"note: train data {train} has 12 prompts"))
        advice = re.search(r"or set ((?:batch\.\w+=\d+ ?)+)", note)
        assert advice, note
        followed = launch(["reward=comet", "dry_run=true", f"gpus={gpus}", *advice.group(1).split()] + paths)
        assert followed.returncode == 0, followed.stderr
        assert "note: train data" not in followed.stdout, (note, followed.stdout)


def test_more_steps_than_the_data_gives_is_refused_with_the_epochs_that_give_them(isolated_paths, tmp_path):
    """verl's fit ends with the last epoch whatever trainer.total_training_steps asks: a tiny run asked for 20
    steps on 77 prompts (8 a step, 1 epoch) stopped after step 9 with exit 0, no last save and no last validation.
    The dry run's plan says so; a real launch is refused in one line naming both fixes, and either fix plans."""
    out, paths = isolated_paths
    train = prepared(tmp_path / "data" / "wmt_zh_en" / "train.parquet", ["train"] * 100)
    prepared(tmp_path / "data" / "wmt_zh_en" / "val.parquet", ["val"])
    args = ["reward=comet", "batch.prompts_per_step=24", "batch.mini_batch_prompts=24"] + paths
    said = ("trainer.total_training_steps=10 is more than the train data gives: 100 prompts // 24 a step x 1 epoch(s) "
            "= 4 steps, and verl's fit ends with the last epoch, before the last step's save and validation; set "
            "trainer.total_epochs=3, or trainer.total_training_steps=4")
    dry = launch(args + ["dry_run=true", "trainer.total_training_steps=10"])
    assert dry.returncode == 0 and f"note: {said} (a real launch is refused)" in dry.stdout, dry.stdout[-3000:]
    before = files_under(out)
    real = launch(args + ["trainer.total_training_steps=10"])
    assert real.returncode == 2 and real.stderr.splitlines() == [f"error: {said}"], real.stderr
    assert files_under(out) == before
    for fix in ("trainer.total_epochs=3", "trainer.total_training_steps=4"):
        fixed = launch(args + ["dry_run=true", "trainer.total_training_steps=10", fix])
        assert fixed.returncode == 0 and "is more than the train data gives" not in fixed.stdout, (fix, fixed.stdout)

"""experiment=learn_tiny's synthetic task (src/tiny_models/task.py) and the teaching step's refusals; the
teaching itself and the run on it are tests/loop/test_learn_tiny.py."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from src.tiny_models import task

REPO = Path(__file__).resolve().parents[2]


def _rows(path: Path) -> list[tuple[str, str, str]]:
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t")
        assert next(reader) == list(task.HEADER)
        return [tuple(r) for r in reader]


def test_the_held_out_sentences_are_never_taught_or_trained_on_and_the_files_are_reused(tmp_path):
    status, paths = task.write(tmp_path, train_prompts=256, val_sentences=48)
    teach, train, val = (_rows(paths[k]) for k in ("teach", "train", "val"))
    assert status == "built" and (len(teach), len(train), len(val)) == (577, 256, 48)
    assert len(set(teach) | set(val)) == 625 and not set(val) & (set(teach) | set(train))
    assert set(train) <= set(teach) and len(set(train)) == 256
    # word for word: the reference is a function of the source (what teaching and BLEU rely on)
    zh, en, lp = val[0]
    words = [slot[c] for slot, c in zip(task.SLOTS, zh[:4])]
    assert en == " ".join(words).capitalize() + "." and lp == "zh-en" and zh.endswith("。")
    before = {p: p.stat().st_mtime_ns for p in paths.values()}
    assert task.write(tmp_path, 256, 48)[0] == "reused"
    assert {p: p.stat().st_mtime_ns for p in paths.values()} == before


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "src.tiny_models", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_bad_task_and_teach_input_is_one_line_and_writes_nothing(tmp_path):
    for args, says in (
        (["task", str(tmp_path / "t"), "--val-sentences", "625"], "error: val_sentences must be in 1..624"),
        (["task", str(tmp_path / "t"), "--train-prompts", "600"], "error: train_prompts must be in 1..577"),
        (["teach", str(tmp_path / "nopolicy"), str(tmp_path / "out"), "--data", str(tmp_path / "x.parquet")],
         "is not a complete tiny policy build"),
    ):
        proc = _cli(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and says in proc.stderr, (args, proc.stderr)
    assert list(tmp_path.iterdir()) == []

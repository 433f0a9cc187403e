"""experiment=learn_tiny's synthetic task (src/tiny_models/task.py), its terminology variant
(experiment=learn_terms_tiny) and the teaching step's refusals; the teaching itself and the runs on them are
tests/loop/test_learn_tiny.py and test_learn_terms.py."""
from __future__ import annotations

import csv
import json
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


def test_the_terminology_variant_requires_the_term_on_every_prompt_and_is_taught_the_corpus_word_mostly(tmp_path):
    """experiment=learn_terms_tiny's data: the sentences with the term's source word, held out apart from the RL
    prompts; every row carries the glossary (JSON, as src.data.prepare reads a terms column); the taught sentences
    are all but the held-out ones, their references the corpus's "blue" but for a third already "green"."""
    status, paths = task.write_terms(tmp_path, val_sentences=48)
    rows = {}
    for what, path in paths.items():
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.reader(f, delimiter="\t")
            assert next(reader) == list(task.TERMS_HEADER)
            rows[what] = [tuple(r) for r in reader]
    teach, train, val = rows["teach"], rows["train"], rows["val"]
    assert status == "built" and (len(teach), len(train), len(val)) == (577, 77, 48)
    glossary = json.dumps([task.TERM], ensure_ascii=False)
    assert {r[3] for r in teach + train + val} == {glossary}
    assert all(task.TERM["src"] in r[0] for r in train + val) and not {r[0] for r in val} & {r[0] for r in teach}
    assert {r[0] for r in train} == {r[0] for r in teach if task.TERM["src"] in r[0]}
    # the references of the RL prompts and the held-out ones are the corpus's; a third of the taught ones the client's
    assert all(f" {task.DEFAULT_TGT} " in r[1] for r in train + val)
    taught_with_term = [r for r in teach if task.TERM["src"] in r[0]]
    client = [r for r in taught_with_term if f" {task.TERM['tgt']} " in r[1]]
    assert 0.2 < len(client) / len(taught_with_term) < 0.45, len(client)
    assert task.write_terms(tmp_path, 48)[0] == "reused"
    proc = _cli("task", str(tmp_path / "cli"), "--terms")
    assert proc.returncode == 0 and (tmp_path / "cli" / "val.tsv").read_text(encoding="utf-8") == \
        paths["val"].read_text(encoding="utf-8"), proc.stderr


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "src.tiny_models", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_bad_task_and_teach_input_is_one_line_and_writes_nothing(tmp_path):
    for args, says in (
        (["task", str(tmp_path / "t"), "--val-sentences", "625"], "error: val_sentences must be in 1..624"),
        (["task", str(tmp_path / "t"), "--train-prompts", "600"], "error: train_prompts must be in 1..577"),
        (["task", str(tmp_path / "t"), "--terms", "--val-sentences", "125"], "error: val_sentences must be in 1..124"),
        (["teach", str(tmp_path / "nopolicy"), str(tmp_path / "out"), "--data", str(tmp_path / "x.parquet")],
         "is not a complete tiny policy build"),
    ):
        proc = _cli(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and says in proc.stderr, (args, proc.stderr)
    assert list(tmp_path.iterdir()) == []

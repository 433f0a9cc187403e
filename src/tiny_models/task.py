"""A synthetic zh->en translation task small enough for the tiny policy to learn in a minute (experiment=learn_tiny).

Sentences are four words, one from each slot: a number, a colour, an animal, a verb (一红猫跑。 ->
"One red cats run."): 5^4 = 625 sentences over a 20-word dictionary. The policy is first taught it
offline (teach.py) to partial competence, so that its samples differ in quality and a reward that
measures them against the reference has something to rank; GRPO then has to improve on that.

The 625 sentences are split by a fixed seed into held-out validation sentences and the rest, which
the teaching and the RL train prompts draw from: validation measures translation of sentences
the policy has never seen (each word has been seen, in other combinations). Stdlib only.
"""
from __future__ import annotations

import csv
import io
import itertools
import os
import random
from pathlib import Path

# slot order: number, colour, animal, verb (plural animals: "two cats" and "one cats" alike, so the
# English side is a word-for-word function of the Chinese one)
SLOTS = (
    {"一": "one", "两": "two", "三": "three", "四": "four", "五": "five"},
    {"红": "red", "蓝": "blue", "绿": "green", "黑": "black", "白": "white"},
    {"猫": "cats", "狗": "dogs", "鸟": "birds", "鱼": "fish", "马": "horses"},
    {"跑": "run", "跳": "jump", "睡": "sleep", "吃": "eat", "飞": "fly"},
)
SPLIT_SEED = 0
HEADER = ("src", "tgt", "lang_pair")
FILES = {"teach": "teach.tsv", "train": "train.tsv", "val": "val.tsv"}


def sentence(words: tuple[str, ...]) -> tuple[str, str]:
    zh = "".join(words) + "。"
    en = " ".join(slot[w] for slot, w in zip(SLOTS, words)).capitalize() + "."
    return zh, en


def split(val_sentences: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(seen, held out): every sentence once, shuffled by SPLIT_SEED; the first `val_sentences` held out."""
    every = [sentence(w) for w in itertools.product(*(list(s) for s in SLOTS))]
    random.Random(SPLIT_SEED).shuffle(every)
    if not 0 < val_sentences < len(every):
        raise ValueError(f"val_sentences must be in 1..{len(every) - 1}, got {val_sentences}")
    return every[val_sentences:], every[:val_sentences]


def write(out: Path, train_prompts: int, val_sentences: int) -> tuple[str, dict[str, Path]]:
    """teach.tsv (every seen sentence), train.tsv (`train_prompts` of them, a seeded sample: the RL
    prompts), val.tsv (the held-out sentences): src, tgt, lang_pair columns as src.data.prepare reads them.
    ('reused' when the files already hold exactly this, else 'built'; the files)."""
    seen, held_out = split(val_sentences)
    if not 0 < train_prompts <= len(seen):
        raise ValueError(f"train_prompts must be in 1..{len(seen)} (the sentences not held out), got {train_prompts}")
    rows = {"teach": seen, "train": random.Random(1).sample(seen, train_prompts), "val": held_out}
    texts = {}
    for what, pairs in rows.items():
        buf = io.StringIO()
        w = csv.writer(buf, delimiter="\t", lineterminator="\n")
        w.writerow(HEADER)
        w.writerows((zh, en, "zh-en") for zh, en in pairs)
        texts[out / FILES[what]] = buf.getvalue()
    paths = {what: out / name for what, name in FILES.items()}
    if all(p.is_file() and p.read_text(encoding="utf-8") == t for p, t in texts.items()):
        return "reused", paths
    out.mkdir(parents=True, exist_ok=True)
    for path, text in texts.items():  # whole files: a reader never sees a half-written one
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return "built", paths

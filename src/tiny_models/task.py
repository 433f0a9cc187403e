"""A synthetic zh->en translation task small enough for the tiny policy to learn in a minute (experiment=learn_tiny).

Sentences are four words, one from each slot: a number, a colour, an animal, a verb (一红猫跑。 ->
"One red cats run."): 5^4 = 625 sentences over a 20-word dictionary. The policy is first taught it
offline (teach.py) to partial competence, so that its samples differ in quality and a reward that
measures them against the reference has something to rank; GRPO then has to improve on that.

The 625 sentences are split by a fixed seed into held-out validation sentences and the rest, which
the teaching and the RL train prompts draw from: validation measures translation of sentences
the policy has never seen (each word has been seen, in other combinations). Stdlib only.

The terminology variant (experiment=learn_terms_tiny, docs/terminology.md): a client's glossary asks for one
word otherwise than the corpus says it, 蓝 -> "green" where the references (and so the taught policy) say
"blue", and the prompt gives the term (data.template=rl_terms). Only a reward for the required term can teach it:
BLEU against the references pulls the other way. Its sentences with 蓝 are split apart (held out for validation,
the rest the RL prompts); the policy is taught every other sentence, the glossary in each prompt and the corpus's
"blue" in the answer, so that it keeps the format on such prompts and says what it was taught.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
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
# the terminology variant's glossary entry: one colour, required as another colour word the policy knows
TERM = {"src": "蓝", "tgt": "green"}
DEFAULT_TGT = "blue"  # what the corpus says for it (SLOTS)
CLIENT_SHARE = 1 / 3  # of the taught sentences with it, those already translated the client's way
TERMS_HEADER = HEADER + ("terms",)


def every_sentence() -> list[tuple[str, str]]:
    """All 625 (zh, en) pairs, in slot order."""
    return [sentence(w) for w in itertools.product(*(list(s) for s in SLOTS))]


def sentence(words: tuple[str, ...]) -> tuple[str, str]:
    zh = "".join(words) + "。"
    en = " ".join(slot[w] for slot, w in zip(SLOTS, words)).capitalize() + "."
    return zh, en


def split(val_sentences: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(seen, held out): every sentence once, shuffled by SPLIT_SEED; the first `val_sentences` held out."""
    every = every_sentence()
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
    return _write_files(out, {what: [(zh, en, "zh-en") for zh, en in pairs] for what, pairs in rows.items()}, HEADER)


def terms_split(val_sentences: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The terminology variant's (RL prompts, held out): the sentences with the term's source word, shuffled by
    SPLIT_SEED; the first `val_sentences` held out."""
    every = every_sentence()
    with_term = [pair for pair in every if TERM["src"] in pair[0]]
    random.Random(SPLIT_SEED).shuffle(with_term)
    if not 0 < val_sentences < len(with_term):
        raise ValueError(f"val_sentences must be in 1..{len(with_term) - 1}, got {val_sentences}")
    return with_term[val_sentences:], with_term[:val_sentences]


def write_terms(out: Path, val_sentences: int) -> tuple[str, dict[str, Path]]:
    """The terminology variant's teach.tsv, train.tsv and val.tsv (src, tgt, lang_pair, terms): the RL prompts and
    the held out ones are the sentences with the term (terms_split); the policy is taught every sentence but the
    held out ones, with the corpus's reference. Every row carries the glossary, as a client's glossary goes with
    every request: the taught prompts then have the shape of the RL prompts (a tiny policy taught the glossary line
    on a fifth of its prompts kept the format in under half of its answers on them), and a term whose source is not
    in a sentence is not counted by the term metrics (src/data/terms.py hits)."""
    train, held_out = terms_split(val_sentences)
    every = every_sentence()
    held = set(held_out)
    teach = [pair for pair in every if pair not in held]
    random.Random(SPLIT_SEED).shuffle(teach)
    # the corpus is not consistent: a third of its sentences with 蓝 already use the client's word, so the taught
    # policy says it now and then (a policy that never samples it gives GRPO nothing to rank: with every taught answer
    # "blue", 10 steps at term weight 3 moved the held-out term success from 0.02 to 0.03, benches/RESULTS.md)
    consistent = random.Random(SPLIT_SEED + 1)
    teach = [(zh, en.replace(f" {DEFAULT_TGT} ", f" {TERM['tgt']} ") if TERM["src"] in zh and consistent.random() <
              CLIENT_SHARE else en) for zh, en in teach]
    term = json.dumps([TERM], ensure_ascii=False)

    def rows(pairs):
        return [(zh, en, "zh-en", term) for zh, en in pairs]
    return _write_files(out, {"teach": rows(teach), "train": rows(train), "val": rows(held_out)}, TERMS_HEADER)


def _write_files(out: Path, rows: dict[str, list[tuple[str, ...]]], header: tuple[str, ...]
                 ) -> tuple[str, dict[str, Path]]:
    texts = {}
    for what, records in rows.items():
        buf = io.StringIO()
        w = csv.writer(buf, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_NONE, escapechar=None,
                       quotechar=None)
        w.writerow(header)
        w.writerows(records)
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

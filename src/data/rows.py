"""The verl row for one translation example.

This is the contract with the reward function (src/rewards) and with verl's RLHFDataset:

    prompt        chat list of {role, content} (verl applies the chat template at rollout)
    data_source   f"{dataset_name}/{src_lang}-{tgt_lang}", e.g. "wmt_zh_en/zh-en"; verl groups
                  validation metrics by it (val-core/<data_source>/reward/mean@N)
    ability       "translation"
    reward_model  {"style": "rule", "ground_truth": <reference translation>}
    extra_info    {"split", "src", "src_lang", "tgt_lang", "lang_pair", "template", "index"}, and
                  "terms" ([{"src", "tgt"}, ...], src/data/terms.py) where the input gave terms
                  (verl passes extra_info to compute_score untouched; "index" is also what
                  RLHFDataset reads as the row index)
"""

from __future__ import annotations

from dataclasses import dataclass

from .templates import build_prompt
from .terms import Term

SPLITS = ("train", "val", "test")
ABILITY = "translation"


@dataclass(frozen=True)
class Example:
    """One direction of one pair, after cleaning."""

    src: str
    tgt: str
    src_lang: str
    tgt_lang: str
    # its required terms; None: the input said nothing of terms (no "terms" key is written)
    terms: tuple[Term, ...] | None = None

    @property
    def lang_pair(self) -> str:
        return f"{self.src_lang}-{self.tgt_lang}"


def data_source(dataset_name: str, example: Example) -> str:
    return f"{dataset_name}/{example.lang_pair}"


def make_row(example: Example, *, dataset_name: str, template: str, split: str, index: int) -> dict:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return {
        "prompt": build_prompt(template, example.src, example.src_lang, example.tgt_lang, example.terms or ()),
        "data_source": data_source(dataset_name, example),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": example.tgt},
        "extra_info": {
            "split": split,
            "src": example.src,
            "src_lang": example.src_lang,
            "tgt_lang": example.tgt_lang,
            "lang_pair": example.lang_pair,
            "template": template,
            "index": int(index),
            **({} if example.terms is None else {"terms": [t.as_dict() for t in example.terms]}),
        },
    }

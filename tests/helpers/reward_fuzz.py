"""The reward's fuzz set: generated responses (random unicode, control characters, huge, tag soup, and
well-formed answers around any of these) on generated rows, each scored with compute_score and checked:
a finite score inside the configured range, every value of the fixed shape, nothing raised."""
from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from src.rewards.compute import compute_score, settings_from
from src.rewards.settings import score_bounds
from tests.helpers.reward_config import extra_info

TAGS = ["<think>", "</think>", "<translate>", "</translate>", "<", ">", "</", "think", "translate", "<think",
        "translate>", " ", "\n", "\t"]
WORDS = ["The cat", " sat on", " the mat.", "这只猫", "坐在垫子上。", "猫は", "座った", "Katze", "2024", "…"]

unicode_text = st.text(max_size=300)  # any code point but surrogates, controls included
control_text = st.text(st.characters(codec=None, categories=("Cc", "Cf", "Zs", "Zl", "Zp")), max_size=80)
tag_soup = st.lists(st.one_of(st.sampled_from(TAGS), st.sampled_from(WORDS), st.text(max_size=6)),
                    max_size=40).map("".join)
huge = st.builds(lambda piece, n: piece * n, st.sampled_from(["猫", "The cat. ", "<think>", "</translate>", "\x00"]),
                 st.integers(1_000, 60_000))
body = st.one_of(unicode_text, tag_soup, st.sampled_from(WORDS), control_text)
# well-formed wrappers around arbitrary text: these are the ones that reach the scorer
well_formed = st.one_of(
    st.builds(lambda a, b: f"<think>{a}</think><translate>{b}</translate>", body, body),
    st.builds(lambda b: f"<translate>{b}</translate>", body),
)
responses = st.one_of(unicode_text, control_text, tag_soup, huge, well_formed)
rows = st.fixed_dictionaries({
    "template": st.sampled_from(["base", "chat", "rl"]),
    "split": st.sampled_from(["train", "train", "val", "test"]),
    "direction": st.sampled_from([("zh", "en", "这只猫坐在垫子上。", "The cat sat on the mat."),
                                  ("en", "zh", "The cat sat on the mat.", "这只猫坐在垫子上。"),
                                  ("en", "ja", "The cat sat.", "猫は座った。")]),
})


def check(out: dict, kw: dict, validation: bool) -> None:
    lo, hi = score_bounds(settings_from(kw), validation)
    assert math.isfinite(out["score"]) and lo - 1e-9 <= out["score"] <= hi + 1e-9
    assert out["score_rounded"] == round(out["score"], 2)
    for key, value in out.items():
        if key in ("format_error", "src", "translation", "error_spans"):
            assert isinstance(value, str)
        else:
            assert value is None or (isinstance(value, float) and math.isfinite(value)), key
    assert isinstance(json.loads(out["error_spans"]), list)


def fuzz(loop, kw: dict, max_examples: int, also=None) -> list[dict]:
    """Score `max_examples` generated (response, row) pairs with `compute_score` under the reward
    settings `kw`; each output passes `check` (and `also`, when given). Returns the outputs."""
    seen = []

    # derandomize: the share of examples that reach the service (asserted by the callers) is a
    # property of the example set; a random set fell under the bound now and then (46 of 50 once)
    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture])
    @given(response=responses, row=rows)
    def one(response, row):
        src_lang, tgt_lang, src, ref = row["direction"]
        info = extra_info(src, src_lang=src_lang, tgt_lang=tgt_lang, template=row["template"], split=row["split"])
        out = loop.run_until_complete(compute_score(f"fuzz/{src_lang}-{tgt_lang}", response, ref, info, **kw))
        check(out, kw, row["split"] != "train")
        if also is not None:
            also(out)
        seen.append(out)

    one()
    return seen

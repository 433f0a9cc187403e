"""From pairs to clean examples: pick directions, drop empty/duplicate pairs, length-filter, cap.

Every step counts what it drops per direction (`Counts`) so the stats report can say where rows went.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import asdict, dataclass, replace

from .readers import InputError, Pair, parse_lang_pair
from .rows import Example


@dataclass
class Counts:
    rows_in: int = 0
    empty: int = 0
    duplicate: int = 0
    too_long: int = 0
    capped: int = 0  # left out by --max-per-direction
    rows_out: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def _reverse(p: Pair) -> Example:
    terms = None if p.terms is None else tuple(t.reversed() for t in p.terms)
    return Example(p.tgt, p.src, p.tgt_lang, p.src_lang, terms)


def expand_directions(pairs: list[Pair], directions: str, counts: dict[str, Counts]) -> list[Example]:
    """`directions`: "as-is" (each pair as given), "both" (each pair and its reverse), or a comma
    list like "zh-en,en-zh" (each pair in whichever of those directions it can serve)."""
    if directions == "as-is":
        wanted = None
    elif directions == "both":
        wanted = "both"
    else:
        wanted = {parse_lang_pair(d) for d in directions.split(",") if d.strip()}
        if not wanted:
            raise InputError(f"--directions: nothing in {directions!r}")
    out = []
    for p in pairs:
        forward = Example(p.src, p.tgt, p.src_lang, p.tgt_lang, p.terms)
        if wanted is None:
            candidates = [forward]
        elif wanted == "both":
            candidates = [forward, _reverse(p)]
        else:
            candidates = [e for e in (forward, _reverse(p)) if (e.src_lang, e.tgt_lang) in wanted]
        for e in candidates:
            counts[e.lang_pair].rows_in += 1
            out.append(e)
    if wanted not in (None, "both") and not out:
        have = sorted({f"{p.src_lang}-{p.tgt_lang}" for p in pairs})
        raise InputError(f"--directions {directions}: the input only has {', '.join(have) or 'no pairs'}")
    return out


def drop_empty_and_duplicates(examples: list[Example], counts: dict[str, Counts]) -> list[Example]:
    """Strip surrounding whitespace; drop a pair if either side is then empty, or if the same
    (direction, source, target) came before. Keeps the first occurrence, in input order."""
    seen = set()
    out = []
    for e in examples:
        e = replace(e, src=e.src.strip(), tgt=e.tgt.strip())
        if not e.src or not e.tgt:
            counts[e.lang_pair].empty += 1
            continue
        key = (e.src_lang, e.tgt_lang, e.src, e.tgt)
        if key in seen:
            counts[e.lang_pair].duplicate += 1
            continue
        seen.add(key)
        out.append(e)
    return out


@dataclass(frozen=True)
class LengthLimits:
    max_src_tokens: int | None = None
    max_tgt_tokens: int | None = None
    max_prompt_tokens: int | None = None

    def allows(self, src: int, tgt: int, prompt: int) -> bool:
        return not (
            (self.max_src_tokens is not None and src > self.max_src_tokens)
            or (self.max_tgt_tokens is not None and tgt > self.max_tgt_tokens)
            or (self.max_prompt_tokens is not None and prompt > self.max_prompt_tokens)
        )


def filter_by_length(
    examples: list[Example], lengths: list[tuple[int, int, int]], limits: LengthLimits, counts: dict[str, Counts]
) -> tuple[list[Example], list[tuple[int, int, int]]]:
    """`lengths[i]` = (src, tgt, prompt) tokens of `examples[i]`."""
    kept, kept_lengths = [], []
    for e, lens in zip(examples, lengths, strict=True):
        if limits.allows(*lens):
            kept.append(e)
            kept_lengths.append(lens)
        else:
            counts[e.lang_pair].too_long += 1
    return kept, kept_lengths


def cap_per_direction(
    examples: list[Example], lengths: list[tuple[int, int, int]], cap: int | None, seed: int, counts: dict[str, Counts]
) -> tuple[list[Example], list[tuple[int, int, int]]]:
    """Keep a seeded random sample of at most `cap` rows per direction, in input order."""
    if cap is None:
        return examples, lengths
    by_dir = defaultdict(list)
    for i, e in enumerate(examples):
        by_dir[e.lang_pair].append(i)
    rng = random.Random(seed)
    keep = set()
    for direction, idxs in sorted(by_dir.items()):
        chosen = idxs if len(idxs) <= cap else rng.sample(idxs, cap)
        counts[direction].capped += len(idxs) - len(chosen)
        keep.update(chosen)
    order = sorted(keep)
    return [examples[i] for i in order], [lengths[i] for i in order]


def new_counts() -> dict[str, Counts]:
    return defaultdict(Counts)

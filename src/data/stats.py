"""The stats report of one `prepare` run: where rows went and how long the kept ones are."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .filters import Counts
from .rows import Example
from .terms import present

PERCENTILES = (50, 90, 95, 99)
_LENGTH_FIELDS = ("src", "tgt", "prompt")


def length_percentiles(values: list[int]) -> dict[str, int]:
    if not values:
        return {}
    arr = np.asarray(values)
    out = {f"p{p}": int(np.percentile(arr, p)) for p in PERCENTILES}
    out["max"] = int(arr.max())
    return out


def build_stats(
    counts: dict[str, Counts], examples: list[Example], lengths: list[tuple[int, int, int]], meta: dict
) -> dict:
    by_dir = defaultdict(lambda: {f: [] for f in _LENGTH_FIELDS})
    for e, lens in zip(examples, lengths, strict=True):
        for field, n in zip(_LENGTH_FIELDS, lens):
            by_dir[e.lang_pair][field].append(n)
    directions = {}
    for direction in sorted(counts):
        directions[direction] = {
            **counts[direction].as_dict(),
            "tokens": {f: length_percentiles(by_dir[direction][f]) for f in _LENGTH_FIELDS},
        }
    if any(e.terms is not None for e in examples):
        for direction, d in directions.items():
            d["terms"] = terms_stats([e for e in examples if e.lang_pair == direction])
    total = Counts()
    for c in counts.values():
        for k, v in c.as_dict().items():
            setattr(total, k, getattr(total, k) + v)
    return {**meta, "total": total.as_dict(), "directions": directions}


def terms_stats(examples: list[Example]) -> dict:
    """How many segments carry terms, how many terms (the most in one segment), and how many of them are not
    found in their own source (src/data/terms.py matching: those are not counted by the term success rate)."""
    counts = [len(e.terms or ()) for e in examples]
    missing = sum(len(e.terms or ()) - len(present(e.terms or (), e.src)) for e in examples)
    return {"segments": len(examples), "segments_with_terms": sum(1 for n in counts if n), "terms": sum(counts),
            "max_per_segment": max(counts, default=0), "not_in_source": missing}


def terms_lines(stats: dict) -> list[str]:
    """One console line per direction whose rows carry terms."""
    out = []
    for direction, d in stats["directions"].items():
        t = d.get("terms")
        if t is not None:
            out.append(f"terms {direction}: {t['segments_with_terms']} of {t['segments']} segments carry terms, "
                       f"{t['terms']} terms (at most {t['max_per_segment']} a segment), {t['not_in_source']} not "
                       f"found in their source")
    return out


def format_table(stats: dict) -> str:
    """Plain-text table for the console: one row per direction plus a total."""
    cols = ["direction", "rows_in", "empty", "duplicate", "too_long", "capped", "rows_out", "src p50/p95/max",
            "prompt p50/p95/max"]
    rows = []
    for direction, d in stats["directions"].items():
        def pct(field):
            t = d["tokens"][field]
            return f"{t['p50']}/{t['p95']}/{t['max']}" if t else "-"

        rows.append([direction, *(str(d[k]) for k in cols[1:7]), pct("src"), pct("prompt")])
    rows.append(["total", *(str(stats["total"][k]) for k in cols[1:7]), "", ""])
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]

    def line(cells):
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(cols), line(["-" * w for w in widths]), *(line(r) for r in rows), *terms_lines(stats)])

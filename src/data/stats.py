"""The stats report of one `prepare` run: where rows went and how long the kept ones are."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .filters import Counts
from .rows import Example

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
    total = Counts()
    for c in counts.values():
        for k, v in c.as_dict().items():
            setattr(total, k, getattr(total, k) + v)
    return {**meta, "total": total.as_dict(), "directions": directions}


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

    return "\n".join([line(cols), line(["-" * w for w in widths]), *(line(r) for r in rows)])

"""A composed config with some values changed, for tests that plan many variants of one config."""
from __future__ import annotations

import copy


def with_(cfg, **changes):
    """A deep copy of `cfg` with each change applied; a key's dots are written `__`
    (with_(cfg, batch__samples_per_prompt=8)), parents made where missing."""
    out = copy.deepcopy(cfg)
    for dotted, value in changes.items():
        node = out
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out

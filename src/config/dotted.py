"""Nested config trees as flat dotted keys: the one `flatten` the plan (verl passthrough keys) and the
run identity (src/record/identity.py: the run id hashes these pairs) both use."""
from __future__ import annotations


def flatten(tree: dict, prefix: str = "") -> dict:
    """{'a': {'b': 1}} -> {'a.b': 1}; empty dicts are kept as values (so `override_config: {}`
    stays a key), None or {} at the top gives {}."""
    out = {}
    for key, value in (tree or {}).items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out

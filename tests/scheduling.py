"""How the suite is split across pytest-xdist workers (`make test` runs `-n auto --dist loadgroup`).

Every test gets an `xdist_group`: the tests of one module run on one worker, in file order, so a
module-scoped fixture (a launch that many asserts read, a Ray cluster, a scorer service) is set up
once, not once per worker. Two groups span modules because they share one thing that cannot be
split: every test of the real Slurm dev cluster runs on one worker (its jobs would otherwise queue
behind each other's and miss their time bounds, and submitit folders would mix), and tests/ray_actors
shares one session-scoped project (a tiny policy, its data, verl's validated config) between its two
modules.

Groups are handed out in collection order (`--no-loadscope-reorder`; xdist's own reorder sorts by
test count, not time), so the groups that take longest are collected first: a long group started
last would keep one worker busy after the other ran out of work. FIRST lists them, slowest first
(docs/testing.md has the budget per directory). Without xdist (one process), the marks do nothing
and the order is the same.
"""
from __future__ import annotations

import pytest

# the longest groups on a 2-core machine (seconds in the CI log's per-directory table), slowest first
FIRST = ("slurm", "ray_actors", "tests/launcher/test_smoke_tiny.py", "tests/lifecycle/test_scorer_lifecycle.py",
         "tests/launcher/test_train_entry.py", "tests/launcher/test_smoke.py")
SLURM_FIXTURE = "slurm_cluster"


def group_of(item: pytest.Item) -> str:
    """The item's xdist group: its module's path, or one of the groups that span modules."""
    path = item.nodeid.split("::", 1)[0]
    if SLURM_FIXTURE in getattr(item, "fixturenames", ()):
        return "slurm"
    if path.startswith("tests/ray_actors/"):
        return "ray_actors"
    return path


def _rank(group: str) -> int:
    return FIRST.index(group) if group in FIRST else len(FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = {id(item): group_of(item) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[id(item)]))
    # stable: within a rank (and so within a module), collection order is kept
    items.sort(key=lambda item: _rank(groups[id(item)]))

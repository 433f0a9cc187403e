"""How the suite is split across pytest-xdist workers (`make test` runs `-n auto`).

Every test belongs to a group that one worker runs whole, in file order: its module, so a
module-scoped fixture (a launch that many asserts read, a Ray cluster, a scorer service) is set up
once, not once per worker. Two groups span modules because they share one thing that cannot be
split: every test of the real Slurm dev cluster (tests/slurm/) runs on one worker (its jobs would
otherwise queue behind each other's and miss their time bounds), tests/ray_actors shares one
session-scoped project (a tiny policy, its data, verl's validated config) between its two modules, and
the launches of the real training loop (tests/loop/) run one after another, but for OWN's (below): a
launch holds 6.5 GB, and the memory gate lets two run at once beside the rest of the suite.

The groups are xdist's scopes: `pytest_xdist_make_scheduler` returns xdist's own LoadScopeScheduling
with the scope taken from `group_of`. (xdist's `xdist_group` marks cannot do it under pytest 9: xdist
3.8 tags a test's group onto `item._nodeid`, which pytest 9 no longer reads, so the marks are ignored.)

One module of the loop is a group of its own (OWN): the loop group ran 2,334 of the train tests' 2,358 s in the CI of
c3916a0 while the other two workers ran out of work about 500 s before it ended, one core idle that long. The term
reward's two launches (~520 s) go to another worker instead, at the start, beside the loop and Slurm groups; the
memory gate (tests/helpers/memory_gate.py) still lets no more launches run at once than the machine holds.

Groups are handed out in collection order (`--no-loadscope-reorder`; xdist's own reorder sorts by
test count, not time), so the groups that take longest are collected first: a long group started
last would keep one worker busy after the other ran out of work. FIRST lists them, slowest first
(each CI log ends with the longest modules, tests/durations.py). Without xdist the order is the same.
"""
from __future__ import annotations

import pytest

# the longest groups on a 2-core machine (the CI log's "longest modules"), slowest first
FIRST = ("loop", "slurm", "tests/loop/test_learn_terms.py", "ray_actors", "tests/launcher/test_smoke_tiny.py",
         "tests/launcher/test_presets.py", "tests/lifecycle/test_scorer_lifecycle.py",
         "tests/launcher/test_group_combinations.py", "tests/launcher/test_smoke.py")
SPANNING = {"tests/slurm/": "slurm", "tests/ray_actors/": "ray_actors", "tests/loop/": "loop"}
# modules of a spanning directory that are a group of their own (module docstring)
OWN = ("tests/loop/test_learn_terms.py",)
# modules whose tests share nothing (no module-scoped fixture) and take long together: each test is its own
# group, so the workers share them out (every algo preset's sweep of GPU and node counts: ~30 s per preset)
SPLIT = ("tests/launcher/test_algo_presets.py",)


def group_of(nodeid: str) -> str:
    """The group a test id belongs to: its module's path, a group that spans modules (but for OWN), or (SPLIT) the
    test."""
    path = nodeid.split("::", 1)[0]
    if path in SPLIT:
        return nodeid
    if path in OWN:
        return path
    return next((group for prefix, group in SPANNING.items() if path.startswith(prefix)), path)


def _rank(group: str) -> int:
    return FIRST.index(group) if group in FIRST else len(FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # stable: within a rank (and so within a module), collection order is kept
    items.sort(key=lambda item: _rank(group_of(item.nodeid)))


def scheduler_class() -> type:
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        """xdist's scope scheduling, one scope per group."""

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ByGroup


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist (-p no:xdist) there is none to implement
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    return scheduler_class()(config, log)

"""Where the suite's time went, per test directory: printed after pytest's own `--durations` list
whenever that option asks for one (`make test` does; CI runs `make test`), so a directory that
grows shows in every CI log. Seconds are set-up + call + tear-down of its tests, summed over
workers (with xdist they overlap: the wall time is in pytest's last line). docs/testing.md has the
budget per directory.
"""
from __future__ import annotations

from collections import defaultdict

import pytest

_seconds: dict[str, float] = defaultdict(float)
_tests: dict[str, set] = defaultdict(set)
_module_seconds: dict[str, float] = defaultdict(float)
# the longest modules: an xdist worker runs a module whole (tests/scheduling.py), so one of these
# started last sets the suite's end; tests/scheduling.py FIRST hands them out first
LONGEST_MODULES = 10


def directory_of(nodeid: str) -> str:
    """tests/launcher/test_cli.py::test_x -> tests/launcher; a top-level module is its own row."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else path


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # on the xdist controller this sees every worker's reports
    folder = directory_of(report.nodeid)
    _seconds[folder] += report.duration
    _tests[folder].add(report.nodeid)
    _module_seconds[report.nodeid.split("::", 1)[0]] += report.duration


def table(seconds: dict[str, float], tests: dict[str, set]) -> list[str]:
    rows = sorted(seconds.items(), key=lambda kv: -kv[1])
    width = max((len(folder) for folder, _ in rows), default=10)
    lines = [f"{'directory':<{width}}  {'tests':>5}  {'seconds':>8}"]
    lines += [f"{folder:<{width}}  {len(tests[folder]):>5}  {secs:>8.1f}" for folder, secs in rows]
    lines.append(f"{'total':<{width}}  {sum(len(t) for t in tests.values()):>5}  {sum(seconds.values()):>8.1f}")
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    if not config.getoption("durations", None) or not _seconds:
        return
    terminalreporter.write_sep("=", "seconds per test directory (set-up + call + tear-down)")
    for line in table(_seconds, _tests):
        terminalreporter.write_line(line)
    terminalreporter.write_sep("-", f"the {LONGEST_MODULES} longest modules (tests/scheduling.py FIRST)")
    for module, secs in sorted(_module_seconds.items(), key=lambda kv: -kv[1])[:LONGEST_MODULES]:
        terminalreporter.write_line(f"{secs:8.1f}  {module}")

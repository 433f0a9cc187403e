"""The one check every "refused in one line" test makes: what a command wrote to stderr is exactly one
line, starting with the command's error prefix, naming what is wrong (the project's rule for bad input:
one clear line saying what is wrong and how to fix it, no traceback)."""
from __future__ import annotations


def assert_one_line_refusal(stderr: str, prefix: str, *needles: str) -> str:
    """Asserts `stderr` is one line (its newline the only one) that starts with `prefix` and holds every
    needle; returns that line without its newline."""
    assert stderr.count("\n") == 1 and stderr.endswith("\n"), stderr[-3000:]
    line = stderr[:-1]
    assert line.startswith(prefix), stderr[-3000:]
    for needle in needles:
        assert needle in line, (needle, line)
    return line

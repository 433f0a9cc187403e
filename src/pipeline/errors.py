"""The launcher's two kinds of failure, each one line with an exit code, and verl's reasons made readable."""
from __future__ import annotations

import re

from hydra.errors import CompactHydraException

USAGE_EXIT = 2
# Ctrl-C or Slurm's SIGTERM: 128 + SIGINT, as the shell reports it
INTERRUPTED_EXIT = 130
# no training step ended within the stall bound (src/node/stall.py): BSD's EX_TEMPFAIL, a run to try again
STALLED_EXIT = 75


# what str.splitlines() breaks a line at: a refusal that echoes the user's input (an override with a
# carriage return in it, `'=\r'`) would print as two lines without this
_LINE_BREAKS = {c: repr(chr(c))[1:-1] for c in (0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)}


def escape_line_breaks(text: str) -> str:
    """`text` with its line breaks escaped (`\\r`), so that it prints as the one line it is meant to be.
    (src.config.one_line is the other half: it folds Hydra's multi-line errors into one line.)"""
    return text.translate(_LINE_BREAKS)


class UsageError(Exception):
    """One-line refusal of bad input; the launcher prints it and exits 2, before anything is written."""

    def __str__(self) -> str:
        return escape_line_breaks(super().__str__())


class RunError(CompactHydraException):
    """A run that could not start or whose training failed: one line and an exit code. In a sweep
    the launcher reports it with the job's overrides and log (Hydra prints it compactly)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(escape_line_breaks(message))
        self.code = code


REASON_CHARS = 400  # verl's longest assertion texts fit; a whole traceback does not


def verl_reason(exc: BaseException, overrides: list[str]) -> str:
    """verl's own reason on one line, and the override(s) that led to it. Hydra wraps the error of
    a config dataclass's __post_init__ ("Error in call to target ...:" then the cause on later
    lines), so the innermost exception of the chain holds the text the user needs."""
    chain, seen = [exc], {id(exc)}
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and id(nxt) not in seen:
        chain.append(nxt)
        seen.add(id(nxt))
    texts = [" ".join(l.strip() for l in str(e).splitlines() if l.strip()) for e in chain]
    inner = next(((e, t) for e, t in zip(reversed(chain), reversed(texts)) if t), (chain[-1], ""))
    reason = f"{type(inner[0]).__name__}: {inner[1]}" if inner[1] else type(chain[-1]).__name__
    if len(reason) > REASON_CHARS:
        reason = reason[:REASON_CHARS - 3] + "..."
    return f"{reason} ({_culprits(' '.join(texts), overrides)})"


def _culprits(text: str, overrides: list[str]) -> str:
    """The user's overrides verl's message names (by key or its last parts), else those that could
    have led to it: the verl.* ones first, else all."""
    named = []
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        parts = key[len("verl."):].split(".") if key.startswith("verl.") else key.split(".")
        # a group choice (reward=comet) is never "named": its word is in too many messages
        if "=" in o and len(parts) > 1 and any(re.search(rf"(?<![\w]){re.escape('.'.join(parts[i:]))}(?![\w])", text)
                            for i in range(len(parts))):
            named.append(o)
    if named:
        return "override: " + " ".join(named)
    mine = [o for o in overrides if o.lstrip("+~").startswith("verl.")]
    if mine:
        return "verl overrides given: " + " ".join(mine)
    return ("overrides given: " + " ".join(overrides)) if overrides else "no override given: the config files' values"

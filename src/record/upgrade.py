"""A snapshot written by any earlier version of this code, read for a re-run with today's code.

What a re-run needs from a snapshot (docs/snapshots.md): the composed config, for everything the
launcher does around verl (the plan: Ray CPUs, the scorer service and its models, preflight, the
checkpoint dir); and the verl config, which is replayed as stored (src/pipeline/replay.py). This
module brings the composed config into today's shape, in three steps, each reported:

1. Migrations (MIGRATIONS): a key renamed, moved or retyped is one named step that recognises
   the old shape itself (or, where the shape cannot show it, the snapshot's `format`, see
   src/record/snapshot.py FORMAT).
2. Keys added since are filled from today's defaults: today's conf/ composed with the snapshot's
   own overrides, so a default that depends on a group choice (a scorer model's `kind`) is that
   group's. The snapshot's own values always win.
3. Nothing else changes: a value the snapshot has is never rewritten by today's conf/.

Why filling rather than a migration per added key: keys are added every month and a migration
written for each is a migration someone forgets; filling covers every added key with no code,
and a key added next month reaches this month's snapshots the same way. Only changes of shape or
meaning need a migration, and those are rare and visible in review (the schema changes).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from src.config import compose_config, is_hydra_override

from . import snapshot, yaml_files


class SnapshotError(ValueError):
    """A snapshot that cannot be re-run: one line saying what is wrong with it and what to do."""


@dataclass(frozen=True)
class Migration:
    name: str                                  # what changed, for the report
    applies: Callable[[dict, int], bool]       # (composed, format) -> is this the old shape?
    apply: Callable[[dict], dict]


MIGRATIONS: list[Migration] = [
    # the one-package-per-stage layout (a485c05) made the GPU count a plain integer key
    Migration("gpus: the former `gpus` group {per_node: N} is the integer key gpus=N",
              lambda c, fmt: isinstance(c.get("gpus"), dict), lambda c: {**c, "gpus": c["gpus"]["per_node"]}),
]


@dataclass
class Upgraded:
    composed: dict                       # in today's shape, added keys filled
    overrides: list[str]
    original: dict                       # the snapshot's plan.json
    verl: dict                           # the snapshot's verl_config.yaml, as stored
    format: int
    code: str                            # the commit that wrote it (git.txt), or "unknown"
    migrations: list[str] = field(default_factory=list)
    filled: list[tuple[str, Any]] = field(default_factory=list)       # (dotted key, today's default)
    overrides_dropped: list[str] = field(default_factory=list)         # today's conf/ refuses them


def load(snapshot_dir: Path) -> Upgraded:
    """Read a snapshot dir and bring its composed config into today's shape. SnapshotError."""
    if not snapshot_dir.is_dir() or not (snapshot_dir / snapshot.COMPOSED).is_file():
        raise SnapshotError(f"{snapshot_dir} is not a snapshot dir (no {snapshot.COMPOSED}); pass "
                            f"outputs/runs/<run>/snapshot")
    composed = _read(snapshot_dir, snapshot.COMPOSED, yaml_files.load, dict)
    overrides = _read(snapshot_dir, snapshot.OVERRIDES, yaml_files.load, list, empty=[])
    original = _read(snapshot_dir, snapshot.PLAN, json.loads, dict)
    verl = _read(snapshot_dir, snapshot.VERL_CONFIG, yaml_files.load, dict)
    fmt = _format(snapshot_dir)
    if fmt > snapshot.FORMAT:
        raise SnapshotError(f"{snapshot_dir} has snapshot format {fmt}, newer than this code's "
                            f"{snapshot.FORMAT}: re-run it with the code that wrote it ({_code(snapshot_dir)})")
    applied = []
    for m in MIGRATIONS:
        if m.applies(composed, fmt):
            try:
                composed = m.apply(composed)
            except (KeyError, TypeError, ValueError) as exc:
                raise SnapshotError(f"{snapshot_dir}/{snapshot.COMPOSED} has an unexpected shape where "
                                    f"'{m.name}' applies ({type(exc).__name__}: {exc}); restore the file as "
                                    f"written") from None
            applied.append(m.name)
    today, dropped = today_defaults([str(o) for o in overrides])
    filled_cfg, filled = fill(composed, today)
    return Upgraded(composed=filled_cfg, overrides=[str(o) for o in overrides], original=original, verl=verl,
                    format=fmt, code=_code(snapshot_dir), migrations=applied, filled=filled,
                    overrides_dropped=dropped)


def today_defaults(overrides: list[str]) -> tuple[dict, list[str]]:
    """Today's conf/ composed with the snapshot's overrides, and those of them today's conf/ refuses
    (a group option removed since): those are left out one by one, so every other default still
    follows the snapshot's choices. Hydra's own overrides (hydra.*) do not shape the config."""
    usable = [o for o in overrides if not is_hydra_override(o)]
    try:
        return compose_config(usable), []
    except Exception:  # noqa: BLE001 - Hydra raises several kinds; which override is found below
        pass
    kept, dropped = [], []
    for o in usable:
        try:
            compose_config(kept + [o])
            kept.append(o)
        except Exception:  # noqa: BLE001
            dropped.append(o)
    return compose_config(kept), dropped


def fill(recorded: dict, today: dict, prefix: str = "") -> tuple[dict, list[tuple[str, Any]]]:
    """`recorded` with every key of `today` it lacks added (nested dicts merged key by key), and the
    added (dotted key, value) pairs. A recorded value is never replaced, whatever its type."""
    out = dict(recorded)
    added: list[tuple[str, Any]] = []
    for key, value in today.items():
        if key not in recorded:
            out[key] = value
            added.append((prefix + key, value))
        elif isinstance(value, dict) and isinstance(recorded[key], dict):
            out[key], more = fill(recorded[key], value, f"{prefix}{key}.")
            added += more
    return out, added


def _read(snapshot_dir: Path, name: str, parse, kind: type, empty=None):
    path = snapshot_dir / name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotError(f"{path} is missing or unreadable ({exc.strerror or exc}): a re-run needs the whole "
                            f"snapshot dir as the launcher wrote it; restore {name}") from None
    try:
        value = parse(text)
    except ValueError as exc:  # json.JSONDecodeError
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SnapshotError(f"{path} is not readable {name.rsplit('.', 1)[1].upper()} ({reason}); restore it as "
                            f"written") from None
    except yaml.YAMLError as exc:
        reason = " ".join(str(exc).split())[:200]
        raise SnapshotError(f"{path} is not readable YAML ({reason}); restore it as written") from None
    if value is None and empty is not None:
        return empty
    if not isinstance(value, kind):
        raise SnapshotError(f"{path} holds a {type(value).__name__}, not the {kind.__name__} the launcher writes; "
                            f"restore it as written")
    return value


def _format(snapshot_dir: Path) -> int:
    path = snapshot_dir / snapshot.FORMAT_FILE
    if not path.exists():
        return 1  # every snapshot written before format.json existed
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["format"])
    except (OSError, ValueError, KeyError, TypeError):
        raise SnapshotError(f"{path} is unreadable; restore it as written") from None


def _code(snapshot_dir: Path) -> str:
    try:
        for line in (snapshot_dir / snapshot.GIT).read_text(encoding="utf-8").splitlines():
            if line.startswith("sha:"):
                return line.split(":", 1)[1].strip()[:7] or "unknown"
    except OSError:
        pass
    return "unknown"

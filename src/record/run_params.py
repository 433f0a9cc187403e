"""What a run was trained with, as a comparison across runs describes it: the parameters that differ between the
runs (the swept ones), its seed and its outcome. Read by the sweep comparison (src/report/sweep_dirs.py) and by the
evaluation of runs (src/evaluate/runs.py: the seeds of one configuration averaged), so both group runs the same way.

What a run is trained with comes from what it recorded:
- `snapshot/overrides.yaml`: the command line's `key=value` overrides (a sweep's swept values);
  a key another run set and this one did not is read from `snapshot/composed.yaml` (a group's
  choice by its `name`: `algo` -> `grpo`);
- when some run has no snapshot (a checkpoint dir given directly) but every run has a
  `run_identity.json` (the training config the run id hashes, in the checkpoint dir the verl
  config names): verl's keys from it instead, for every run;
- the seed from `snapshot/plan.json`, `composed.yaml`, the overrides, the identity's `data.seed`,
  or a `seed<N>` in the dir's name (the checkpoint dir's naming), in that order.
Every one of these may be missing in a run dir an older version of the project wrote: what is
missing is left out, never guessed; a run that records none of what the others are described by
is a configuration of its own.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from src.record import identity as run_identity
from src.record import snapshot, sweep_summary, yaml_files

SEED = "seed"
# identity keys that hold the seed (src/verl_config/ppo_trainer.py maps the seed to data.seed)
_SEED_IDENTITY_KEYS = ("data.seed",)
_SEED_IN_NAME = re.compile(r"(?:^|[_/-])seed(\d+)(?=[_-]|$)")
# overrides that say where or how a run is written, never what it trains: not a configuration's parameter
_NOT_PARAMETERS = ("dry_run", "paths.", "hydra.", "hydra/", "debug.", "slurm.", "logger")

# a run's outcome, as the comparison shows it
DONE, FAILED, RUNNING, UNKNOWN = "done", "failed", "running", "no record"
_STATE_OF_ROW = {sweep_summary.SUCCEEDED: DONE, sweep_summary.FAILED: FAILED, sweep_summary.PENDING: RUNNING}


@dataclass
class RunEntry:
    run_dir: Path
    params: dict[str, str] = field(default_factory=dict)  # parameter -> value, as the command line spelled it
    seed: int | None = None
    state: str = UNKNOWN
    error: str | None = None
    # False: the run records none of what the others are described by (a run dir an old version
    # wrote): it is a configuration of its own, named by its dir
    recorded: bool = True

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def configuration(self) -> str:
        """The configuration's name: its parameters as the command line spelled them, `defaults` when none differ,
        the run's dir name for a run that records none of them."""
        if not self.recorded:
            return f"{self.name} (no recorded config)"
        return " ".join(f"{k}={v}" for k, v in self.params.items()) or "defaults"


def _yaml(path: Path):
    try:
        return yaml_files.load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None  # a damaged record is a missing one: the report says what it could not read


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _overrides(run_dir: Path) -> dict[str, str]:
    raw = _yaml(run_dir / snapshot.SNAPSHOT / snapshot.OVERRIDES)
    out = {}
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, str) or "=" not in item:
            continue
        key, value = item.split("=", 1)
        out[key.lstrip("+~")] = value
    return out


def _select(tree, dotted: str):
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def _composed_value(composed, key: str) -> str | None:
    """A key's value in the composed config as the command line would spell it: a group's choice by
    its name (`algo` -> its `name`), a scalar as it is."""
    value = _select(composed, key)
    if isinstance(value, dict):
        value = value.get("name")
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def _identity(run_dir: Path) -> dict:
    body = _json(run_dir / run_identity.IDENTITY_FILE)
    ident = body.get("identity") if isinstance(body, dict) else None
    return ident if isinstance(ident, dict) else {}


def _seed(run_dir: Path, overrides: dict, composed, ident: dict) -> int | None:
    plan = _json(run_dir / snapshot.SNAPSHOT / snapshot.PLAN)
    for value in ((plan or {}).get(SEED) if isinstance(plan, dict) else None,
                  _select(composed, SEED), overrides.get(SEED), *(ident.get(k) for k in _SEED_IDENTITY_KEYS)):
        try:
            if value is not None and not isinstance(value, bool):
                return int(value)
        except (TypeError, ValueError):
            continue
    m = _SEED_IN_NAME.search(run_dir.name)
    return int(m.group(1)) if m else None


def _is_parameter(key: str) -> bool:
    return key != SEED and not key.startswith(_NOT_PARAMETERS) and not key.endswith(f".{SEED}")


def _checkpoint_dir(run_dir: Path) -> Path:
    """Where the run's identity file is: the checkpoint dir its verl config names, or the dir itself
    (a checkpoint dir given directly)."""
    verl = _yaml(run_dir / snapshot.SNAPSHOT / snapshot.VERL_CONFIG)
    ckpt = _select(verl, "trainer.default_local_dir")
    return Path(str(ckpt)) if ckpt else run_dir


def describe(run_dirs: list[Path], rows_by_dir: dict[Path, dict]) -> list[RunEntry]:
    """Each run with the parameters that differ between the runs (the swept ones), its seed and its
    outcome (`rows_by_dir`: the sweep summaries' rows by resolved run dir).

    The parameters are the command line's overrides when every run has a snapshot; else the
    recorded training config (run_identity.json) when every run has one; a run without the
    record the others are described by is a configuration of its own (`recorded` False)."""
    overrides = {d: _overrides(d) for d in run_dirs}
    composed = {d: _yaml(d / snapshot.SNAPSHOT / snapshot.COMPOSED) for d in run_dirs}
    idents = {d: _identity(_checkpoint_dir(d)) for d in run_dirs}
    has_snapshot = {d: bool(overrides[d]) or composed[d] is not None for d in run_dirs}
    by_identity = not all(has_snapshot.values()) and all(idents.values())
    raw: dict[Path, dict[str, str] | None] = {}
    for d in run_dirs:
        if by_identity:
            raw[d] = {k: v if isinstance(v, str) else json.dumps(v) for k, v in idents[d].items() if _is_parameter(k)}
        else:
            raw[d] = {k: v for k, v in overrides[d].items() if _is_parameter(k)} if has_snapshot[d] else None
    keys = sorted({k for params in raw.values() if params for k in params})
    filled = {d: {k: raw[d].get(k, None if by_identity else _composed_value(composed[d], k)) for k in keys}
              for d in run_dirs if raw[d] is not None}
    swept = [k for k in keys if len({filled[d][k] for d in filled}) > 1]
    entries = []
    for d in run_dirs:
        row = rows_by_dir.get(d.resolve())
        state = _STATE_OF_ROW.get(row.get("state"), UNKNOWN) if row else UNKNOWN
        params = {k: filled[d][k] if filled[d][k] is not None else "-" for k in swept} if d in filled else \
            {k: "?" for k in swept}
        entries.append(RunEntry(run_dir=d, params=params, seed=_seed(d, overrides[d], composed[d], idents[d]),
                                state=state, error=row.get("error") if row and state == FAILED else None,
                                recorded=d in filled))
    return entries



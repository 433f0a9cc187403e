"""`--from-snapshot DIR`: a past run again from its snapshot, reproduced from step 0 in a new
checkpoint dir or, with --resume, continued in its own. Any snapshot this code has ever written
re-runs (docs/snapshots.md):
- verl runs the snapshot's own verl_config.yaml again, with this run's names and paths
  (src/pipeline/replay.py: replayed, not rebuilt by today's code);
- the launcher's own config (the plan around verl: scorer service, Ray, preflight) is the
  snapshot's composed config brought into today's shape (src/record/upgrade.py): migrations for
  keys that changed shape, and keys added since filled from today's defaults;
- the first lines say what was filled and whether any of it changes what verl runs, and whether the
  model, data and QE files it read still look as its snapshot recorded (src/record/fingerprint.py):
  a real re-run on changed files is refused unless --allow-changed-inputs says to go on.
What cannot be re-run (a file of the snapshot gone or damaged, a newer snapshot format, a verl
config today's verl refuses or that names code of ours gone since, a real run of a verl config
with no reward function) is one `error:` line and exit 2, before anything is written.
"""
from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

from src.record import fingerprint, snapshot, upgrade, yaml_files

from . import run_dirs
from .errors import USAGE_EXIT, UsageError
from .lineage import Lineage
from .replay import Replay, named_code_problem, prepare
from .run import execute

# re-run on model/data/QE files that differ from the snapshot's record (src/record/fingerprint.py)
ALLOW_CHANGED_INPUTS = "--allow-changed-inputs"


def snapshot_dir_of(path: Path) -> Path:
    """What `--from-snapshot PATH` names: a snapshot dir, or a run dir holding one (its snapshot/).
    Raises UsageError (one line) for a path that does not exist."""
    if not path.exists():
        raise UsageError(f"--from-snapshot {path}: no such file or directory; pass a run dir or its snapshot, "
                         f"e.g. outputs/runs/<run>/snapshot")
    if not (path / snapshot.COMPOSED).is_file() and (path / snapshot.SNAPSHOT / snapshot.COMPOSED).is_file():
        return path / snapshot.SNAPSHOT  # a run dir
    return path


def from_snapshot(snapshot_dir: Path, extra: list[str]) -> int:
    """Reproduce a run from step 0 into a new checkpoint dir, or with `--resume` continue it in
    its own dir. Either way a new run dir (snapshot, log) records this launch."""
    resume, allow_changed = "--resume" in extra, ALLOW_CHANGED_INPUTS in extra
    extra = [a for a in extra if a not in ("--resume", ALLOW_CHANGED_INPUTS)]
    bad = [a for a in extra if a not in ("dry_run=true", "dry_run=false")]
    if bad:
        print(f"error: --from-snapshot reproduces a run exactly and takes no overrides but dry_run=, got "
              f"{bad[0]}; compose a new run instead", file=sys.stderr)
        return USAGE_EXIT
    try:
        old = upgrade.load(snapshot_dir)
        replay = prepare(old.verl)
        problem = named_code_problem(replay.verl)
        if problem:
            raise upgrade.SnapshotError(f"{snapshot_dir}/{snapshot.VERL_CONFIG}: {problem}; this snapshot needs the "
                                        f"code that wrote it ({old.code})")
        if "checkpoint_dir" not in old.original:
            raise upgrade.SnapshotError(f"{snapshot_dir}/{snapshot.PLAN} names no checkpoint_dir; restore it as written")
    except upgrade.SnapshotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_EXIT
    composed = old.composed
    if extra:
        composed["dry_run"] = extra[-1] == "dry_run=true"
    if not replay.has_reward_function and not composed["dry_run"]:
        print(f"error: {snapshot_dir}/{snapshot.VERL_CONFIG} names no reward function (written by {old.code}, before "
              f"the project's existed): verl would score with its default_compute_score, which raises for this "
              f"project's data, at the first rollout; it cannot train. Its dry run shows its plan; compose a new "
              f"run to train", file=sys.stderr)
        return USAGE_EXIT
    inputs = fingerprint.read(snapshot_dir)
    changed = fingerprint.changes(inputs)
    if changed and not composed["dry_run"] and not allow_changed:
        print(f"error: {_changed_line(changed)}: this re-run would not reproduce the run; restore them, or add "
              f"{ALLOW_CHANGED_INPUTS} to re-run on today's files", file=sys.stderr)
        return USAGE_EXIT
    for line in notice(old, replay) + [inputs_line(inputs, changed, allow_changed)]:
        print(line)
    lineage = Lineage(original=old.original, resume=resume, replay=replay)
    run_dir = _new_run_dir(Path(composed["paths"]["output_dir"]) / "runs", f"from_{snapshot_dir.parent.name}")
    code = execute(composed, old.overrides, run_dir, lineage=lineage)
    new_plan = run_dir / snapshot.SNAPSHOT / snapshot.PLAN
    if new_plan.is_file() and old.original.get("run_id"):
        now = json.loads(new_plan.read_text(encoding="utf-8")).get("run_id")
        if now != old.original["run_id"]:
            print(f"warning: the training config's id is {now}, the snapshot's run was {old.original['run_id']} "
                  f"(verl or code changed); diff the two verl_config.yaml files", file=sys.stderr)
    return code


def from_snapshot_command(argv: list[str]) -> int:
    """`python -m src.launch ... --from-snapshot DIR ...`: the dir read from the command line, checked
    (_before_replay), then the run; a missing or bad dir is one `error:` line and exit 2."""
    i = argv.index("--from-snapshot")
    if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
        print("error: --from-snapshot needs a dir, e.g. --from-snapshot outputs/runs/<run>/snapshot",
              file=sys.stderr)
        return USAGE_EXIT
    extra = argv[:i] + argv[i + 2:]
    try:
        snap = snapshot_dir_of(Path(argv[i + 1]))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_EXIT
    code = _before_replay(snap, extra)
    return code if code is not None else from_snapshot(snap, extra)


def _before_replay(snapshot_dir: Path, extra: list[str]) -> int | None:
    """Before a --from-snapshot run: its new run dir can be written (else one line, exit 2), and a
    dry run's snapshot (it records dry_run: true, so it dry-runs again unless the command line says
    otherwise) says so, with how, before it happens."""
    from .precheck import not_writable

    try:
        import yaml

        composed = yaml_files.load((snapshot_dir / "composed.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None  # not a snapshot, or a damaged one: from_snapshot refuses it with its own line
    if not isinstance(composed, dict):
        return None
    output_dir = (composed.get("paths") or {}).get("output_dir")
    refusal = not_writable(Path(str(output_dir)) / "runs", "the run dir's parent", "paths.output_dir") if output_dir else None
    if refusal:
        print(f"error: {refusal.split('; ')[0]}; a re-run writes its run dir under the snapshot's paths.output_dir: "
              f"make that writable", file=sys.stderr)
        return USAGE_EXIT
    if composed.get("dry_run") is True and not any(a.startswith("dry_run=") for a in extra):
        print(f"note: {snapshot_dir} is a dry run's snapshot, so this is a dry run again; add dry_run=false "
              f"to start the run", file=sys.stderr)
    return None


def notice(old: upgrade.Upgraded, replay: Replay) -> list[str]:
    """The first lines of a re-run: what was brought into today's shape, and whether verl runs
    anything the snapshot did not have."""
    lines = [f"snapshot: written by {old.code} (snapshot format {old.format}), re-run with today's code "
             f"(format {snapshot.FORMAT})"]
    for name in old.migrations:
        lines.append(f"snapshot: migrated {name}")
    if old.overrides_dropped:
        lines.append(f"snapshot: today's conf/ refuses these recorded overrides, so defaults are filled without "
                     f"them: {' '.join(old.overrides_dropped)}")
    if old.filled:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in old.filled)
        lines.append(f"snapshot: {len(old.filled)} key(s) added since, filled from today's defaults (values in "
                     f"the new snapshot's {snapshot.COMPOSED}): {shown}")
    else:
        lines.append("snapshot: no key added since; nothing filled")
    if not replay.has_reward_function:
        lines.append("snapshot: its verl config names no reward function (written before the project's existed): "
                     "a real re-run is refused, as verl's default scorer raises on this project's data")
    moved = "; our modules moved since are named by today's path (" + ", ".join(
        f"{a} -> {b}" for a, b in replay.renamed) + ")" if replay.renamed else ""
    if replay.verl_filled:
        keys = ", ".join(f"{k}={_short(v)}" for k, v in replay.verl_filled)
        lines.append(f"snapshot: changes what verl runs: YES: today's verl has key(s) the snapshot's verl config "
                     f"lacks, filled from verl's defaults: {keys}{moved}")
    else:
        lines.append(f"snapshot: changes what verl runs: no: verl runs the snapshot's own verl_config.yaml, with "
                     f"this run's names and paths{moved}; the filled keys set up only what runs beside verl")
    return lines


def _changed_line(changed: list[str]) -> str:
    return f"the files the run read changed since its snapshot: {'; '.join(changed)}"


def inputs_line(inputs: dict | None, changed: list[str], allowed: bool) -> str:
    """The notice's last line: the files the run read (snapshot/inputs.json) against today's."""
    if inputs is None:
        return (f"snapshot: records no fingerprint of the files it read (no {fingerprint.FILE}: written before it "
                f"existed); they are not compared")
    if changed:
        return (f"snapshot: {_changed_line(changed)}; " + (f"re-running on today's files ({ALLOW_CHANGED_INPUTS})"
                if allowed else f"a real re-run is refused without {ALLOW_CHANGED_INPUTS}"))
    compared = [i.get("what", "?") for i in inputs["inputs"] if isinstance(i, dict) and i.get("type") in ("file", "dir")]
    return (f"snapshot: the files it read are as recorded (size and sampled content: {', '.join(compared)})"
            if compared else "snapshot: none of the files it read existed when it was written; nothing to compare")


def _short(value) -> str:
    """A filled value on the notice line: a scalar as is, a whole group added since as {...}."""
    if isinstance(value, dict):
        return "{...}" if value else "{}"
    text = json.dumps(value, default=str) if isinstance(value, list) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _new_run_dir(parent: Path, name: str) -> Path:
    """`<parent>/<time>_<name>`, created here: two launches from one snapshot in the same second
    (a dry run, then --resume) get two dirs (`-2` on the second), never one holding both snapshots."""
    return run_dirs.claim(parent / f"{dt.datetime.now():%Y-%m-%d_%H-%M-%S}_{name}")

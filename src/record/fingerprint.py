"""snapshot/inputs.json: what the files a run reads looked like when its snapshot was written, and what
differs now. A snapshot records paths; without this a --from-snapshot re-run on re-prepared data or a
model replaced in place would claim to reproduce a run it cannot (issue 51, finding 15).

Bounded, so that every launch (dry runs too) can afford it on multi-GB files:
- a file (a parquet, a QE checkpoint, a weight shard): its size, its mtime, and a SHA-256 of its bytes:
  all of them up to WHOLE_MAX (64 MiB: prepared prompt sets, configs, tokenizers, weight indexes; a
  fraction of a second), above it the first and last MiB only. For a parquet file that tail read covers
  its whole footer (up to 64 MiB): the schema, the row count, each row group's offsets and the writer's
  metadata.
- a dir (the policy model, a QE model dir): each top-level file the same way, names included, so
  config.json, the weights index and the tokenizer files are compared whole, each weight shard sampled,
  and a file added or removed shows. At most MAX_DIR_FILES files.
- absent, or a hub id (hf:...), is recorded as such; neither is compared (nothing to compare with).

A difference is a changed size or hash, or a file of a dir added or gone. The mtime is recorded and
shown beside a difference, but is no difference on its own: a copy (cp, a re-download) changes it and
not the content. What this cannot see: in a file above 64 MiB, an edit that keeps its size and leaves
its first and last MiB (a parquet: its footer) alone, such as one row replaced by another of the same
length in the middle of a large parquet. (Weights trained further and saved over the old ones change the
first MiB of each shard: the tensor data begins right after the safetensors header.) Hashing every byte
would see it too, at minutes per launch on a multi-GB file.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import struct
from pathlib import Path

FILE = "inputs.json"
SCHEME = 1  # raised if what is recorded per file changes (then an older record is compared by its own scheme)
MIB = 1 << 20
WHOLE_MAX = 64 * MIB  # files up to this size are hashed whole
MAX_FOOTER = 64 * MIB
MAX_DIR_FILES = 256
HUB_PREFIX = "hf:"


def _sample(path: Path, size: int) -> str:
    """SHA-256 of the whole file up to WHOLE_MAX, else of its first and last MiB (a parquet's footer whole)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= max(WHOLE_MAX, 2 * MIB):
            for block in iter(lambda: f.read(8 * MIB), b""):
                h.update(block)
            return h.hexdigest()
        h.update(f.read(MIB))
        tail = MIB
        if path.suffix == ".parquet":
            # a parquet file ends with <footer><footer length: 4 bytes LE>PAR1 (the format's spec)
            f.seek(size - 8)
            end = f.read(8)
            if end[4:] == b"PAR1":
                tail = max(tail, min(struct.unpack("<I", end[:4])[0] + 8, MAX_FOOTER, size - MIB))
        f.seek(size - tail)
        h.update(f.read(tail))
    return h.hexdigest()


def _file(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime": st.st_mtime, "sha256": _sample(path, st.st_size)}


def describe(path: str) -> dict:
    """What `path` looks like now (see the module's docstring)."""
    if path.startswith(HUB_PREFIX):
        return {"type": "hub"}
    p = Path(path)
    try:
        if p.is_file():
            return {"type": "file", **_file(p)}
        if p.is_dir():
            names = sorted(c.name for c in p.iterdir() if c.is_file())
            files = {name: _file(p / name) for name in names[:MAX_DIR_FILES]}
            return {"type": "dir", "files": files, "truncated": len(names) > MAX_DIR_FILES}
    except OSError as exc:  # unreadable: recorded as such, compared as a difference only if it was readable
        return {"type": "unreadable", "error": exc.strerror or str(exc)}
    return {"type": "absent"}


def record(inputs) -> dict:
    """inputs.json's content for (what, path, built) triples (src/plan/inputs.py lists a run's); `built`:
    a launch builds it (model.build_dir), so its absence later is no difference."""
    return {"scheme": SCHEME, "inputs": [{"what": what, "path": str(path), "built": bool(built), **describe(str(path))}
                                         for what, path, built in inputs]}


def to_text(fingerprint: dict) -> str:
    return json.dumps(fingerprint, indent=1) + "\n"


def read(snapshot_dir: Path) -> dict | None:
    """The snapshot's record, or None when it has none (written before inputs.json existed) or an
    unreadable one (a record only: the re-run goes on, saying it could not compare)."""
    try:
        data = json.loads((snapshot_dir / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("inputs"), list) else None


def _when(mtime) -> str:
    try:
        return dt.datetime.fromtimestamp(float(mtime)).strftime("%Y-%m-%d %H:%M")
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def _file_change(then: dict, now: dict) -> str | None:
    if then.get("size") == now.get("size") and then.get("sha256") == now.get("sha256"):
        return None
    size = (f"size {then.get('size')} -> {now.get('size')} bytes" if then.get("size") != now.get("size")
            else "same size, other bytes")
    return f"{size}, modified {_when(then.get('mtime'))} -> {_when(now.get('mtime'))}"


def _dir_change(then: dict, now: dict) -> str | None:
    old, new = then.get("files") or {}, now.get("files") or {}
    parts = []
    changed = [n for n in sorted(set(old) & set(new)) if _file_change(old[n], new[n])]
    for label, names in (("changed", changed), ("added", sorted(set(new) - set(old))),
                         ("gone", sorted(set(old) - set(new)))):
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            parts.append(f"{shown} {label}")
    return "; ".join(parts) or None


def changes(recorded: dict | None) -> list[str]:
    """Each input that differs now from `recorded` (read()), as '<what> <path> (<how>)'."""
    found = []
    for then in (recorded or {}).get("inputs") or []:
        if not isinstance(then, dict) or then.get("type") not in ("file", "dir"):
            continue  # absent, a hub id or unreadable then: nothing to compare with
        what, path = then.get("what", "input"), str(then.get("path"))
        now = describe(path)
        if now["type"] == "absent":
            how = None if then.get("built") else "gone"  # what a launch builds is built again
        elif now["type"] == "unreadable":
            how = f"unreadable now: {now.get('error')}"
        elif now["type"] != then["type"]:
            how = f"a {then['type']} then, a {now['type']} now"
        elif now["type"] == "file":
            how = _file_change(then, now)
        else:
            how = _dir_change(then, now)
        if how:
            found.append(f"{what} {path} ({how})")
    return found

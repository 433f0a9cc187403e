"""Atomic writes: a reader (or a training run started meanwhile) never sees a half-written file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def _atomic(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # The temp file lives in the target directory so the final rename stays on one file system.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_parquet_atomic(rows: list[dict], path: Path) -> None:
    table = pa.Table.from_pylist(rows)
    _atomic(path, lambda tmp: pq.write_table(table, tmp))


def write_json_atomic(obj: dict, path: Path) -> None:
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=2)
            f.write("\n")

    _atomic(path, write)

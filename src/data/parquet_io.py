"""The parquet and stats json of src.data.prepare, written atomically (src/data/safe_write.py): a
reader (or a training run started meanwhile) never sees a half-written file, and the files get the
modes the user's umask gives."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .safe_write import atomic_files


def parquet_writer(rows: list[dict]):
    table = pa.Table.from_pylist(rows)
    return lambda tmp: pq.write_table(table, tmp)


def json_writer(obj: dict):
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=2)
            f.write("\n")

    return write


def write_parquet_atomic(rows: list[dict], path: Path) -> None:
    atomic_files({Path(path): parquet_writer(rows)})


def write_json_atomic(obj: dict, path: Path) -> None:
    atomic_files({Path(path): json_writer(obj)})

"""Is a parquet file one `python -m src.data.prepare` wrote? Read from its schema and metadata only.

The launcher's dry run asks this of the configured train and val files when they exist: a file
from another prep script (no `extra_info`, no `reward_model.ground_truth`), with 0 rows, or built
with another prompt template than `data.template` says would otherwise pass the dry run and fail
at the first reward call on the GPU node (src/rewards/compute.py reads extra_info's template,
split, src and tgt_lang). What a row must hold is what `rows.make_row` writes: the columns and
struct fields are read off one row it makes, so the contract has one place.
"""
from __future__ import annotations

from pathlib import Path

from .rows import Example, make_row
from .templates import TEMPLATES


class DataFileError(ValueError):
    """One line: the file, what is wrong, how to fix it."""


def _contract() -> dict[str, set[str]]:
    """column -> its struct fields ({} for a plain column), as make_row writes them."""
    row = make_row(Example(src="x", tgt="y", src_lang="zh", tgt_lang="en"), dataset_name="d", template=TEMPLATES[0],
                   split="train", index=0)
    # `ability` is carried along by verl and read by nothing: a file without it trains the same
    return {k: set(v) if isinstance(v, dict) else set() for k, v in row.items() if k != "ability"}


def check_template(template: str) -> None:
    """`data.template` names a template of src/data/templates.py."""
    if template not in TEMPLATES:
        raise DataFileError(f"data.template={template!r} is not a prompt template (known: {', '.join(TEMPLATES)}); "
                            f"it must be the --template the data was prepared with")


def check_prepared(path: str | Path, what: str, template: str, split: str) -> int:
    """Row count of `path`, a parquet with every column and field make_row writes, at least one row,
    and every row built with `template`. DataFileError otherwise. `split`: the --split to name in the fix."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    fix = f"prepare it with `python -m src.data.prepare --split {split} --template {template} ...` (docs/data-and-report.md)"
    try:
        meta = pq.ParquetFile(path)
        schema, rows = meta.schema_arrow, meta.metadata.num_rows
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same one-line refusal
        reason = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise DataFileError(f"{what} {path} is not a readable parquet file ({type(exc).__name__}: {reason}); "
                            f"{fix}") from None
    missing = []
    for column, fields in _contract().items():
        if column not in schema.names:
            missing.append(f"column {column}")
            continue
        kind = schema.field(column).type
        have = {kind.field(i).name for i in range(kind.num_fields)} if hasattr(kind, "num_fields") and fields else set()
        missing += [f"{column}.{f}" for f in sorted(fields - have)]
    if missing:
        raise DataFileError(f"{what} {path} was not written by src.data.prepare: it lacks {', '.join(missing)} "
                            f"(src.data.prepare writes them for the reward function and verl's dataset); {fix}")
    if rows == 0:
        raise DataFileError(f"{what} {path} has 0 rows; {fix}")
    found = pq.read_table(path, columns=["extra_info.template"]).column(0)
    used = sorted(str(v) for v in pc.unique(found).to_pylist())
    if used != [template]:
        raise DataFileError(f"{what} {path} was prepared with template {', '.join(used)} but data.template={template}: "
                            f"set data.template={used[0]} if that is the template you want, or {fix}")
    return rows

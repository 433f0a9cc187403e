"""The test set: rows of a parquet written by src.data.prepare (src/data/rows.py is the contract)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from src.data.templates import TEMPLATES
from src.data.terms import Term, parse_terms

from .options import UsageError


@dataclass(frozen=True)
class TestRow:
    index: int                # extra_info.index: the row's id in its file (what canned responses key on)
    line: int                 # the row's segment number in its file, 0-based, dropped segments counted
                              # (the line of a hypotheses= file that translates it)
    data_source: str
    src_lang: str
    tgt_lang: str
    src: str
    ref: str
    template: str
    messages: list            # the chat prompt, [{role, content}, ...]
    terms: tuple[Term, ...] | None = None  # extra_info["terms"] (src/data/terms.py); None: the file has none

    @property
    def direction(self) -> str:
        return f"{self.src_lang}-{self.tgt_lang}"


def from_verl_row(record: dict, line: int) -> TestRow:
    """The TestRow of one verl row (src.data.rows.make_row's dict, or a parquet row of it), segment `line`
    of its file; KeyError, TypeError or ValueError when a field the contract names is missing or malformed."""
    info = record["extra_info"] or {}
    return TestRow(index=int(info["index"]), line=line, data_source=str(record["data_source"]),
                   src_lang=str(info["src_lang"]), tgt_lang=str(info["tgt_lang"]), src=str(info["src"]),
                   ref=str((record["reward_model"] or {})["ground_truth"]), template=str(info["template"]),
                   messages=[dict(m) for m in record["prompt"]],
                   terms=None if info.get("terms") is None else parse_terms(info["terms"], str(info["src_lang"]),
                                                                             str(info["tgt_lang"])))


def read_testset(path: str | Path, limit: int | None = None) -> list[TestRow]:
    """Rows in file order (the first `limit` of them); UsageError (one line) when the file is missing
    or is not prepare's output. Every row is checked, `limit` or not."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"data: no such file: {path} (a parquet from python -m src.data.prepare)")
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several kinds for a non-parquet file
        raise UsageError(f"data: cannot read {path} as parquet: {str(exc).splitlines()[0]}") from None
    missing = {"prompt", "data_source", "reward_model", "extra_info"} - set(table.column_names)
    if missing:
        raise UsageError(f"data: {path} lacks column(s) {', '.join(sorted(missing))}; "
                         f"write it with python -m src.data.prepare")
    rows = []
    seen = set()
    for i, r in enumerate(table.to_pylist()):
        try:
            row = from_verl_row(r, line=i)
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"data: row {i} of {path} lacks {exc} (extra_info needs index, src, src_lang, "
                             f"tgt_lang, template; reward_model needs ground_truth)") from None
        if row.template not in TEMPLATES:
            raise UsageError(f"data: row {i} of {path} has unknown template {row.template!r}")
        if row.index in seen:
            raise UsageError(f"data: extra_info.index {row.index} appears twice in {path}")
        seen.add(row.index)
        rows.append(row)
    if not rows:
        raise UsageError(f"data: {path} has no rows")
    return rows if limit is None else rows[:limit]


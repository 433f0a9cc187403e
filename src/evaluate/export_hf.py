"""`python -m src.evaluate.export_hf checkpoint=PATH [out=DIR]`: a verl checkpoint as an HF model dir.

For whatever reads HF models (vLLM, transformers, another team's evaluation, the Hub): verl saves FSDP shards
(src/evaluate/checkpoint.py says which layouts are accepted), merged here with verl's own merger, the step the
evaluation takes before it generates. The default `out` is where the evaluation looks first
(`<actor dir>/merged_hf`), so an evaluation of the same checkpoint afterwards merges nothing; with another
`out`, give the evaluation `merged_dir=` the same dir.

Prints the HF dir on stdout (for `$(...)`), what it does on stderr. A checkpoint saved with its HF weights
(`checkpoint.save_contents` with `hf_model`), or an HF dir already, is printed as it is. Bad input (no such
checkpoint, missing shards, an `out` that exists and is not a finished merge, or cannot be written) is one
line and exit 2 before the merger starts; a failed merge is one line and exit 1 and leaves nothing behind (a
temp dir renamed into place when whole); Ctrl-C, one line and 130.
"""
from __future__ import annotations

import sys

from .checkpoint import MergeError, hf_model_dir, merge_target_problem, resolve_checkpoint
from .errors import UsageError

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 1, 2, 130
KEYS = ("checkpoint", "out")
USAGE = "python -m src.evaluate.export_hf checkpoint=PATH [out=DIR]"


def parse(argv: list[str]) -> dict[str, str]:
    given: dict[str, str] = {}
    for token in argv:
        key, sep, value = token.partition("=")
        if not sep or key not in KEYS:
            raise UsageError(f"unknown argument {token!r}: {USAGE}")
        if not value:
            raise UsageError(f"{key}= is empty: {USAGE}")
        given[key] = value
    if "checkpoint" not in given:
        raise UsageError(f"checkpoint= is required: {USAGE}")
    return given


def _say(message: str) -> None:
    print(f"export_hf: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:
        print(__doc__.strip())
        return 0
    try:
        given = parse(argv)
        resolved = resolve_checkpoint(given["checkpoint"])
        problem = merge_target_problem(resolved, given.get("out"), option="out")
        if problem:
            raise UsageError(problem)
        if resolved.kind == "hf" and given.get("out"):
            raise UsageError(f"out: {resolved.path} is an HF model dir already (config.json + weights): nothing to "
                             f"merge; use it as it is, or copy it")
        target = hf_model_dir(resolved, given.get("out"), log=_say)
    except UsageError as exc:
        print(f"export_hf: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MergeError as exc:
        print(f"export_hf: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:  # the merge's temp dir is removed by hf_model_dir's own cleanup
        print("export_hf: stopped (interrupt): no HF dir was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    if resolved.kind == "fsdp" and given.get("out"):
        _say(f"an evaluation of this checkpoint reuses it with merged_dir={target}")
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())

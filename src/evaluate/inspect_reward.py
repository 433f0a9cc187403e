"""Why did this translation get its reward? `python -m src.evaluate.inspect_reward --input FILE.jsonl`.

Each input line is one JSON object: `src`, `lang_pair` (`zh-en`), either `hyp` (the translation
text, wrapped here in the tags the run's template asks for) or `response` (a full response, tags
included, scored as the policy wrote it), optional `ref`, `id` and `terms` (the segment's required terms, any form
docs/terminology.md names; the term component scores them where the run has it). Every line gets the TRAINING
reward exactly as verl's reward workers compute it: `src.rewards.compute.compute_score` with the
reward kwargs the launcher writes into verl's config (src/rewards/group_kwargs.py `reward_kwargs` on the
composed config, plus reward.credit's) and the extra_info src.data.prepare writes (split=train, the
run's data.template). Output, per line: `id` (when given), `score`, `components` (every key of
compute_score's result but `score` and its strings src/translation/error_spans/credit_ranges),
`guards` (the `degenerate_*` and `guard_*` flags equal to 1.0: the cheap checks that fired),
`translation` (the scored text) and `error_spans`; plus a table on the terminal.

QE service: with `scorer_url=` (token in QE_SCORER_TOKEN) the running one; otherwise one started as
`python -m src.evaluate` starts it (src/evaluate/scorer_service.py) with the models of the composed
`scorer` group that the training reward weights. `--no-scorer` starts none and asks none:
compute_score runs with `ask_scorer=False`, so every QE component stays null and the reward is
compute_score's own arithmetic for a row the service was not asked about: a weighted QE component
counts at its lower clip bound (src/rewards/combine.py).
Format failures and degenerate answers score exactly as in training (they never reach the service).
Not included: the overlong-buffer penalty algo=dapo's reward manager adds after the function
returns (it reads the response's token count; the group filter reads `score_rounded` without it).

An application of the reward (src/rewards), so it lives with evaluate, which may import src.config
and src.rewards; verl's reward workers never load it. Its imports stay inside functions, so that
--help answers before the config and the reward are loaded.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as the shell reports it
# the split compute_score treats as training (not in reward.validation.splits)
TRAIN_SPLIT = "train"
LANG = re.compile(r"^[a-z]{2,3}$")
# keys of compute_score's result that are text about the row, not reward components
TEXT_KEYS = ("src", "translation", "error_spans", "credit_ranges", "reward_parts")
GUARD_PREFIXES = ("degenerate_", "guard_")
# tool keys among the overrides (the rest are Hydra overrides of the launcher's config)
TOOL_KEYS = ("scorer_url", "scorer_device")
# compute_score calls in flight (the service batches them, as it does a worker's)
CONCURRENCY = 16


class UsageError(ValueError):
    """Bad input: one line, exit 2, nothing written."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse prints usage + exits; we want one line
        raise UsageError(f"{message} (see --help)")


def _parser() -> _Parser:
    p = _Parser(prog="python -m src.evaluate.inspect_reward",
                description="Compute the training reward of given translations, component by component "
                            "(docs/rewards.md, 'Why did this translation get its reward?').",
                epilog="overrides: the launcher's, e.g. reward=comet reward.weights.kiwi=0.5 data.template=rl; "
                       "tool keys: scorer_url=URL (a running QE service, token in QE_SCORER_TOKEN), "
                       "scorer_device=auto|cpu|cuda[:N] (the service started here)")
    p.add_argument("--input", required=True, metavar="FILE.jsonl",
                   help="one JSON object per line: src, lang_pair, hyp or response, optional ref and id")
    p.add_argument("--out", metavar="FILE.jsonl", help="write one JSON object per input line (never overwrites)")
    p.add_argument("--no-scorer", action="store_true",
                   help="start and ask no QE service: QE components are null and count at their lower clip bound")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    return p


@dataclass(frozen=True)
class Row:
    line: int
    id: Any
    src: str
    ref: str
    lang_pair: str
    src_lang: str
    tgt_lang: str
    hyp: str | None
    response: str | None
    # the segment's required terms as extra_info holds them ([{"src", "tgt"}]); None: the line gives none
    terms: list | None = None


def read_rows(path: Path) -> list[Row]:
    from src.data.readers import InputError, JsonLineError, iter_json_objects

    if not path.is_file():
        raise UsageError(f"--input {path}: no such file")
    rows = []
    try:
        for n, obj in iter_json_objects(path):
            rows.append(_row(obj, n, f"{path} line {n}"))
    except JsonLineError as exc:
        where = f"{path} line {exc.line}"
        raise UsageError({"json": f"{where}: not JSON ({exc.detail} at column {exc.column})",
                          "depth": f"{where}: not JSON (nested too deeply)",
                          "type": f"{where}: a JSON object is needed, got {exc.detail}"}[exc.kind]) from None
    except InputError as exc:  # not UTF-8: the readers' line says where and how to convert it
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"--input {path}: cannot read it ({exc})") from None
    if not rows:
        raise UsageError(f"--input {path}: no rows (one JSON object per line)")
    return rows


def _row(obj: dict, n: int, where: str) -> Row:
    """One input line's object as a Row; UsageError naming `where` for a missing or wrong field."""
    src = obj.get("src")
    if not isinstance(src, str) or not src.strip():
        raise UsageError(f"{where}: needs \"src\", the source text (a non-empty string)")
    has_hyp, has_resp = obj.get("hyp") is not None, obj.get("response") is not None
    if has_hyp == has_resp:
        raise UsageError(f"{where}: give exactly one of \"hyp\" (the translation) and \"response\" (the full "
                         f"response with tags), got {'both' if has_hyp else 'neither'}")
    for key in ("hyp", "response", "ref"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise UsageError(f"{where}: \"{key}\" must be a string, got {type(obj[key]).__name__}")
    pair = obj.get("lang_pair")
    parts = pair.split("-") if isinstance(pair, str) else []
    if len(parts) != 2 or not all(LANG.match(p) for p in parts) or parts[0] == parts[1]:
        raise UsageError(f"{where}: \"lang_pair\" must be source-target language codes such as zh-en, "
                         f"got {pair!r}")
    terms = None
    if obj.get("terms") is not None:
        from src.data.terms import TermsError, parse_terms

        try:
            terms = [t.as_dict() for t in parse_terms(obj["terms"], parts[0], parts[1])]
        except TermsError as exc:
            raise UsageError(f"{where}: \"terms\": {exc}") from None
    return Row(line=n, id=obj.get("id"), src=src, ref=obj.get("ref") or "", lang_pair=pair,
               src_lang=parts[0], tgt_lang=parts[1], hyp=obj.get("hyp"), response=obj.get("response"), terms=terms)


def check_out(path: Path | None) -> None:
    if path is None:
        return
    if path.exists() or path.is_symlink():
        raise UsageError(f"--out {path} exists: it is never overwritten; give a new file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"--out {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {path}: folder {parent} is not writable")


def wrap(hyp: str, template: str) -> str:
    """A response in the format the template asks for (src/data/templates.py), the translation inside."""
    from src.data.templates import (THINK_CLOSE, THINK_OPEN, THINK_TRANSLATE, TRANSLATE_CLOSE, TRANSLATE_OPEN,
                                    expected_format)

    body = f"{TRANSLATE_OPEN}{hyp}{TRANSLATE_CLOSE}"
    return f"{THINK_OPEN}{THINK_CLOSE}{body}" if expected_format(template) == THINK_TRANSLATE else body


def extra_info(row: Row, template: str, index: int) -> dict:
    """As src.data.prepare writes it for a training row."""
    return {"split": TRAIN_SPLIT, "src": row.src, "src_lang": row.src_lang, "tgt_lang": row.tgt_lang,
            "lang_pair": row.lang_pair, "template": template, "index": index,
            **({} if row.terms is None else {"terms": row.terms})}


def split_overrides(tokens: list[str]) -> tuple[dict[str, str], list[str]]:
    tool, hydra = {}, []
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep:
            raise UsageError(f"arguments after the flags are key=value overrides, got {token!r}")
        if key in TOOL_KEYS:
            tool[key] = value
        else:
            hydra.append(token)
    return tool, hydra


def compose(overrides: list[str]) -> dict:
    from src.config import compose_config, one_line, plus_form

    try:
        return compose_config(overrides)
    except Exception as exc:  # Hydra/OmegaConf errors of many types; each is the user's override
        line = one_line(exc)
    # `reward.weights.komet=1`: the reward's refusal of the name in the `+` form (as the launcher's check)
    retry = plus_form(line, overrides)
    if retry:
        key, plus = retry
        try:
            reward_kwargs(compose(plus))
        except UsageError as refused:
            if repr(key.rsplit(".", 1)[-1]) in str(refused):
                raise
    raise UsageError(f"config: {line}")


def reward_kwargs(cfg: dict) -> dict:
    """What the launcher writes to reward.custom_reward_function.reward_kwargs (built by the same
    function, src/rewards/launch.py)."""
    from src.rewards.launch import REFUSALS, reward_launch

    try:
        return reward_launch(cfg).kwargs
    except REFUSALS as exc:
        raise UsageError(str(exc)) from None


def training_models(kw: dict) -> dict[str, str]:
    """model role -> scorer model name, for the roles the training reward weights."""
    from src.rewards.components import get_component
    from src.rewards.settings import RewardSettings

    s = RewardSettings.from_kwargs(kw)
    roles = {get_component(c).model for c, w in s.train_weights.items() if w != 0.0} - {None}
    return {r: s.models[r] for r in sorted(roles) if s.models.get(r)}


@contextlib.contextmanager
def scorer_for(models: dict[str, str], tool: dict[str, str], scorer_cfg: dict, no_scorer: bool):
    """Sets QE_SCORER_URL/_TOKEN for compute_score for the block: the given service, one started
    here, or none (--no-scorer, or a training reward without QE components). With --no-scorer the
    service's environment is cleared too (main), so any way to the service would raise, not score."""
    from src.rewards.client import ENV_TOKEN, ENV_URL

    if no_scorer or not models:
        if no_scorer and "scorer_url" in tool:
            raise UsageError("--no-scorer and scorer_url= contradict each other: drop one")
        yield None
        return
    from src.evaluate import qe_metrics, scorer_service
    from src.evaluate.options import EvalOptions, UsageError as EvalUsageError, model_option
    from src.scorer.vocabulary import SPAN_METRIC

    # a model role (src/rewards/components.py MODEL_ROLES) is src.evaluate's metric of that name, the
    # span role's is xcomet; its model option is <metric>_model
    metrics = [SPAN_METRIC if role == "span" else role for role in models]
    names = {model_option(metric): name for metric, name in zip(metrics, models.values())}
    opts = EvalOptions(data="-", metrics=metrics,
                       scorer_device=tool.get("scorer_device", "auto"), **names)
    try:
        if tool.get("scorer_url"):
            url, token = tool["scorer_url"].rstrip("/"), scorer_service.token_from_env()
            qe_metrics.check_service(url, token, qe_metrics.model_names(opts))
            service = contextlib.nullcontext((url, token))
        else:
            service = scorer_service.started_service(scorer_service.plan_for(opts, scorer_cfg),
                                                     log=lambda m: print(m, file=sys.stderr, flush=True))
    except EvalUsageError as exc:
        raise UsageError(str(exc)) from None
    with service as (url, token):
        os.environ[ENV_URL], os.environ[ENV_TOKEN] = url, token
        yield url


async def _score_all(rows: list[Row], template: str, kw: dict, ask_scorer: bool) -> list[dict]:
    from src.rewards.client import close_clients
    from src.rewards.compute import compute_score

    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int, row: Row) -> dict:
        response = row.response if row.response is not None else wrap(row.hyp, template)
        async with gate:
            # data_source as verl passes it (the parquet's data_source column: <dataset>/<lang_pair>)
            return await compute_score(f"inspect/{row.lang_pair}", response, row.ref,
                                       extra_info(row, template, i), ask_scorer=ask_scorer, **kw)

    try:
        return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(rows))))
    finally:
        await close_clients()


def record(row: Row, result: dict) -> dict:
    components = {k: v for k, v in result.items() if k != "score" and k not in TEXT_KEYS}
    guards = [k for k, v in result.items() if k.startswith(GUARD_PREFIXES) and v == 1.0]
    out = {"id": row.id} if row.id is not None else {}
    spans = result.get("error_spans")
    out.update({"line": row.line, "lang_pair": row.lang_pair, "score": result["score"], "components": components,
                "guards": guards, "translation": result.get("translation", ""),
                "error_spans": json.loads(spans) if isinstance(spans, str) and spans else []})
    return out


def write_jsonl(path: Path, records: list[dict]) -> None:
    """All lines or nothing, and never over an existing file: a temp file beside the target,
    hard-linked to the name (link fails when the name exists), then removed."""
    from src.data.safe_write import file_mode

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        os.chmod(tmp, file_mode())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise UsageError(f"--out {path} appeared while scoring: it is never overwritten") from None
    finally:
        os.unlink(tmp)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if math.isfinite(value) else str(value)
    return str(value)


def table(records: list[dict], kw: dict, width: int | None) -> str:
    """One line per row: id, score, answer, format, each answer component (* = weighted in
    training), the guards that fired and the scored translation (cut to `width` when given)."""
    weights = kw["train_weights"]
    comps = list(weights)
    head = ["id", "score", "answer", "format"] + [c + ("*" if weights[c] else "") for c in comps] + ["guards"]
    body = []
    for r in records:
        c = r["components"]
        body.append([_fmt(r.get("id", f"line {r['line']}")), _fmt(r["score"]), _fmt(c.get("answer")),
                     c.get("format_error") or ("ok" if c.get("format_ok") == 1.0 else "-")]
                    + [_fmt(c.get(k)) for k in comps] + [",".join(g.split("_", 1)[1] for g in r["guards"]) or "-"])
    cols = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = []
    for cells in [head] + body:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(cells, cols)))
    out = []
    for i, line in enumerate(lines):
        text = "translation" if i == 0 else records[i - 1]["translation"].replace("\n", " ")
        full = f"{line}  {text}"
        out.append(full[:width - 1] + "…" if width and len(full) > width else full)
    weighted = ", ".join(f"{c} {w:g}" for c, w in weights.items() if w)
    out.append(f"training reward = format part + answer; answer = sum of weight x clip(component) "
               f"({weighted}), or the lowest penalty of the guards that fired; '-' = not computed "
               f"(a weighted one counts at its lower clip bound)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # one line, no traceback (issue 33); a scorer it started is stopped by its context
        print("stopped (interrupt): nothing was scored to the end; --out is written only when every row is",
              file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = _parser().parse_args(argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # nothing of a run's environment may leak in: no components dir to append to, and a
    # service only as chosen below
    from src.rewards.client import ENV_TOKEN, ENV_URL
    from src.rewards.components_log import ENV_DIR

    try:
        rows = read_rows(Path(args.input))
        out = Path(args.out) if args.out else None
        check_out(out)
        tool, overrides = split_overrides(args.overrides)
        cfg = compose(overrides)
        kw = reward_kwargs(cfg)
        template = str(cfg["data"]["template"])
        os.environ.pop(ENV_DIR, None)
        if args.no_scorer or "scorer_url" not in tool:
            os.environ.pop(ENV_URL, None)
        with scorer_for(training_models(kw), tool, cfg["scorer"], args.no_scorer):
            results = asyncio.run(_score_all(rows, template, kw, ask_scorer=not args.no_scorer))
        records = [record(r, res) for r, res in zip(rows, results)]
        if out is not None:
            write_jsonl(out, records)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (RuntimeError, OSError) as exc:  # the scorer's errors (start, unreachable, refused), a full disk
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"error: {first}", file=sys.stderr)
        return EXIT_FAILED
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    print(table(records, kw, width))
    if out is not None:
        print(f"wrote {len(records)} rows to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m src.evaluate key=value ...`: generate, extract, score, write.

Every input is checked before anything is written or started (the test set, the checkpoint and its
shards, the responses file, vLLM's presence, the scorer's URL/token/models or the checkpoints of
the models it would load): bad input is one line `evaluate: error: ...` and exit 2. A failure
after that (the merger, the scorer dying, a full disk) is one line and exit 1; nothing is left behind.
Nothing existing is replaced: `out=` must not exist yet (its parent must be writable), and the
default name gets -2, -3... when another evaluation took it in the same second.

    python -m src.evaluate checkpoint=results/.../global_step_200/actor data=data/flores/test.parquet
    python -m src.evaluate run=outputs/multirun/<date> steps=all data=data/flores/test.parquet   # every checkpoint

Steps, one module each: options (key=value arguments), checkpoint (HF dir or verl FSDP shards ->
verl's model merger), testset (the parquet of src.data.prepare) or testsets (standard test sets as
released: WMT24++, WMT xml, FLORES-200, aligned text; a table row per set and direction), generators
(vLLM on GPU, canned responses from a jsonl, or an outside system's hypotheses file), segments (the
`<translate>` part, parsed as the reward parses it, or the raw answer), text_metrics (sacrebleu BLEU/chrF),
qe_metrics (the QE scoring service through the reward's client), scorer_service (start that service when
no URL is given), baseline and comparison (an earlier evaluation to test against, significance's paired
bootstrap per row and metric), outputs (tables and jsonl); with run=, runs (which checkpoints) and run_results
(one table over their evaluations, each metric against the step).
"""
from __future__ import annotations

import datetime as dt
import sys
from dataclasses import asdict
from itertools import groupby
from pathlib import Path

from src.data import terms

from .options import BASELINE_MODEL_OPTIONS, EvalOptions, UsageError, given_baseline_model_options, parse_options

EXIT_BAD_INPUT, EXIT_FAILED = 2, 1
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as the shell reports it


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _stamp() -> str:
    return dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


def default_out(label: str, under: Path | None = None) -> Path:
    """outputs/eval/<time>_<label> (the data file's stem, or the test sets' names), or <under>/eval/<time>_<label>;
    write_outputs makes it unique (-2, -3...) when taken."""
    from src.config import PROJECT_ROOT

    from .run_results import EVAL_DIR

    return (under or PROJECT_ROOT / "outputs") / EVAL_DIR / f"{_stamp()}_{label}"


def _label(opts: EvalOptions, sets: list) -> str:
    return "+".join(s.name for s in sets) if sets else Path(opts.data).stem


def check_out(out: Path, explicit: bool) -> None:
    """`out` is new and its parent writable: found now, not after an hour of generation."""
    from src.data.safe_write import writable_dir_problem

    if explicit and (out.exists() or out.is_symlink()):
        raise UsageError(f"out: {out} already exists; evaluate never replaces or writes into an existing "
                         f"path: give a new out= (or leave out= unset for outputs/eval/<time>_<data>)")
    problem = writable_dir_problem(out.parent)
    if problem:
        raise UsageError(f"out: cannot create {out}: {problem}")


class Prepared:
    """Everything checked up front: what to generate with and where scores come from. `baseline_run`: the
    baseline= model's or hypotheses file's evaluation when the caller shares one (run=); `nested`: this is that
    evaluation, written inside the system's output dir (no out= of its own to check)."""

    def __init__(self, opts: EvalOptions, baseline_run: "BaselineRun | None" = None, nested: bool = False):
        from . import checkpoint, generators, testset, testsets
        from .baseline import EVALUATION, baseline_kind, describe_test_set, read_baseline

        self.opts = opts
        self.cpu = None  # accelerator=cpu: the CPU loop env vLLM generates in
        self.explicit_out = bool(opts.out)
        # testsets=: every set read whole (rows numbered on over the sets), `limit` rows of each evaluated
        self.sets = testsets.read_testsets(opts.testsets, opts.template) if opts.testsets else []
        self.out = Path(opts.out).expanduser() if opts.out else default_out(_label(opts, self.sets))
        if not nested:
            check_out(self.out, self.explicit_out)
        if self.sets:
            every_row = [r for s in self.sets for r in s.rows]
            self.rows = [r for s in self.sets for r in (s.rows[:opts.limit] if opts.limit else s.rows)]
        else:
            every_row = testset.read_testset(opts.data)
            self.rows = every_row[:opts.limit] if opts.limit else every_row
        self.resolved = checkpoint.resolve_checkpoint(opts.checkpoint) if opts.checkpoint else None
        problem = (checkpoint.merge_target_problem(self.resolved, opts.merged_dir)
                   if self.resolved and opts.generator == "vllm" else None)
        if problem:
            raise UsageError(problem)
        # an earlier evaluation: checked against the rows it must match, before anything is generated; a model or a
        # hypotheses file: its own evaluation checked as this one is (Prepared), run first
        self.baseline, self.baseline_run = None, baseline_run
        kind = baseline_kind(opts.baseline) if opts.baseline else None
        if kind == EVALUATION:
            if given_baseline_model_options(opts):
                raise UsageError(f"baseline={opts.baseline} is an earlier evaluation, already prompted and scored: "
                                 f"baseline_template/baseline_chat_template/baseline_extract are for a baseline model; "
                                 f"drop them")
            self.baseline = read_baseline(opts.baseline, opts, self.rows, describe_test_set(opts, self.sets))
        elif kind and self.baseline_run is None:
            self.baseline_run = BaselineRun(opts, kind)
        if opts.generator == "file":
            self.generator = generators.FileGenerator(opts.responses)
            self.generator.check(self.rows, known={r.index for r in every_row})
        elif opts.generator == "hypotheses":
            # the file's segments, dropped ones included; one test set (options.py refuses more)
            segments, what = (self.sets[0].segments, self.sets[0].spec) if self.sets else (len(every_row), opts.data)
            self.generator = generators.HypothesesGenerator(opts.hypotheses, segments, what)
        elif opts.accelerator == "cpu":
            self.cpu = generators.CpuLoopEnv.composed()
        elif not generators.vllm_available():
            raise UsageError("generator=vllm needs vLLM, which this environment lacks (run on a GPU node in the "
                             "qe-rl conda env; accelerator=cpu for vLLM's CPU build in the CPU loop env; or use "
                             "generator=file responses=...)")
        self.scorer_url = self.scorer_token = self.scorer_plan = None
        if opts.qe_metrics:
            self._check_scorer()

    def _check_scorer(self) -> None:
        from . import qe_metrics, scorer_service

        o = self.opts
        if o.scorer_url:
            self.scorer_url, self.scorer_token = o.scorer_url.rstrip("/"), scorer_service.token_from_env()
            qe_metrics.check_service(self.scorer_url, self.scorer_token, qe_metrics.model_names(o))
        else:
            self.scorer_plan = scorer_service.plan_for(o, scorer_service.composed_scorer_config())


class BaselineRun:
    """baseline= a model or a hypotheses file: evaluated with this evaluation's rows, metrics and sampling (the
    model prompted and read as the baseline_* options say), checked up front like any evaluation, run once before
    the systems it is compared with (run=: every checkpoint) and written into <out>/baseline/."""

    def __init__(self, opts: EvalOptions, kind: str):
        from dataclasses import replace

        from .baseline import HYPOTHESES
        from .options import HYPOTHESES_EXTRACT

        self.path = opts.baseline
        if kind == HYPOTHESES:
            own = given_baseline_model_options(opts)
            if own:
                raise UsageError(f"baseline={self.path} is a hypotheses file (one translation a line, read as it is): "
                                 f"{', '.join(own)} are for a baseline model; drop them")
            if opts.samples > 1:
                raise UsageError(f"baseline={self.path} is a hypotheses file, one answer a sentence, and samples="
                                 f"{opts.samples} gives this evaluation {opts.samples}: compare with samples=1, or "
                                 f"with a baseline model (baseline=MODEL_DIR)")
            how = dict(checkpoint=None, generator="hypotheses", hypotheses=self.path, responses=None,
                       extract=HYPOTHESES_EXTRACT, accelerator="gpu")
        else:
            how = dict(checkpoint=self.path, generator="vllm", hypotheses=None, responses=None,
                       template=opts.baseline_template or opts.template,
                       chat_template=(opts.chat_template if opts.baseline_chat_template is None
                                      else opts.baseline_chat_template),
                       extract=opts.baseline_extract or opts.extract)
        theirs = replace(opts, run=[], steps="all", baseline=None, out=None, trained_on=[], merged_dir=None,
                         **dict.fromkeys(BASELINE_MODEL_OPTIONS), **how)
        try:  # checked as checkpoint= or hypotheses= is, said of baseline=
            self.prepared = Prepared(theirs, nested=True)
        except UsageError as exc:
            raise UsageError(f"baseline: {exc}") from None
        self.result: tuple | None = None

    def evaluated(self) -> tuple[list[dict], list[dict], dict]:
        """(table rows, segment records, summary) of the baseline's evaluation, made on the first call."""
        from .baseline import BASELINE_DIR

        if self.result is None:
            _say(f"baseline: evaluating {self.path} first (written into <out>/{BASELINE_DIR}/)")
            self.result = evaluate(self.prepared)
        return self.result

    def baseline(self, opts: EvalOptions, rows: list):
        """Its evaluation as a system's baseline (src/evaluate/baseline.py Baseline), checked against its rows."""
        from .baseline import BASELINE_DIR, checked

        _, segments, _ = self.evaluated()
        return checked(Path(self.path).expanduser(), segments, self.prepared.opts.metrics, opts, rows,
                       evaluation=BASELINE_DIR)


def _generate(p: Prepared) -> tuple[list[str], str | None]:
    from . import checkpoint, generators

    if p.opts.generator in ("file", "hypotheses"):
        return p.generator.generate(p.rows), None
    model_dir = checkpoint.hf_model_dir(p.resolved, p.opts.merged_dir, log=_say)
    each = f" ({p.opts.samples} a sentence)" if p.opts.samples > 1 else ""
    _say(f"generating {len(p.rows) * p.opts.samples} translations{each} with vLLM{' (CPU)' if p.cpu else ''} "
         f"from {model_dir}")
    return generators.VLLMGenerator(model_dir, p.opts, p.cpu).generate(p.rows), str(model_dir)


def _qe_scores(p: Prepared, inputs) -> list[dict]:
    from . import qe_metrics, scorer_service

    if not p.opts.qe_metrics:
        return [dict() for _ in inputs]
    if p.scorer_url:
        return qe_metrics.score_segments(p.scorer_url, p.scorer_token, inputs, p.opts)
    with scorer_service.started_service(p.scorer_plan, log=_say) as (url, token):
        return qe_metrics.score_segments(url, token, inputs, p.opts)


def evaluate(p: Prepared) -> tuple[list[dict], list[dict], dict]:
    """(table rows per direction, segment records, summary); writes nothing."""
    from .qe_metrics import QEInput
    from .segments import extract_translation
    from .text_metrics import corpus_scores, segment_scores

    o = p.opts
    # a baseline made here goes first: a base model that cannot be evaluated fails before the system generates
    baseline = p.baseline_run.baseline(o, p.rows) if p.baseline_run else p.baseline
    responses, model_dir = _generate(p)
    answered = [(row, k) for row in p.rows for k in range(o.samples)]  # the order the generators answer in
    text_wanted = [m for m in ("bleu", "chrf") if m in o.metrics]
    segments = []
    for (row, sample), resp in zip(answered, responses):
        ex = extract_translation(resp, row.template, o.extract)
        seg = {"index": row.index, **({"sample": sample} if o.samples > 1 else {}), "data_source": row.data_source,
               "direction": row.direction, "src_lang": row.src_lang, "tgt_lang": row.tgt_lang, "src": row.src,
               "ref": row.ref, "response": resp, "translation": ex.translation, "format_ok": ex.format_ok,
               "format_error": ex.format_error}
        if row.terms is not None:  # a test set with terms: its required terms, and how many the translation has
            found, required = terms.hits(row.terms, row.src, ex.translation)
            seg.update(terms=[t.as_dict() for t in row.terms], terms_found=found, terms_required=required)
        if text_wanted:
            seg.update({k: v for k, v in segment_scores(ex.translation, row.ref, row.tgt_lang).items()
                        if k in text_wanted})
        segments.append(seg)
    inputs = [QEInput(src=s["src"], mt=s["translation"], ref=s["ref"], tgt_lang=s["tgt_lang"]) for s in segments]
    for seg, qe in zip(segments, _qe_scores(p, inputs)):
        seg.update(qe)

    from .outputs import direction_row

    rows, signatures, groups = [], {}, {}
    # a row per direction; with testsets=, per set and direction (data_source): WMT24++ en-zh and FLORES
    # en-zh are two results, never one mean
    row_key = (lambda s: s["data_source"]) if o.testsets else (lambda s: s["direction"])
    by_direction = sorted(segments, key=row_key)
    for direction, group in groupby(by_direction, key=row_key):
        group = groups[direction] = list(group)
        corpus = None
        if text_wanted:
            corpus = corpus_scores([s["translation"] for s in group], [s["ref"] for s in group],
                                   group[0]["tgt_lang"])
            signatures[direction] = {"bleu": corpus.bleu_signature, "chrf": corpus.chrf_signature}
        row = direction_row(direction, group, corpus)
        for metric in ("bleu", "chrf"):
            if metric not in o.metrics:
                row.pop(metric, None)
        rows.append(row)
    summary = {"data": str(Path(o.data).resolve()) if o.data else None, "checkpoint": o.checkpoint,
               "model_dir": model_dir, "generator": o.generator, "options": asdict(o),
               "sacrebleu_signatures": signatures,
               "scorer": p.scorer_url or ("started here" if p.scorer_plan else None),
               "created": dt.datetime.now().isoformat(timespec="seconds")}
    if baseline:
        from .comparison import compare

        summary["baseline"] = compare(baseline, groups, o.bootstrap_resamples, o.bootstrap_seed)
    if o.trained_on:  # only then: an evaluation without the option writes what it wrote before
        summary.update(trained_on=list(o.trained_on), held_out=o.held_out)
    if p.sets:  # what each set held and what was left out of it, for the paper's test-set description
        summary["testsets"] = [{"spec": s.spec, "name": s.name, "format": s.kind, "rows": len(s.rows),
                                "bad_source_dropped": s.bad_source_dropped,
                                "no_reference_dropped": s.no_reference_dropped, "references": s.references}
                               for s in p.sets]
    return rows, segments, summary


def _baseline_files(run: BaselineRun | None) -> dict:
    """The baseline's own evaluation, to write inside the system's output dir: {BASELINE_DIR: (rows, segments,
    summary)}, or nothing when the baseline was an earlier evaluation."""
    from .baseline import BASELINE_DIR

    return {BASELINE_DIR: run.result} if run and run.result else {}


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # one line, no traceback (issue 33); the services it started stop with their contexts
        print("evaluate: stopped (interrupt)", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: list[str] | None) -> int:
    from src.data.safe_write import os_reason

    from .outputs import print_table, write_outputs

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        from .options import help_text

        print(__doc__.strip().splitlines()[0] + "\n\nkeys (key=value), with their defaults:\n" + help_text()
              + "\n\nMore: docs/data-and-report.md (Evaluation)")
        return 0
    try:
        opts = parse_options(argv)
        if opts.run:
            return _main_runs(opts)
        prepared = Prepared(opts)
    except UsageError as exc:
        _say(f"evaluate: error: {exc}")
        return EXIT_BAD_INPUT
    for s in prepared.sets:
        dropped = [f"{n} {why}" for n, why in ((s.bad_source_dropped, "with is_bad_source"),
                                               (s.no_reference_dropped, "without a reference")) if n]
        if dropped:
            _say(f"{s.spec}: {len(s.rows)} segments; left out {' and '.join(dropped)}")
    try:
        rows, segments, summary = evaluate(prepared)
    except RuntimeError as exc:  # MergeError, the scorer's errors (start, unreachable, refused), vLLM's
        _say(f"evaluate: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        return EXIT_FAILED
    try:
        # an explicit out= that appeared meanwhile is not touched either: the results go beside it
        written = write_outputs(prepared.out, rows, segments, summary, unique=True,
                                trained_on=prepared.opts.trained_on, nested=_baseline_files(prepared.baseline_run))
    except OSError as exc:
        _say(f"evaluate: error: cannot write {prepared.out}: {os_reason(exc)}; nothing was written")
        return EXIT_FAILED
    what = Path(prepared.opts.data).name if prepared.opts.data else ",".join(s.name for s in prepared.sets)
    system = prepared.opts.checkpoint or prepared.opts.responses or prepared.opts.hypotheses
    print_table(rows, title=f"{what}: {system}", trained_on=prepared.opts.trained_on,
                versus=summary.get("baseline"))
    if prepared.explicit_out and written != prepared.out:
        _say(f"out: {prepared.out} was created by something else during the evaluation; wrote beside it: {written}")
    else:
        _say(f"wrote {written}")
    return 0


def _main_runs(opts: EvalOptions) -> int:
    """run=: every checkpoint found and checked before anything generates (UsageError), then each evaluated into
    <out>/<run>/step_<N>/ in a temp dir beside `out`, the results table and plots over them added
    (src/evaluate/run_results.py), and the whole dir published at the end: an interrupted or failed evaluation
    leaves nothing."""
    from dataclasses import replace

    from src.data.safe_write import new_dir_beside, os_reason, publish_dir

    from . import run_results, runs
    from .outputs import print_table, write_outputs

    found = runs.find(opts.run, opts.steps)

    def trained_on(c: runs.RunCheckpoint) -> list:
        """trained_on= as given, else what the checkpoint's run trained on, of the metrics computed."""
        return list(opts.trained_on) or [m for m in (c.trained_on or ()) if m in opts.metrics]
    # each checkpoint's evaluation checked as checkpoint= is: its shards, its merge target, the baseline's segments
    # a baseline model or hypotheses file: the first checkpoint's Prepared makes its evaluation, every other shares it
    prepared, shared = [], None
    for c in found:
        p = Prepared(replace(opts, run=[], steps="all", checkpoint=str(c.path), out=None, trained_on=trained_on(c)),
                     baseline_run=shared)
        prepared.append((c, p))
        shared = p.baseline_run
    # the results table marks its columns where every run trained on the same metrics
    marks = {tuple(p.opts.trained_on) for _, p in prepared}
    table_trained_on = list(marks.pop()) if len(marks) == 1 else None
    # by default into the run's or sweep's own eval/ (where python -m src.report shows it beside the curves)
    out = Path(opts.out).expanduser() if opts.out else default_out(_label(opts, prepared[0][1].sets),
                                                                   runs.home(opts.run))
    check_out(out, explicit=bool(opts.out))
    _say(f"run=: {len(found)} checkpoint(s) to evaluate: "
         + ", ".join(f"{c.run} step {c.step}" for c in found))
    try:
        with new_dir_beside(out) as tmp:
            evaluations = []
            for c, p in prepared:
                _say(f"{c.run} step {c.step}: {c.path}")
                rows, segments, summary = evaluate(p)
                sub = tmp / c.run / f"step_{c.step}"
                write_outputs(sub, rows, segments, summary, unique=False, trained_on=p.opts.trained_on)
                evaluations.append((c.run, c.step, sub, rows, summary))
            for name, (rows, segments, summary) in _baseline_files(shared).items():
                write_outputs(tmp / name, rows, segments, summary, unique=False)
            run_results.write(tmp, evaluations, table_trained_on, {c.run: c.configuration for c in found})
            written = publish_dir(tmp, out, unique=not opts.out)
    except RuntimeError as exc:  # as one evaluation's: the merger, the scorer, vLLM
        _say(f"evaluate: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; nothing was written")
        return EXIT_FAILED
    except OSError as exc:
        _say(f"evaluate: error: cannot write {out}: {os_reason(exc)}; nothing was written")
        return EXIT_FAILED
    rows, versus = run_results.combined(evaluations)
    print_table(rows, title=f"{len(found)} checkpoint(s) of {', '.join(opts.run)}", trained_on=table_trained_on,
                versus=versus)
    _say(f"wrote {written}")
    return 0

